"""How many CPUs this process may run on: its affinity (a container's cpuset, `taskset`), which
`os.cpu_count()` ignores, so that a process pinned to one CPU does not start two of anything."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows: no affinity API
        return os.cpu_count() or 1
