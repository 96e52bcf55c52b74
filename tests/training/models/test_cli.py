"""`rlide models` through its runner, and the light import it promises (no torch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mcp_server.cli.app import app
from tests.training.models.conftest import ROOT, FetchRun
from training.models.registry import PACKAGED, QWEN_CODER, SMOLLM2

runner = CliRunner()


@pytest.fixture
def cache(smollm2_fetched: FetchRun, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The session's cache: SmolLM2 converted there, Qwen absent."""
    monkeypatch.setenv("RLIDE_MODEL_CACHE", str(smollm2_fetched.cache))
    return smollm2_fetched.cache


@pytest.mark.slow
def test_list_json_says_what_is_here_where_and_under_which_terms(cache: Path) -> None:
    result = runner.invoke(app, ["models", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert list(rows) == list(PACKAGED)
    smol, qwen = rows[SMOLLM2.name], rows[QWEN_CODER.name]
    assert smol["present"] and smol["path"] == str(cache / SMOLLM2.name)
    assert 500e6 < smol["size_bytes"] < 600e6  # 135M parameters in float32, and the tokenizer
    assert smol["converted_with"]["transformers"]
    assert not qwen["present"] and qwen["size_bytes"] is None and qwen["download_bytes"] == QWEN_CODER.download_bytes
    assert qwen["licence"].startswith("Apache-2.0") and "unrelated to the content" in qwen["caveat"]


@pytest.mark.slow
def test_list_text_shows_the_fetch_command_for_an_absent_model(cache: Path) -> None:
    result = runner.invoke(app, ["models", "list"])
    assert result.exit_code == 0, result.output
    assert f"rlide models fetch {QWEN_CODER.name}" in result.stdout
    assert f"present  {cache / SMOLLM2.name}" in result.stdout


@pytest.mark.slow
def test_path_prints_a_present_models_folder(cache: Path) -> None:
    result = runner.invoke(app, ["models", "path", SMOLLM2.name])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(cache / SMOLLM2.name)


def test_path_of_an_absent_model_fails_with_the_fetch_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLIDE_MODEL_CACHE", str(tmp_path))
    result = runner.invoke(app, ["models", "path", QWEN_CODER.name])
    assert result.exit_code == 1 and result.stdout == ""
    assert f"rlide models fetch {QWEN_CODER.name}" in result.stderr


def test_unknown_names_are_refused_with_the_packaged_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLIDE_MODEL_CACHE", str(tmp_path / "cache"))
    for command in (["path"], ["fetch"]):
        result = runner.invoke(app, ["models", *command, "gpt-5"])
        assert result.exit_code == 1
        assert "no packaged model 'gpt-5'" in result.stderr and SMOLLM2.name in result.stderr
    assert not (tmp_path / "cache").exists()


def test_listing_models_and_the_doctor_import_no_torch(rlide_env: dict[str, str], tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from mcp_server.cli.app import app\n"
        "listed = CliRunner().invoke(app, ['models', 'list', '--json'])\n"
        "doctor = CliRunner().invoke(app, ['doctor', '--json'])\n"
        "heavy = sorted({'torch', 'transformers', 'peft', 'art'} & set(sys.modules))\n"
        "report = {'heavy': heavy, 'listed': json.loads(listed.stdout), 'doctor': json.loads(doctor.stdout)}\n"
        "print(json.dumps(report))\n"
    )
    env = {**os.environ, **rlide_env, "RLIDE_MODEL_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["heavy"] == []
    assert [row["present"] for row in report["listed"]] == [False] * len(PACKAGED)
    lines = {check["name"]: check for check in report["doctor"]["checks"] if check["area"] == "base model"}
    assert list(lines) == list(PACKAGED) and not any(check["ok"] for check in lines.values())
    assert f"rlide models fetch {QWEN_CODER.name}" in lines[QWEN_CODER.name]["detail"]
