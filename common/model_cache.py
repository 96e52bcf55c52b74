"""Where rlide keeps files it derives from installed or downloaded packages (the int8 embedding
graph, the converted base models), and the lock that lets several processes prepare one safely.

The cache is per machine, not per rlide home: what it holds depends only on the packages, so every
home (and every test) shares one copy.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def model_cache_dir() -> Path:
    """`$RLIDE_MODEL_CACHE`, else `$XDG_CACHE_HOME/rlide/models`, else `~/.cache/rlide/models`."""
    explicit = os.environ.get("RLIDE_MODEL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rlide" / "models"


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created if missing) for the block: a second process
    preparing the same thing waits here, then finds it done. The file is left in place: removing a
    lock file that another process may be waiting on would let a third one in beside it."""
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
