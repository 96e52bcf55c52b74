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

from mcp_server.cli.app import app
from mcp_server.settings import load_settings
from tests.conftest import free_port
from training.backends.base import BackendConfig

runner = CliRunner()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield int(other.getsockname()[1])


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
    assert report["run"] == "default" and report["rollouts"] == 2
    assert b"Give Feedback" in done.stderr and b"judge_failed" in done.stderr
