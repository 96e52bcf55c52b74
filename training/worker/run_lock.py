"""One training worker per run and store: an exclusive `flock` on `{lock_dir}/worker-{run}.lock`."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from training.worker.outcome import WorkerError


class WorkerBusy(WorkerError):
    """Another worker holds the run's lock."""


class RunLock:
    """An exclusive, non-blocking `flock`; released when the process dies, however it dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
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
