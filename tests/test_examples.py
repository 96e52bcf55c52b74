"""The examples run as a user would run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_scripted_ide_session(era: str, tmp_path: Path) -> None:
    env = {**os.environ, "RLIDE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ide_session.py"), "--era", era],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    episode = json.loads(done.stdout)
    assert episode["episode"]["status"] == "success"
    assert [s["tool"] for s in episode["steps"]] == ["start_episode", "list_episodes", "give_feedback", "end_episode"]
    assert sorted(r["source"] for r in episode["rewards"]) == ["feedback", "outcome"]


def test_example_client_configs_are_valid_json() -> None:
    configs = sorted((ROOT / "examples" / "clients").glob("*.json"))
    assert {p.stem for p in configs} == {"claude-desktop", "cursor", "claude-code", "vscode", "roopik"}
    for path in configs:
        assert isinstance(json.loads(path.read_text()), dict), path
