"""`rlide train`, `rlide train status`, `rlide policy serve` and `rlide eval` as a user meets them:
one-line errors, an empty state that is not an error, a port checked before the model loads, and
JSON alone on stdout. The real CLI (in process, and as a subprocess where file descriptors matter)
over a real episode log in the `rlide_home` fixture's home."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from episodes.store import EpisodeStore
from mcp_server.cli.app import app
from mcp_server.settings import load_settings
from tests.conftest import free_port
from training.backends.base import BackendConfig

runner = CliRunner()


def _started_run(name: str = "default", **backend: object) -> BackendConfig:
    """Run `name` as a worker leaves it once its backend started: its identity pinned in the log."""
    settings = load_settings()
    config = BackendConfig(path=settings.home / "art", run=name, **backend)  # type: ignore[arg-type]
    store = EpisodeStore.open(settings.episode_db_url)
    try:
        identity = config.identity()
        store.runs.ensure_run(name, backend=config.backend, base_model=config.base_model, identity=identity)
    finally:
        store.close()
    return config


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield int(other.getsockname()[1])


def test_a_run_resumed_with_another_base_model_option_is_refused_in_one_line(busy_port: int) -> None:
    """Options that ask an existing run for another base model or hyperparameter: `rlide train` says in
    one line that the run keeps its own, which options asked, and both ways on, before anything loads.
    RLIDE_TRAINING_BASE_MODEL changed under the run is no refusal: `train` (tests/training/worker/
    test_watch_and_trust.py), `eval` and `policy serve` use the run's own base model and say so on stderr."""
    config = _started_run()
    for mode in ("--once", "--daemon"):
        refused = runner.invoke(app, ["train", mode, "--json", "--base-model", "smollm2-135m-instruct"])
        assert refused.exit_code == 1 and isinstance(refused.exception, SystemExit), refused.output
        assert refused.stdout == ""
        [line] = refused.stderr.splitlines()
        assert line.startswith("error: training run 'default' keeps its base model 'tiny-qwen2'"), line
        assert "(--base-model asks for 'smollm2-135m-instruct')" in line
        assert "leave --base-model out" in line and line.endswith("--run default-2")
    flagged = runner.invoke(app, ["train", "--once", "--base-model", "smollm2-135m-instruct", "--lora-rank", "4"])
    [line] = flagged.stderr.splitlines()
    assert "its base model 'tiny-qwen2' (--base-model asks for 'smollm2-135m-instruct')" in line
    assert "its lora rank 8 (--lora-rank asks for 4)" in line
    assert "leave --base-model out and leave --lora-rank out" in line
    assert not (config.model_dir() / "base").exists()  # refused before the model loaded


def test_eval_and_serve_use_the_runs_own_base_model(monkeypatch: pytest.MonkeyPatch, busy_port: int) -> None:
    _started_run()
    monkeypatch.setenv("RLIDE_TRAINING_BASE_MODEL", "smollm2-135m-instruct")
    note = "note: run 'default' keeps the base model it was started with, 'tiny-qwen2'"
    evaluated = runner.invoke(app, ["eval", "--tasks", "missing.jsonl"])
    assert evaluated.exit_code == 1 and note in evaluated.stderr and evaluated.stdout == ""
    served = runner.invoke(app, ["policy", "serve", "--port", str(busy_port)])
    assert served.exit_code == 1 and note in served.stderr and served.stdout == ""


def test_train_status_before_any_run_is_an_empty_state_not_an_error() -> None:
    shown = runner.invoke(app, ["train", "status", "--json"])
    assert shown.exit_code == 0, shown.output
    state = json.loads(shown.stdout)
    assert state["run"] is None and "rlide train --once" in state["message"]
    human = runner.invoke(app, ["train", "status"])
    assert human.exit_code == 0 and "no training run yet" in human.stdout
    missing = runner.invoke(app, ["train", "status", "--run", "nope", "--json"])  # a named run is looked up
    assert missing.exit_code == 1 and "no training run named 'nope'" in missing.stderr
    help_text = runner.invoke(app, ["train", "status", "--help"]).stdout
    assert '"run": null' in help_text


def test_a_failed_start_leaves_the_run_that_trained_as_the_latest() -> None:
    """`rlide train --run NAME` whose backend cannot start (a base model that is nowhere) records no
    run: `rlide train status` goes on showing the older one."""
    pytest.importorskip("torch", reason="the training extra is not installed")
    _started_run()
    failed = runner.invoke(app, ["train", "--once", "--run", "bad", "--base-model", "does-not/exist"])
    assert failed.exit_code == 1 and "base model 'does-not/exist'" in failed.stderr and failed.stdout == ""
    assert "(the base model came from --base-model)" in failed.stderr  # the setting to change, by name
    shown = runner.invoke(app, ["train", "status", "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["run"] == "default"
    store = EpisodeStore.open(load_settings().episode_db_url)
    try:
        assert [r.name for r in store.runs.list_runs()] == ["default"]
    finally:
        store.close()


def test_policy_serve_refuses_a_busy_port_before_loading_the_model(busy_port: int) -> None:
    started = time.monotonic()
    refused = runner.invoke(app, ["policy", "serve", "--port", str(busy_port)])
    assert refused.exit_code == 1 and isinstance(refused.exception, SystemExit), refused.output
    assert f"port {busy_port} on 127.0.0.1 is already in use" in refused.stderr and "--port" in refused.stderr
    assert refused.stdout == ""
    model_dir = BackendConfig(path=load_settings().home / "art").model_dir()
    assert not (model_dir / "base").exists()  # the tiny model is made on first load: it never loaded
    assert time.monotonic() - started < 10


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        content = path.read_text(errors="replace")
        if text in content:
            return content
        assert proc.poll() is None, f"exited {proc.returncode}: {content}"
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not seen in {timeout_s}s: {path.read_text(errors='replace')}")


def test_policy_serve_says_where_it_listens_on_stderr_only(rlide_exe: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the training extra is not installed")
    openai = pytest.importorskip("openai")
    port = free_port()
    stdout, stderr = tmp_path / "serve.out", tmp_path / "serve.err"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen([str(rlide_exe), "policy", "serve", "--port", str(port)], stdout=out, stderr=err)
    try:
        said = _wait_for(stderr, "listening on", proc, timeout_s=180)
        url = f"http://127.0.0.1:{port}"
        assert f"policy endpoint listening on {url}: OpenAI base URL {url}/v1, model 'student'" in said
        log_url = load_settings().episode_db_url
        assert f"episode log {log_url}" in said
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        [alias, _] = client.models.list().data
        assert (alias.id, (alias.model_extra or {}).get("episode_log")) == ("student", log_url)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert stdout.read_bytes() == b""


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
    # 2 rollouts, or 4 when the first group came out flat and another scenario was drawn in its place.
    assert report["run"] == "default" and report["rollouts"] in (2, 4)
    assert b"Give Feedback" in done.stderr and b"judge_failed" in done.stderr
