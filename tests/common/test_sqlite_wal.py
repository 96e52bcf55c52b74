"""Every shared SQLite file (index, embedding cache, episode log) opens through `open_wal`."""

from __future__ import annotations

import multiprocessing
import sqlite3
from multiprocessing.synchronize import Barrier
from pathlib import Path

from common.sqlite_wal import open_wal

PROCESSES = 6
FRESH_FILES = 30


def _open_at_once(paths: list[Path], barrier: Barrier) -> None:
    for path in paths:
        barrier.wait(timeout=30)  # a sibling that died breaks the barrier instead of hanging us
        conn = open_wal(path, busy_timeout_s=10)
        conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.close()


def test_processes_opening_a_new_file_at_once_all_get_wal(tmp_path: Path) -> None:
    # The losers of the race to switch a new file to WAL get "database is locked" without the
    # busy handler ever running; open_wal must absorb that. A barrier before each fresh file
    # makes every open a first open.
    paths = [tmp_path / f"db{i}.sqlite" for i in range(FRESH_FILES)]
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(PROCESSES)
    procs = [ctx.Process(target=_open_at_once, args=(paths, barrier)) for _ in range(PROCESSES)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        if proc.is_alive():
            proc.kill()
    assert [proc.exitcode for proc in procs] == [0] * PROCESSES
    for path in paths:
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (PROCESSES,)
        conn.close()


def test_the_connection_waits_for_a_writer_and_syncs_normally(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    conn = open_wal(path, busy_timeout_s=2.5)
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (2500,)
    assert conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    assert conn.isolation_level is None
    conn.close()
