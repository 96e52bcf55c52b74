"""`local`: ART's LocalBackend (unsloth + vLLM on an NVIDIA GPU). Not exercised in CI (no GPU).

What openpipe-art 0.5.18 needs, read from its source: its `backend` extra (torch 2.10.0, transformers
5.2.0, unsloth; `pip install 'rlide[gpu]'`, docs/gpu.md) and a CUDA GPU in the training environment,
but not vLLM there: at first start it builds its own vLLM runtime (Python 3.12) with `uv sync` into
~/.cache/art/vllm_runtime (network needed once), unless ART_VLLM_RUNTIME_BIN names a runtime server.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
from pathlib import Path
from typing import Any

from training.backends._art_common import ArtBackendAdapter, missing_modules
from training.backends.base import BackendConfig, BackendUnavailable

ART_VERSION = "0.5.18"
"""The openpipe-art this adapter was written and checked against."""
GPU_INSTALL = "pip install 'rlide[gpu]' in a Python 3.11 or 3.12 environment, docs/gpu.md"


def _art_version() -> str | None:
    try:
        return importlib.metadata.version("openpipe-art")
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvidia_driver() -> bool:
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def _vllm_runtime() -> str | None:
    """What stops ART from starting its vLLM runtime, or None."""
    given = os.environ.get("ART_VLLM_RUNTIME_BIN")
    if given:
        program = given.split()[0]
        if shutil.which(program) is None:
            return f"ART_VLLM_RUNTIME_BIN to name an executable runtime server ({program!r} is not one)"
        return None
    if shutil.which("uv") is None:
        return (
            "uv on PATH: ART installs its own vLLM runtime with `uv sync` at first start"
            " (pip install uv, or set ART_VLLM_RUNTIME_BIN to an installed runtime server)"
        )
    return None


class LocalArtBackend(ArtBackendAdapter):
    name = "local"
    serves_model_at_step = True

    @staticmethod
    def missing(config: BackendConfig) -> list[str]:
        problems = []
        modules = missing_modules("art", "torch", "unsloth")
        version = _art_version()
        if modules:
            problems.append(f"{', '.join(modules)} ({GPU_INSTALL})")
        elif version != ART_VERSION:
            problems.append(f"openpipe-art {ART_VERSION}, not {version} ({GPU_INSTALL})")
        if not _nvidia_driver():
            problems.append("an NVIDIA GPU and its driver (no /proc/driver/nvidia/version, no nvidia-smi)")
        runtime = _vllm_runtime()
        if runtime:
            problems.append(runtime)
        if config.base_model == "tiny-qwen2":
            problems.append("a Hugging Face base model, e.g. --base-model Qwen/Qwen2.5-1.5B-Instruct")
        return problems

    def model_options(self) -> dict[str, Any]:
        """The run's LoRA shape for unsloth (ART's default targets for `all-linear`); tools rendered in
        training as vLLM's OpenAI server renders them for sampling, so rebuilt prompts match; and vLLM
        reporting each sampled token's logprob before temperature (`raw_logprobs`): the policy's own,
        which is what ART's trainer recomputes, whatever temperature a rollout or agent sampled at."""
        peft: dict[str, Any] = {"r": self.config.lora_rank, "lora_alpha": 2 * self.config.lora_rank}
        if self.config.lora_targets != "all-linear":
            peft["target_modules"] = [name.strip() for name in self.config.lora_targets.split(",") if name.strip()]
        internal = {
            "peft_args": peft,
            "chat_template_tool_schema_format": "vllm_openai",
            "engine_args": {"logprobs_mode": "raw_logprobs"},
        }
        return {"_internal_config": internal}

    def train_options(self) -> dict[str, Any]:
        """The run's KL coefficient (ART's own estimator: see docs/gpu.md), and the old logprobs of the
        importance ratio recomputed by the trainer before the update (`precalculate_logprobs`): vLLM's
        sampled logprobs differ from the trainer's by float error (bf16), which would skew every
        on-policy ratio; the sampled ones stay as `original_logprobs`."""
        return {"kl_penalty_coef": self.config.kl_penalty_coef, "precalculate_logprobs": True}

    def make_art_backend(self) -> Any:
        import torch
        from art.local import LocalBackend

        # `missing` saw a driver without importing torch (doctor stays light); this is whether torch can use it.
        if not torch.cuda.is_available():
            raise BackendUnavailable(
                "the local training backend needs an NVIDIA GPU that torch can use: torch.cuda.is_available()"
                f" is False (torch {torch.__version__}: a CPU-only build, or a driver older than its CUDA)"
            )

        return LocalBackend(path=str(self.config.path.expanduser()))
