"""Host-wide leases on unprivileged uids, one per live fork-server.

RLIMIT_NPROC counts processes per (host) uid, and the post-run sweep kills "every process of this
uid": both are only sound if no two concurrent runs share a uid, across all processes on the
machine (pool workers are separate processes). A lease is an exclusive flock on a file named after
the uid; the kernel drops it when the holder dies, so a crashed worker never leaks its uid.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

#: Far above login users and the usual subuid ranges (100000-165535 per user).
UID_BASE = 2_000_000
UID_COUNT = 4096
LOCK_DIR = Path(os.environ.get("RLIDE_UID_LOCK_DIR", "/run/rlide-uids"))


RUN_SLOTS = 3
"""Uids leased to one fork-server: its runs take turns over them, so no run shares a uid with the
runs just before and after it, whose children wait while it runs (forkserver.py)."""


class NoFreeUid(RuntimeError):
    pass


@dataclass
class UidLease:
    uid: int
    _fd: int

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1


def lease_uid() -> UidLease:
    LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    start = os.getpid() % UID_COUNT  # spread processes over the range to avoid probing contention
    for i in range(UID_COUNT):
        uid = UID_BASE + (start + i) % UID_COUNT
        fd = os.open(LOCK_DIR / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise NoFreeUid(f"all {UID_COUNT} sandbox uids are in use")
