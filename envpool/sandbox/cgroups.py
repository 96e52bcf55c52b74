"""A cgroup (v1: memory + pids) around each sandbox server: the second layer of limits.

Per-run rlimits cap each process, not their sum: 64 processes x 512 MB of address space each would
still be 32 GB. So every fork-server (and everything it forks) also lives in its own cgroup with a
memory and a pids ceiling, and each of its run slots has a memory group inside it that holds a run
to its `memory_mb` (then no address-space rlimit applies: forkserver.py). The launcher joins it
before exec'ing bwrap (`wrap`), so the whole tree starts inside; groups are reused by later servers
of the same sandbox (fresh-per-run mode would otherwise pay ~10-20 ms per run to make one), so warm
runs pay nothing for it; after a failed run the host reads the cgroup's OOM-kill counter to report
`memory_limit` instead of `killed`. Platform facts: this machine has cgroup v1 (v2 has no
controllers); if the controllers are missing or we are not root, servers run without this layer
(logged once).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

CGROUP_ROOT = Path(os.environ.get("RLIDE_CGROUP_ROOT", "/sys/fs/cgroup"))
PARENT = "rlide-sandbox"
_counter = itertools.count()
_warned = False


@dataclass
class ServerCgroup:
    memory: Path
    pids: Path
    runs: list[Path]
    """Memory groups under `memory`, one per run slot: the fork-server moves each run into its slot's
    group and sets the run's limit there (forkserver.py), so what a run holds counts against it."""
    oom_seen: int = 0

    def wrap(self, argv: list[str]) -> list[str]:
        """argv that joins this cgroup (both controllers) and then execs `argv`, so the launched
        process and everything it ever forks start inside it, with no window to escape."""
        script = 'echo $$ > "$1" && echo $$ > "$2" && shift 2 && exec "$@"'
        procs = [str(self.memory / "cgroup.procs"), str(self.pids / "cgroup.procs")]
        return ["/bin/sh", "-c", script, "rlide-cgexec", *procs, *argv]

    def oom_kills(self) -> int:
        try:
            text = (self.memory / "memory.oom_control").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        with contextlib.suppress(OSError, ValueError):  # kernels without the oom_kill field
            return int((self.memory / "memory.failcnt").read_text())
        return 0

    def new_oom_kill(self) -> bool:
        """True if the memory ceiling killed something since the last call."""
        count = self.oom_kills()
        seen, self.oom_seen = self.oom_seen, count
        return count > seen

    def retired_slots(self) -> int:
        """Slot groups the server gave up and replaced (forkserver.py `retire_slot`: something of a run
        lived on in one, charged to it): each replacement is one more folder beside `runs`, and a
        cgroup directory's link count is 2 plus its folders (one stat, no listing)."""
        try:
            return max(0, os.stat(self.memory).st_nlink - 2 - len(self.runs))
        except OSError:
            return 0

    def remove(self) -> None:
        # Killed processes leave the group a moment after kill() returns: retry briefly, then
        # leave it to cleanup_stale(). Replacement slot groups too (`run-<slot>.<n>`).
        retired = [group for group in self.memory.glob("run-*") if group not in self.runs]
        for group in (*retired, *self.runs, self.memory, self.pids):
            for _ in range(40):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)


def process_tree(root: int) -> list[int]:
    """`root` and its descendants, from /proc/<pid>/task/<tid>/children (no full /proc scan)."""
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
            except OSError:
                continue
    return tree


def create_server_cgroup(memory_mb: int, pids: int, run_slots: int = 0) -> ServerCgroup | None:
    """A fresh memory+pids cgroup pair with `run_slots` memory groups inside, or None where cgroup
    v1 controllers are unusable."""
    global _warned
    mem_root, pids_root = CGROUP_ROOT / "memory", CGROUP_ROOT / "pids"
    name = f"{os.getpid()}-{next(_counter)}"
    try:
        mem = mem_root / PARENT / name
        pid_group = pids_root / PARENT / name
        for path in (mem, pid_group):
            path.mkdir(parents=True, exist_ok=True)
        (mem / "memory.limit_in_bytes").write_text(str(memory_mb << 20))
        with contextlib.suppress(OSError):  # no swap accounting on some kernels
            (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_mb << 20))
        (pid_group / "pids.max").write_text(str(pids))
        runs = [mem / f"run-{slot}" for slot in range(run_slots)]
        for run in runs:
            run.mkdir(exist_ok=True)
    except OSError as exc:
        if not _warned:
            _warned = True
            log.warning("sandbox.no_cgroups", detail="servers run without a cgroup ceiling", error=str(exc))
        return None
    group = ServerCgroup(mem, pid_group, runs)
    group.oom_seen = group.oom_kills()
    return group


def cleanup_stale() -> None:
    """Remove empty cgroups left by processes that died without cleaning up."""
    for controller in ("memory", "pids"):
        parent = CGROUP_ROOT / controller / PARENT
        if not parent.is_dir():
            continue
        for group in parent.iterdir():
            owner = group.name.split("-", 1)[0]
            if group.is_dir() and owner.isdigit() and not Path(f"/proc/{owner}").exists():
                try:
                    inner_groups = [*group.glob("run-*"), group]
                except FileNotFoundError:  # another sandbox starting now removed it first
                    continue
                for inner in inner_groups:
                    with contextlib.suppress(OSError):
                        inner.rmdir()
