"""Opening a SQLite file in WAL mode, safely when several processes open it at once.

Every SQLite file rlide writes (a workspace index, the embedding cache, the episode log) is shared
by processes: one MCP server per IDE window, the CLI, the training worker. They all open it the
same way, here, in `common`: `memory` (the index, the cache) and `episodes` (the log) both import it
and neither knows the other.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path


def open_wal(path: Path, *, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection in autocommit mode with WAL, `synchronous=NORMAL` and a busy timeout.

    Raises `sqlite3.Error` (the callers wrap it in their own error, with advice) and
    `sqlite3.OperationalError` when the file cannot be put in WAL mode (a network filesystem).
    `synchronous=NORMAL` in WAL mode survives a killed process (the OS has the pages); only a
    power cut can lose the last transactions.
    """
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        mode = _switch_to_wal(conn, busy_timeout_s)
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(
                f"{path} could not be switched to WAL mode (got {mode!r}); is it on a network filesystem?"
            )
        conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def _switch_to_wal(conn: sqlite3.Connection, timeout_s: float) -> object:
    """`PRAGMA journal_mode=WAL`, retried: on a new file, processes opening it at once race to
    switch it, and the losers get "database is locked" at once, without the busy handler (seen in
    CI with two and with four concurrent first opens)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return None if row is None else row[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
