"""`rlide train`, `rlide train status`, `rlide policy serve` and `rlide eval` as a user meets them:
one-line errors, an empty state that is not an error, a port checked before the model loads, and
JSON alone on stdout. The real CLI (in process, and as a subprocess where file descriptors matter)
over a real episode log in the `rlide_home` fixture's home."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

runner = CliRunner()


def test_train_json_is_alone_on_stdout_when_a_library_prints(rlide_exe: Path) -> None:
    """litellm prints a "Give Feedback / Get Help" banner on stdout when a judge call fails (here: no
    API key): `rlide train --once --json` still writes its report alone on stdout, the banner on stderr."""
    pytest.importorskip("torch", reason="the training extra is not installed")
    pytest.importorskip("litellm")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LITELLM_LOG"))}
    argv = ["train", "--once", "--json", "--group-size", "2", "--groups-per-step", "1"]
    done = subprocess.run(
        [str(rlide_exe), *argv, "--judge-model", "openai/gpt-4o-mini"], env=env, capture_output=True, timeout=600
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    report = json.loads(done.stdout)
    assert report["run"] == "default" and report["rollouts"] == 2
    assert b"Give Feedback" in done.stderr and b"judge_failed" in done.stderr
