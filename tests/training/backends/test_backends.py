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


@pytest.mark.parametrize(
    ("name", "needs"),
    [
        ("local", r"vllm|unsloth|wandb|GPU"),
        ("serverless", r"wandb|WANDB_API_KEY"),
        ("tinker", r"tinker|TINKER_API_KEY"),
    ],
)
def test_remote_backends_fail_fast_here(name: str, needs: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    with pytest.raises(BackendUnavailable, match=needs):
        make_backend(BackendConfig(backend=name, path=tmp_path, base_model="Qwen/Qwen2.5-1.5B-Instruct"))


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
