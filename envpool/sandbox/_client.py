"""Host side of the fork-server protocol: start one server process, send runs, read results.

Shared by every backend that hosts `forkserver.py` (bwrap, unsafe-local). One `ServerProcess`
runs one program at a time; backends keep a set of them for concurrency.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import structlog

from envpool.sandbox.base import (
    MAX_PAYLOAD_BYTES,
    TRUNCATION_MARKER,
    CancelToken,
    InvalidRequest,
    RunRequest,
    RunResult,
    RunStatus,
)
from envpool.sandbox.cgroups import process_tree

log = structlog.get_logger(__name__)

FORKSERVER_SCRIPT = Path(__file__).with_name("forkserver.py")
HEADER_BYTES = 4
#: Extra time the host allows beyond a run's own limit before it declares the server dead.
HOST_GRACE_S = 5.0
START_TIMEOUT_S = 15.0
SERVER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


class ServerState(StrEnum):
    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    DEAD = "dead"


class ServerDied(Exception):
    """The server process vanished or stopped answering; it has been killed."""


def encode_frame(obj: dict[str, Any], payload: bytes = b"") -> bytes:
    data = json.dumps(obj).encode()
    return len(data).to_bytes(HEADER_BYTES, "big") + data + payload


def request_frame(request: RunRequest) -> bytes:
    """A run's frame: what the server itself needs (its limits) in the header, then the job (the
    whole request, code, files, environment and stdin) as bytes the server passes to the run's
    child without decoding them (forkserver.py: no job stays in memory a later child inherits)."""
    job = json.dumps(request.model_dump(), ensure_ascii=False).encode()
    if len(job) > MAX_PAYLOAD_BYTES:
        raise InvalidRequest(f"request too large ({len(job)} bytes encoded > {MAX_PAYLOAD_BYTES})")
    header = {
        "op": "run",
        "timeout_s": request.timeout_s,
        "max_output_bytes": request.max_output_bytes,
        "memory_mb": request.memory_mb,
        "payload": len(job),
    }
    return encode_frame(header, job)


MEMORY_HINTS = (
    "MemoryError",
    "Cannot allocate memory",
    "out of memory",
    "bad_alloc",
    "heap limit",
    "allocation failed",
)


NO_MEMORY_GROUP = (
    "no memory group of its own held the run (not root, no cgroup v1 memory controller, or "
    "unsafe-local), so memory_mb capped the address space of each of its processes (data segments "
    "for node), not the memory it holds: threaded programs reserve far more than they use"
)
"""Why such a run hit `memory_mb` early (docs/sandbox.md, Limits): its result's detail, and a log line."""


def classify(exit_code: int | None, stderr: str) -> RunStatus:
    """The status of a run the server did not end itself, from its exit and its stderr's tail."""
    if exit_code == 0:
        return RunStatus.OK
    if exit_code == -signal.SIGXCPU:
        return RunStatus.TIMEOUT
    memory = any(hint in stderr[-4096:] for hint in MEMORY_HINTS)
    if exit_code is not None and exit_code < 0 and exit_code != -signal.SIGXFSZ:
        return RunStatus.MEMORY_LIMIT if memory else RunStatus.KILLED
    return RunStatus.MEMORY_LIMIT if memory else RunStatus.ERROR


def run_result(reply: dict[str, Any], body: bytes, request: RunRequest) -> RunResult:
    """A `RunResult` from the server's answer: its header and the raw stdout and stderr after it,
    each cut at the request's `max_output_bytes` by the server (`cut` says which)."""
    limit = request.max_output_bytes
    if reply.get("status") == RunStatus.SANDBOX_ERROR:
        return RunResult(status=RunStatus.SANDBOX_ERROR, exit_code=None, detail=str(reply.get("detail", "")))
    sizes = (int(reply["stdout"]), int(reply["stderr"]))
    raws = (body[: sizes[0]], body[sizes[0] : sizes[0] + sizes[1]])
    texts = [
        raw.decode("utf-8", "replace") + (TRUNCATION_MARKER.format(limit=limit) if cut else "")
        for raw, cut in zip(raws, reply["cut"], strict=True)
    ]
    exit_code = reply["exit_code"]
    status = RunStatus(reply["status"]) if reply.get("status") else classify(exit_code, texts[1])
    detail = str(reply.get("detail") or "")
    if status is RunStatus.TIMEOUT and not detail:
        detail = "CPU-time limit"
    if reply.get("oom") and status in (RunStatus.KILLED, RunStatus.ERROR):
        status = RunStatus.MEMORY_LIMIT
        detail = f"the run's memory (all its processes, files and shared memory) hit memory_mb={request.memory_mb}"
    elif status is RunStatus.MEMORY_LIMIT and reply.get("memory") == "rlimit":
        detail = f"the address-space limit memory_mb={request.memory_mb}: {NO_MEMORY_GROUP}"
    return RunResult(
        status=status,
        exit_code=exit_code,
        stdout=texts[0],
        stderr=texts[1],
        duration_ms=float(reply.get("duration_ms", 0.0)),
        truncated=any(reply["cut"]),
        detail=detail,
    )


#: An argv entry equal to this is replaced by the number of an fd that holds `fd_payload`
#: (how bwrap receives its seccomp program: `--seccomp FD`).
PAYLOAD_FD = "{payload_fd}"


@dataclass
class ServerProcess:
    argv: list[str]
    label: str
    fd_payload: bytes | None = None
    state: ServerState = ServerState.STARTING
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _pidfds: list[int] = field(default_factory=list, repr=False)
    _buf: bytearray = field(default_factory=bytearray, repr=False)
    _cancel_sent: bool = field(default=False, repr=False)
    isolation: str = ""
    """What the server says keeps its runs apart (its greeting): "per-run namespaces", or why not."""
    memory: str = ""
    """What held the last run to its `memory_mb`: "group" (its own memory group) or "rlimit"
    (an address-space cap, where the server could not give it a group)."""

    def start(self) -> None:
        argv, pass_fds = list(self.argv), tuple[int, ...]()
        read_fd = -1
        if self.fd_payload is not None:
            read_fd, write_fd = os.pipe()
            os.write(write_fd, self.fd_payload)  # a few hundred bytes: fits in the pipe buffer
            os.close(write_fd)
            argv = [str(read_fd) if a == PAYLOAD_FD else a for a in argv]
            pass_fds = (read_fd,)
        try:
            self._popen(argv, pass_fds)
        finally:
            if read_fd >= 0:
                os.close(read_fd)
        ready = self._read_frame(time.monotonic() + START_TIMEOUT_S, None)
        if ready.get("op") != "ready":
            self.kill()
            raise ServerDied(f"{self.label}: unexpected greeting {ready!r}")
        self.isolation = str(ready.get("isolation", ""))
        assert self.proc is not None
        # pidfds (not pids: no reuse races) of the launcher's descendants, e.g. the namespace's PID 1,
        # which may sit in another session than the launcher: kill() reaches them directly.
        for pid in process_tree(self.proc.pid)[1:]:
            with contextlib.suppress(OSError):
                self._pidfds.append(os.pidfd_open(pid))
        self.state = ServerState.IDLE

    def _popen(self, argv: list[str], pass_fds: tuple[int, ...]) -> None:
        self.proc = subprocess.Popen(
            argv,
            pass_fds=pass_fds,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
            close_fds=True,
            env=SERVER_ENV,  # never hand the host's environment (tokens, keys) to the sandbox
            start_new_session=True,  # a Ctrl-C on the host's terminal must not hit the sandbox
        )

    def run(self, request: RunRequest, cancel: CancelToken | None) -> RunResult:
        assert self.proc is not None and self.proc.stdin is not None
        self.state = ServerState.BUSY
        t0 = time.monotonic()
        frame = request_frame(request)
        self._cancel_sent = False
        try:
            self._write(frame)
            deadline = t0 + request.timeout_s + HOST_GRACE_S
            reply = self._read_frame(deadline, cancel)
            body = self._read_exact(int(reply.get("stdout", 0)) + int(reply.get("stderr", 0)), deadline, cancel)
        except (OSError, ServerDied) as exc:
            self.kill()
            raise ServerDied(f"{self.label}: {exc}") from exc
        self.state = ServerState.IDLE
        reply.setdefault("duration_ms", (time.monotonic() - t0) * 1000)
        self.memory = str(reply.get("memory", ""))
        return run_result(reply, body, request)

    def _write(self, data: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        while data:
            data = data[os.write(fd, data) :]

    def _read_frame(self, deadline: float, cancel: CancelToken | None) -> dict[str, Any]:
        size = int.from_bytes(self._read_exact(HEADER_BYTES, deadline, cancel), "big")
        frame: dict[str, Any] = json.loads(self._read_exact(size, deadline, cancel))
        return frame

    def _read_exact(self, n: int, deadline: float, cancel: CancelToken | None) -> bytes:
        """`n` bytes from the server; a cancel meanwhile is passed on (the server kills the run and
        still answers)."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while len(self._buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise ServerDied("no answer before the host deadline")
            watch = [fd] if cancel is None or self._cancel_sent else [fd, cancel.fileno()]
            ready, _, _ = select.select(watch, [], [], remaining)
            if cancel is not None and not self._cancel_sent and cancel.fileno() in ready:
                self._cancel_sent = True
                self._write(encode_frame({"op": "cancel"}))
            if fd in ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    self.kill()
                    raise ServerDied("server exited")
                self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def kill(self) -> None:
        self.state = ServerState.DEAD
        for fd in self._pidfds:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)
        self._pidfds = []
        if self.proc is not None and self.proc.poll() is None:
            # The whole group: bwrap's monitor and the namespace's PID 1 (whose death tears down
            # the PID namespace, taking the server and any run with it).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc is not None:
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()


def sandbox_error(backend: str, detail: str, started: float) -> RunResult:
    return RunResult(
        status=RunStatus.SANDBOX_ERROR,
        exit_code=None,
        duration_ms=(time.monotonic() - started) * 1000,
        detail=detail,
        backend=backend,
    )
