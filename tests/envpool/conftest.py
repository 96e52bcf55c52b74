"""Shared fixtures: a real bwrap sandbox (skipped with a reason when bwrap is missing)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from envpool.sandbox.bwrap import BwrapConfig, BwrapSandbox, bwrap_available
from envpool.sandbox.uids import UID_BASE, UID_COUNT

requires_bwrap = pytest.mark.skipif(
    bwrap_available() is None, reason="bubblewrap (bwrap) is not installed; apt-get install bubblewrap"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[BwrapSandbox]:
    if bwrap_available() is None:
        pytest.skip("bubblewrap (bwrap) is not installed; apt-get install bubblewrap")
    sb = BwrapSandbox(BwrapConfig())
    yield sb
    sb.close()


@pytest.fixture(scope="module")
def fresh_sandbox() -> Iterator[BwrapSandbox]:
    if bwrap_available() is None:
        pytest.skip("bubblewrap (bwrap) is not installed; apt-get install bubblewrap")
    sb = BwrapSandbox(BwrapConfig(fresh=True))
    yield sb
    sb.close()


PF_EXITING = 0x4  # kernel task flag: the task is in do_exit() and runs no more user code
SIGKILL_BIT = 1 << (9 - 1)


def _task_runs(path: str) -> bool:
    """Whether a task (a thread) may still run user code: not dead, not exiting, no SIGKILL pending."""
    try:
        with open(f"{path}/status") as fh:
            status = dict(line.split(":", 1) for line in fh if ":" in line)
        with open(f"{path}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    pending = int(status.get("SigPnd", "0").strip(), 16) | int(status.get("ShdPnd", "0").strip(), 16)
    return not (fields[0] in ("Z", "X") or int(fields[6]) & PF_EXITING or pending & SIGKILL_BIT)


def _descends_from_us(pid: int) -> bool:
    """Whether `pid` descends from this test process: sandboxes of other processes on the machine
    (other test sessions) run as sandbox uids too. Whatever a run leaves is reparented to its
    server (its PID namespace's init), which descends from us."""
    me = os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        if pid == me:
            return True
    return False


def live_sandbox_uid_pids() -> list[int]:
    """Host pids of this test process's sandboxes running as any sandbox uid that are neither dead
    nor dying, nor a child waiting for the next run (it has that run's uid already): must be empty
    between runs. Every thread counts:
    a process whose main thread has exited shows as a zombie while its other threads run on. A
    run's child that the server killed as it exited may still be in the kernel's teardown
    (SIGKILL pending, or exiting) for a millisecond after the answer: it runs no user code."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                status = dict(line.split(":", 1) for line in fh if ":" in line)
            tasks = os.listdir(f"/proc/{name}/task")
        except OSError:
            continue
        if not UID_BASE <= int(status["Uid"].split()[0]) < UID_BASE + UID_COUNT:
            continue
        if status["Name"].strip() == "rlide-spare":  # a child waiting for the next run: no run's process
            continue
        if any(_task_runs(f"/proc/{name}/task/{tid}") for tid in tasks) and _descends_from_us(int(name)):
            found.append(int(name))
    return found
