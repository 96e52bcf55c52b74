"""scripts/gpu_smoke.sh, the GPU runbook's end-to-end check, run here on the CPU path that shares all
of it but the hardware: the `local` adapter over the stand-in of ART's LocalBackend (`art-cpu`), the
tiny model and toy scenarios. The worker daemon trains, `rlide eval` and `rlide policy serve` reach the
run through the server it published, an answer is recorded with its tokens, and the JSON says so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envpool.sandbox.bwrap import bwrap_available
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_smoke_script_runs_the_gpu_path_on_the_cpu_stand_in(tmp_path: Path) -> None:
    pytest.importorskip("art")
    if bwrap_available() is None or shutil.which("curl") is None:
        pytest.skip("the script's eval runs programs in the bwrap sandbox and talks HTTP with curl")
    env = {
        **os.environ,
        "RLIDE": str(Path(sys.executable).parent / "rlide"),
        "BACKEND": "art-cpu",
        "BASE_MODEL": "tiny-qwen2",
        "SCENARIOS": "toy",
        "STEPS": "2",
        "EVAL_TASKS": "1",
        "EVAL_MAX_TOKENS": "8",
        "PORT": str(free_port()),
        "RLIDE_HOME": str(tmp_path),
    }
    env.pop("RLIDE_DATABASE_URL", None)
    env.pop("RLIDE_CONFIG", None)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_smoke.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["ok"] and report["backend"] == "art-cpu" and report["steps"] >= 2
    assert report["eval"]["n"] == 1 and report["eval"]["checkpoint_step"] >= 2
    endpoint = report["endpoint"]
    step = int(endpoint["recorded_turn_model"].split("@")[1])
    # The worker trains on while the endpoint serves: the turn may meet a checkpoint newer than the
    # one /v1/models listed a moment before (CI saw student@12 listed, @13 answer).
    [alias, listed] = endpoint["models"]
    assert alias == "student" and 2 <= int(listed.removeprefix("student@")) <= step
    assert endpoint["recorded_turn_model"] == f"student-{report['run']}@{step}"  # the run's own model
    assert endpoint["recorded_prompt_tokens"] > 0 and endpoint["completion_tokens"] > 0
    assert not any((tmp_path / "art").glob("*/models/*/.served.json.*"))  # published whole
