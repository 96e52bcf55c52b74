"""The protocol every trainer satisfies, its config, and the one function that picks a backend.

    cpu         a real GRPO step with ART's tokenize/pack/loss on a tiny from-config model (tests, CI)
    local       ART LocalBackend: GPU + vLLM + unsloth
    serverless  ART ServerlessBackend on W&B (needs WANDB_API_KEY)
    tinker      ART TinkerBackend (needs TINKER_API_KEY)
    art-cpu     the `local` adapter over a CPU stand-in of ART's LocalBackend (tests, laptops)

`make_backend(config)` imports only the chosen module and calls its `check()` first, so a missing
package, GPU or key fails at start-up with a message that says what to install or set, instead
of minutes into a run.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from training.data.fit import Unusable
from training.data.groups import Group

BACKENDS = {
    "cpu": "training.backends.cpu:CpuBackend",
    "local": "training.backends.art_local:LocalArtBackend",
    "serverless": "training.backends.serverless:ServerlessArtBackend",
    "tinker": "training.backends.tinker:TinkerArtBackend",
    "art-cpu": "training.backends.art_cpu:CpuArtBackend",
}


RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFAULT_RUN = "default"
IDENTITY = ("backend", "base_model", "learning_rate", "lora_rank", "lora_targets", "dtype", "kl_penalty_coef")
"""What a training run is: its checkpoints only make sense with these, so a run resumed with another
value of any of them is refused (`TrainingRuns.ensure_run`)."""


def check_run_name(name: str) -> str:
    """A run name is a folder name of its own: letters, digits, '.', '_' and '-', at most 64."""
    if not RUN_NAME.fullmatch(name):
        raise ValueError(f"run name {name!r}: use letters, digits, '.', '_' and '-' (at most 64, not first)")
    return name


class BackendError(Exception):
    """A training backend failed; the worker backs off and retries."""


class BackendUnavailable(BackendError):
    """The chosen backend cannot run here (missing package, GPU or key). Not retried."""


class NoTrainableData(BackendError):
    """The batch has nothing to learn from (every conversation too long, no assistant tokens).
    Retrying the same batch cannot help: the worker sets it aside instead of backing off."""

    def __init__(self, message: str, skipped: dict[int, Unusable] | None = None) -> None:
        super().__init__(message)
        self.skipped = skipped or {}
        """Why each input item could not be used, by its index."""


class ContextTooLong(ValueError):
    """A prompt that leaves the policy no room to answer. Not a backend failure: the policy endpoint
    refuses it (400 `context_length_exceeded`; the message says "maximum context length", as
    OpenAI's and vLLM's do, which agents read as "shorten the history") and self-play sets its
    scenario aside."""


@dataclass
class BackendConfig:
    """What every backend needs. Field docs double as the `rlide.toml` [training] reference."""

    backend: str = "cpu"
    """One of: cpu, local, serverless, tinker, art-cpu."""
    path: Path = Path("~/.local/share/rlide/art")
    """ART's directory: checkpoints live under {path}/{project}/models/{run_model_name}/checkpoints/{step:04d}."""
    project: str = "rlide"
    """ART project name."""
    model_name: str = "student"
    """The trained model's name; the gateway serves its latest checkpoint under this alias."""
    run: str = DEFAULT_RUN
    """The training run the checkpoints belong to (the worker sets it from its own): each run has
    a directory of its own, so one run never reads, rolls back or overwrites another's."""
    base_model: str = "tiny-qwen2"
    """The model trained: 'tiny-qwen2' (built on the spot; tests), a packaged offline model by its short
    name (`rlide models list`, e.g. qwen2.5-coder-0.5b-instruct), a local folder holding a Hugging Face
    model, or a Hugging Face id (needs hub access; e.g. Qwen/Qwen2.5-1.5B-Instruct)."""
    learning_rate: float | None = None
    """Optimizer learning rate per step; None picks the backend's default (cpu: 2e-2 for tiny-qwen2,
    1e-4 for a pretrained model; ART backends: 5e-6)."""
    seed: int = 0
    """Seeds torch, random and the tiny model's initialisation."""
    max_seq_len: int | None = None
    """Longest sequence the trainer sees; longer conversations are skipped and counted. None: the
    model's context, at most 4096 tokens (an episode with its tools' schemas takes 2-3 thousand)."""
    lora_rank: int = 8
    """LoRA rank (alpha is twice the rank)."""
    lora_targets: str = "all-linear"
    """Modules LoRA adapts: comma-separated names (q_proj,v_proj) or all-linear."""
    dtype: str = "auto"
    """cpu backend weights: float32, bfloat16, or auto (bfloat16 for a pretrained model where the CPU
    computes it natively, else float32)."""
    kl_penalty_coef: float = 0.0
    """Pull training towards the base model (adapters off) by this much; 0 skips the reference pass.
    GRPO (cpu, art-cpu): coef x the k3 estimate of KL(policy || base), exp(r) - r - 1 with
    r = log base - log policy at each sampled token, averaged over the batch's sampled tokens and
    added to the loss. GRPO on ART's own backends (local, serverless, tinker): ART's term, which is not
    that: coef x (mean - own) of the k1 estimate (log policy - log base) added to each token's
    advantage, the mean taken per micro-batch. SFT (cpu backend): the forward KL from the base's
    next-token distribution at each trained token, whole vocabulary (keeps what the base would also
    have said, so narrow demonstrations cost less elsewhere)."""
    dpo_beta: float = 0.1
    """DPO: how strongly the preference margin is pushed (the beta of the DPO paper and TRL)."""
    gradient_checkpointing: bool | None = None
    """cpu backend: keep each layer's input only and recompute its activations in the backward pass,
    for a step on a long episode in less memory and more time (figures: docs/training.md). None:
    on for a step whose longest sequence passes 1,024 tokens."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Backend-specific options (e.g. lora rank, ART's dev.TrainConfig keys)."""

    def __post_init__(self) -> None:
        check_run_name(self.run)

    @property
    def run_model_name(self) -> str:
        """The run's model, as ART names it: `student` for the default run (where checkpoints have
        always been), `student-{run}` for any other."""
        return self.model_name if self.run == DEFAULT_RUN else f"{self.model_name}-{self.run}"

    def identity(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in IDENTITY}

    def model_dir(self) -> Path:
        return self.path.expanduser() / self.project / "models" / self.run_model_name

    def checkpoint_dir(self, step: int) -> Path:
        return self.model_dir() / "checkpoints" / f"{step:04d}"


@dataclass
class TrainResult:
    step: int
    """The step the model is at after training."""
    metrics: dict[str, float] = field(default_factory=dict)
    skipped: dict[int, Unusable] = field(default_factory=dict)
    """Input items the step set aside (by index), with why: e.g. longer than max_seq_len."""


@runtime_checkable
class TrainingBackend(Protocol):
    name: str
    config: BackendConfig

    def start(self) -> int:
        """Load or create the model; return the step of the checkpoint it resumed from (0 if none)."""

    def sample(
        self,
        messages: list[dict[str, Any]],
        *,
        n: int,
        max_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[Any]:
        """`n` completions of the current policy as OpenAI `Choice` objects with per-token logprobs."""

    def train(self, groups: list[Group]) -> TrainResult:
        """One optimizer step on these groups (already filtered); saves the new checkpoint."""

    def rollback(self, step: int) -> None:
        """Forget checkpoints after `step` (they were saved but never committed to the log)."""

    def close(self) -> None: ...


@runtime_checkable
class SupportsSFT(Protocol):
    """Backends that can also take a supervised step on `sft` export records (cpu today)."""

    def train_sft(self, conversations: list[dict[str, Any]]) -> TrainResult:
        """One optimizer step on these chat records; saves checkpoint step+1 like `train`.
        Raises `NoTrainableData` when none of them has anything to learn from."""


@runtime_checkable
class SupportsDPO(Protocol):
    """Backends that can take a preference step on `dpo` export records (cpu today)."""

    def train_dpo(self, pairs: list[dict[str, Any]]) -> TrainResult:
        """One optimizer step on these pairs; saves checkpoint step+1 like `train`.
        Raises `NoTrainableData` when none of them is usable."""


def make_backend(config: BackendConfig) -> TrainingBackend:
    target = BACKENDS.get(config.backend)
    if target is None:
        raise BackendUnavailable(f"unknown training backend {config.backend!r}; choose one of {', '.join(BACKENDS)}")
    module_name, cls_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendUnavailable(
            f"the {config.backend} training backend needs packages that are not installed ({exc.name}):"
            " pip install 'rlide[training]'"
        ) from exc
    cls = getattr(module, cls_name)
    cls.check(config)
    backend: TrainingBackend = cls(config)
    return backend


def checkpoint_steps(model_dir: Path) -> list[int]:
    """Steps that have a checkpoint directory, ascending."""
    root = model_dir / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())
