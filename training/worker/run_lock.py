"""One training worker per run and store: an exclusive `flock` on `{lock_dir}/worker-{run}.lock`.

The lock file keeps the pid of the last worker that held it, and the kernel drops the lock when that
process dies, however it dies (Ctrl-C, kill -9, a crash): so a reader that finds the lock free knows
that no worker owns the run any more, whatever state the log last recorded (`worker_alive`).
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path

from training.worker.outcome import WorkerError

ACQUIRE_TRIES = 20
"""A status reader holds the lock shared for a moment (`worker_alive`); a worker starting just then
tries again for about a second before it calls the run busy."""


class WorkerBusy(WorkerError):
    """Another worker holds the run's lock."""


def lock_path(lock_dir: Path, run: str) -> Path:
    return lock_dir / f"worker-{run}.lock"


class RunLock:
    """An exclusive, non-blocking `flock`; released when the process dies, however it dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        for attempt in range(ACQUIRE_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt + 1 < ACQUIRE_TRIES and _holder_pid(fd) is None:
                    time.sleep(0.05)  # a status reader's probe, or a worker that just died
                    continue
                holder = _holder_pid(fd) or "?"
                os.close(fd)
                raise WorkerBusy(
                    f"another training worker (pid {holder}) holds {self.path}; stop it or pick another run"
                ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _holder_pid(fd: int) -> int | None:
    """The pid written in the lock file if that process is alive, else None."""
    text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    if not text.isdigit():
        return None
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        return pid
    return pid


@dataclass(frozen=True)
class WorkerLiveness:
    alive: bool
    pid: int | None
    """The worker that holds the lock, or the last one that held it."""


def worker_alive(path: Path) -> WorkerLiveness | None:
    """Whether a worker holds the lock at `path` now; None when there is no lock file here (the run
    was never trained on this machine, or its worker runs on another one: nothing can be told)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        pid = int(text) if text.isdigit() else None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return WorkerLiveness(alive=True, pid=pid)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return WorkerLiveness(alive=False, pid=pid)
    finally:
        os.close(fd)
