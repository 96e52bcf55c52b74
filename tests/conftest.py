"""Shared fixtures: every test gets its own rlide home, a real episode log (SQLite under tmp_path;
`any_store`: SQLite and PostgreSQL), and real `rlide serve` processes on demand."""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from episodes.store import EpisodeStore

# Real servers the tests start themselves: PostgreSQL on loopback, a Docker engine when root.
pytest_plugins = ["tests.postgres_server", "tests.envpool.docker_engine"]

TRAINING_EXTRA = all(importlib.util.find_spec(m) for m in ("torch", "art", "transformers", "peft"))
"""Whether `rlide[training]` is installed. Without it (the core suite, as on Python 3.13 in CI) the
training tests are not collected (their modules import torch) and tests marked `training` are skipped."""
collect_ignore = [] if TRAINING_EXTRA else ["training"]


def pytest_report_header() -> str:
    if TRAINING_EXTRA:
        return "rlide[training]: installed"
    return "rlide[training]: not installed: tests/training is not collected, tests marked `training` are skipped"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if not TRAINING_EXTRA and item.get_closest_marker("training"):
        pytest.skip("needs the training extra: pip install -e '.[training]'")


os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


RLIDE_EXE = Path(sys.executable).parent / "rlide"
"""The `rlide` console script of the virtualenv running the tests."""


@pytest.fixture(autouse=True)
def rlide_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Points `RLIDE_HOME` at a fresh directory and drops every other `RLIDE_*` variable, so no test
    reads or writes the developer's real episode log or picks up their settings."""
    for name in [n for n in os.environ if n.startswith("RLIDE_")]:
        monkeypatch.delenv(name)
    home = tmp_path / "rlide-home"
    home.mkdir()
    monkeypatch.setenv("RLIDE_HOME", str(home))
    return home


@pytest.fixture
def rlide_exe() -> Path:
    if not RLIDE_EXE.exists():
        pytest.skip(f"{RLIDE_EXE} is missing: run scripts/setup.sh (pip install -e .)")
    return RLIDE_EXE


@pytest.fixture
def workspace_a_worker_warns_about(tmp_path: Path) -> Path:
    """211 files, so that indexing chunks them in spawned worker processes (which share the
    parent's stdout), one of which nests classes 600 deep: chunking it falls back to windows and
    logs `chunking.parse_failed` from inside a worker."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(210):
        (ws / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n")
    nested = "".join(f"{' ' * i}class C{i}:\n{' ' * i} x = 1\n" for i in range(600))
    (ws / "deep.py").write_text(nested + "y = 1\n" * 2000)  # short lines: not taken for minified
    return ws


@pytest.fixture
def rlide_env(rlide_home: Path) -> dict[str, str]:
    """The `RLIDE_*` variables a server subprocess needs (merge into its environment)."""
    return {n: v for n, v in os.environ.items() if n.startswith("RLIDE_")}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EpisodeStore]:
    s = EpisodeStore.open(str(tmp_path / "episodes.db"))
    yield s
    s.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EpisodeStore]:
    """The same tests on both episode-log databases (PostgreSQL from tests/postgres_server.py)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'episodes.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    s = EpisodeStore.open(url)
    yield s
    s.close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StdioServer:
    """`rlide serve` as a subprocess, driven by hand-written newline-delimited JSON-RPC.

    A reader thread collects every stdout line verbatim (`stdout_lines`) and hands parsed messages
    to `recv`; stderr goes to a file so a chatty server can never block on a full pipe.
    """

    def __init__(self, argv: list[str], env: dict[str, str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        self.stdout_lines: list[bytes] = []
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._pending: dict[Any, dict[str, Any]] = {}
        self.notifications: list[dict[str, Any]] = []
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout_lines.append(line)
            try:
                message = json.loads(line)
            except ValueError:
                continue  # kept in stdout_lines; tests that care check every line
            self._inbox.put(message if isinstance(message, dict) else {"_non_object": message})
        self._inbox.put(None)  # EOF

    def send(self, message: dict[str, Any] | str) -> None:
        """Write one message (a dict, or a raw line for malformed-input tests)."""
        assert self.proc.stdin is not None
        line = message if isinstance(message, str) else json.dumps(message)
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def send_request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self._next_id

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def wait_response(self, request_id: Any, timeout: float = 30.0) -> dict[str, Any]:
        """The response to `request_id`; other messages that arrive meanwhile are kept."""
        if request_id in self._pending:
            return self._pending.pop(request_id)
        while True:
            try:
                message = self._inbox.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no response to request {request_id} within {timeout} s") from None
            if message is None:
                self._inbox.put(None)
                raise EOFError(f"server closed stdout before answering {request_id}; stderr:\n{self.stderr()}")
            if "id" in message and ("result" in message or "error" in message):
                if message["id"] == request_id:
                    return message
                self._pending[message["id"]] = message
            else:
                self.notifications.append(message)

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        return self.wait_response(self.send_request(method, params), timeout)

    def initialize(self, protocol_version: str = "2025-06-18") -> dict[str, Any]:
        response = self.request(
            "initialize",
            {
                "protocolVersion": protocol_version,
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"},
            },
        )
        assert "result" in response, response
        self.notify("notifications/initialized")
        return response["result"]  # type: ignore[no-any-return]

    def call_tool(self, name: str, arguments: Any, timeout: float = 30.0) -> dict[str, Any]:
        """The `result` of a tools/call (a CallToolResult dict); a JSON-RPC error raises."""
        response = self.request("tools/call", {"name": name, "arguments": arguments}, timeout)
        assert "result" in response, response
        return response["result"]  # type: ignore[no-any-return]

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def close(self, timeout: float = 15.0) -> int:
        """Close stdin (the stdio way to stop a server) and wait for the exit status."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=timeout)
        self._stderr.close()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, no chance to clean up."""
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def stdio_server(rlide_exe: Path, rlide_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., StdioServer]]:
    """A factory starting `rlide serve` subprocesses (extra env overrides allowed); all are stopped
    at teardown."""
    started: list[StdioServer] = []

    def start(**env_overrides: str) -> StdioServer:
        env = {**os.environ, **rlide_env, **env_overrides}
        server = StdioServer([str(rlide_exe), "serve"], env, tmp_path / f"server-{len(started)}.stderr")
        started.append(server)
        return server

    yield start
    for server in started:
        server.close(timeout=5)


class HttpServer:
    """`rlide serve --http` as a subprocess. Ready once uvicorn says it is listening (read from its
    stderr, which is also kept in a file)."""

    READY_LINE = "Uvicorn running on"

    def __init__(self, argv: list[str], env: dict[str, str], stderr_path: Path, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.stderr_path = stderr_path
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self._threads = [
            threading.Thread(target=self._tee, args=(self.proc.stderr, stderr_path), daemon=True),
            threading.Thread(
                target=self._tee, args=(self.proc.stdout, stderr_path.with_suffix(".stdout")), daemon=True
            ),
        ]
        for thread in self._threads:
            thread.start()

    def _tee(self, stream: Any, path: Path) -> None:
        with open(path, "wb") as sink:
            for line in stream:
                sink.write(line)
                sink.flush()
                if self.READY_LINE.encode() in line:
                    self._ready.set()
        self._ready.set()  # EOF: the process is gone; wait_ready() reports it

    def wait_ready(self, timeout: float = 30.0) -> HttpServer:
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"rlide serve --http did not come up on port {self.port}:\n{self.stderr()}")
        return self

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def stdout(self) -> str:
        path = self.stderr_path.with_suffix(".stdout")
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for thread in self._threads:
            thread.join(timeout=timeout)
        return self.proc.returncode


@pytest.fixture
def http_server(rlide_exe: Path, rlide_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., HttpServer]]:
    """A factory starting `rlide serve --http` on a free loopback port (extra env overrides allowed),
    waiting until it listens; all are stopped at teardown."""
    started: list[HttpServer] = []

    def start(**env_overrides: str) -> HttpServer:
        port = free_port()
        env = {**os.environ, **rlide_env, **env_overrides}
        argv = [str(rlide_exe), "serve", "--http", "--host", "127.0.0.1", "--port", str(port)]
        server = HttpServer(argv, env, tmp_path / f"http-{len(started)}.stderr", port)
        started.append(server)
        return server.wait_ready()

    yield start
    for server in started:
        server.stop()
