"""Backend selection: one config string; unavailable backends fail fast with a message that says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from training.backends import BackendConfig, BackendUnavailable, make_backend

ROOT = Path(__file__).parents[3]


def test_unknown_backend_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="cpu, local, serverless, tinker"):
        make_backend(BackendConfig(backend="gpu-please", path=tmp_path))


def _refusal(name: str, tmp_path: Path, base_model: str = "Qwen/Qwen2.5-1.5B-Instruct") -> str:
    with pytest.raises(BackendUnavailable) as refused:
        make_backend(BackendConfig(backend=name, path=tmp_path, base_model=base_model))
    return str(refused.value)


def _program(folder: Path, name: str) -> Path:
    folder.mkdir(exist_ok=True)
    program = folder / name
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    return program


def test_local_says_everything_art_lacks_here_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What openpipe-art 0.5.18's LocalBackend needs (its backend extra, a GPU, uv for the vLLM
    runtime it builds itself), never vllm in the training environment."""
    monkeypatch.delenv("ART_VLLM_RUNTIME_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    refusal = _refusal("local", tmp_path, base_model="tiny-qwen2")
    assert "unsloth" in refusal and "rlide[gpu]" in refusal  # ART's backend extra is not installed here
    assert ("NVIDIA GPU" in refusal) is not Path("/proc/driver/nvidia/version").exists()
    assert "uv on PATH" in refusal and "a Hugging Face base model" in refusal
    assert "vllm" not in refusal.lower().replace("vllm runtime", "").replace("art_vllm_runtime_bin", "")

    monkeypatch.setenv("PATH", str(_program(tmp_path / "bin", "uv").parent))
    assert "uv on PATH" not in _refusal("local", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("ART_VLLM_RUNTIME_BIN", f"{_program(tmp_path / 'runtime', 'server')} --flag")
    assert "uv" not in _refusal("local", tmp_path).replace("unsloth", "")
    monkeypatch.setenv("ART_VLLM_RUNTIME_BIN", str(tmp_path / "no-such-server"))
    assert "ART_VLLM_RUNTIME_BIN to name an executable runtime server" in _refusal("local", tmp_path)


def test_hosted_backends_name_their_packages_and_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    serverless = _refusal("serverless", tmp_path)
    assert "WANDB_API_KEY" in serverless and "wandb" in serverless.replace("WANDB", "")  # wandb is not installed here
    tinker = _refusal("tinker", tmp_path, base_model="tiny-qwen2")
    assert "TINKER_API_KEY" in tinker and "tinker_cookbook" in tinker and "hosted base model" in tinker
    monkeypatch.setenv("WANDB_API_KEY", "k")
    assert "WANDB_API_KEY" not in _refusal("serverless", tmp_path)


def test_doctor_shows_what_each_art_backend_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_server.cli.doctor import check_training
    from mcp_server.settings import Settings

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    checks = {check.name: check for check in check_training(Settings(training_backend="serverless"))}
    assert checks["cpu"].ok  # the training extra is installed here
    assert not checks["serverless"].ok and checks["serverless"].selected
    assert "wandb" in checks["serverless"].detail and "WANDB_API_KEY" in checks["serverless"].detail
    assert not checks["local"].ok and "unsloth" in checks["local"].detail


def test_cpu_backend_names_what_is_wrong_with_its_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any causal LM trains on the cpu backend now; a base model it cannot have, or a dtype it does
    not know, is refused with what to do, before anything is loaded."""
    pytest.importorskip("torch")
    pytest.importorskip("art")
    with pytest.raises(BackendUnavailable, match="float32, bfloat16 or auto"):
        make_backend(BackendConfig(backend="cpu", path=tmp_path, dtype="float8"))
    backend = make_backend(BackendConfig(backend="cpu", path=tmp_path, base_model="no-such-model"))
    with pytest.raises(BackendUnavailable, match="'no-such-model'.*packaged model"):
        backend.start()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    backend = make_backend(BackendConfig(backend="cpu", path=tmp_path, base_model="someone/never-downloaded"))
    with pytest.raises(BackendUnavailable, match="cannot be reached"):
        backend.start()


def test_light_modules_import_no_heavy_packages() -> None:
    """What the MCP server may import (status, store, export, scenarios, groups) pulls in no torch/art/ray."""
    code = (
        "import sys\n"
        "import training.worker.status, episodes.store, training.data.export, training.scenarios.base,"
        " training.data.groups, training.worker.loop, training.backends, episodes.codec, training.gateway.app,"
        " training.gateway.engines\n"
        "heavy = ('torch', 'art', 'ray', 'transformers', 'openai', 'matplotlib')\n"
        "print(','.join(sorted(m for m in heavy if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_local_hands_the_runs_settings_to_art(tmp_path: Path) -> None:
    """The run's name, LoRA shape, KL and tool format reach ART's own `TrainableModel` (its
    `_internal_config`, which ART's `get_model_config` lays over its defaults to start unsloth and
    vLLM; that function itself needs megatron, absent here); no GPU needed."""
    pytest.importorskip("art")
    from training.backends.art_local import LocalArtBackend

    config = BackendConfig(
        backend="local", path=tmp_path, base_model="Qwen/Qwen2.5-1.5B-Instruct", run="gpu-1",
        lora_rank=16, lora_targets="q_proj, v_proj", kl_penalty_coef=0.05,
    )  # fmt: skip
    adapter = LocalArtBackend(config)
    model = adapter.trainable_model()
    assert (model.name, model.project, model.base_model) == ("student-gpu-1", "rlide", "Qwen/Qwen2.5-1.5B-Instruct")
    assert model._get_output_dir() == str(config.model_dir())  # ART's files in the run's own folder
    assert model._internal_config == {
        "peft_args": {"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"]},
        "chat_template_tool_schema_format": "vllm_openai",
        "engine_args": {"logprobs_mode": "raw_logprobs"},  # logprobs at temperature 1, as ART recomputes them
    }
    # ART recomputes the old logprobs with its trainer before the update (the ratio is 1 on-policy).
    assert adapter.train_options() == {"kl_penalty_coef": 0.05, "precalculate_logprobs": True}
    import inspect

    from art.local import LocalBackend

    assert set(adapter.train_options()) <= set(inspect.signature(LocalBackend.train).parameters)
    every_linear = LocalArtBackend(BackendConfig(backend="local", base_model="Qwen/Qwen2.5-1.5B-Instruct"))
    assert every_linear.trainable_model()._internal_config["peft_args"] == {"r": 8, "lora_alpha": 16}  # ART's targets
    assert every_linear.trainable_model().name == "student"  # the default run keeps its directory
    adapter.close()
    every_linear.close()
