"""Filters (`language=`, `path_glob=`) answered in memory, as a mask over chunk row ids (a chunk's
language is its file's).

Both indexes score every row anyway (BM25 adds postings into a row-sized array, dense search
multiplies every vector), so a filter costs one more vector operation there, not a SQL join or a
Python test per hit: post-filtering the 1M-chunk store through SQLite took 0.5-5 s a query. Each
row's path and language are held as small integer codes; a glob is matched once per distinct path
(a store has ~25x fewer files than chunks) and remembered. Like `keyword_index`, it follows other
processes' writes through `chunk_log`, and loads only when a filter is first used.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import numpy.typing as npt

from memory.ranking import glob_match
from memory.stores.base import Filters

Mask = npt.NDArray[np.bool_]
LOG_BOUNDS = "SELECT (SELECT min(seq) FROM {table}), (SELECT max(seq) FROM {table})"
"""First and last entry of a change log. Two subqueries, not `SELECT min(seq), max(seq)`: SQLite
answers a lone min() or max() from the primary key's b-tree, but both in one SELECT scan the
whole log (1-2 ms at 58k entries, on every query)."""


@contextmanager
def snapshot(db: sqlite3.Connection) -> Iterator[None]:
    """One read transaction on an autocommit connection: everything read inside it (a change log's
    position and the rows it points at) sees the same state of the database."""
    db.execute("BEGIN")
    try:
        yield
    finally:
        db.execute("COMMIT")


def changes_since(db: sqlite3.Connection, table: str, seq: int) -> tuple[int, list[int] | None]:
    """The last entry of the change log `table`, and the distinct row ids logged after `seq`; None
    instead of ids when the caller must reload everything (never loaded: `seq` < 0, or the log
    was pruned past `seq`). Call inside a transaction, so what follows reads the same snapshot."""
    first, last = db.execute(LOG_BOUNDS.format(table=table)).fetchone()
    last = last or 0
    if seq < 0 or (first is not None and seq < first - 1):
        return last, None
    if seq == last:
        return last, []
    return last, [r[0] for r in db.execute(f"SELECT DISTINCT id FROM {table} WHERE seq > ?", (seq,))]


class RowFilter:
    """Per row id: its path and language as codes (-1: no such row). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = -1
        self._path_of = np.full(0, -1, np.int32)
        self._language_of = np.full(0, -1, np.int16)
        self._paths: list[str] = []
        self._path_codes: dict[str, int] = {}
        self._language_codes: dict[str, int] = {}
        self._globs: dict[str, Mask] = {}  # pattern -> match per path code (plus a False for -1)
        self._last: tuple[Filters, int, Mask] | None = None

    def mask(self, db: sqlite3.Connection, filters: Filters) -> Mask | None:
        """True at the row ids that pass `filters` (rows past its end do not); None: no filter."""
        if not (filters.language or filters.path_glob):
            return None
        with self._lock:
            with snapshot(db):
                self._refresh(db)
            if self._last is not None and self._last[:2] == (filters, self._seq):
                return self._last[2]
            allowed = np.ones(len(self._path_of), bool)
            if filters.language:
                code = self._language_codes.get(filters.language, -2)  # -2: matches no row
                allowed &= self._language_of == code
            if filters.path_glob:
                allowed &= self._glob(filters.path_glob)[self._path_of]
            self._last = (filters, self._seq, allowed)
            return allowed

    def _glob(self, pattern: str) -> Mask:
        known = self._globs.get(pattern, np.zeros(1, bool))
        done = len(known) - 1
        if done < len(self._paths):  # paths seen since: match those only
            fresh = [glob_match(pattern, p) for p in self._paths[done:]]
            known = np.concatenate([known[:-1], np.asarray(fresh, bool), [False]])
            if len(self._globs) >= 32:
                self._globs.clear()
            self._globs[pattern] = known
        return known

    def _refresh(self, db: sqlite3.Connection) -> None:
        last, changed = changes_since(db, "chunk_log", self._seq)
        if changed is None:
            self._load(db)
        elif changed:
            rows = []
            for start in range(0, len(changed), 500):
                part = changed[start : start + 500]
                marks = ",".join("?" * len(part))
                rows += db.execute(
                    "SELECT c.id, c.path, f.language FROM chunks c LEFT JOIN files f ON f.path = c.path"
                    f" WHERE c.id IN ({marks})",
                    part,
                ).fetchall()
            self._set(rows, reset=changed)  # a changed id not read back was deleted
        self._seq = last

    def _load(self, db: sqlite3.Connection) -> None:
        """Every row's codes, read a file at a time: the row ids of each path come from the path
        index alone, and a chunk's language is its file's (every writer gives both the same), so
        the chunks table itself, text and all, is not read (reading it cost 1-2 s at 929k chunks,
        ~10 s from a cold disk at 232k)."""
        languages = dict(db.execute("SELECT path, language FROM files").fetchall())
        groups = db.execute("SELECT path, group_concat(id) FROM chunks GROUP BY path").fetchall()
        ids = np.asarray(",".join(g[1] for g in groups).split(",") if groups else [], np.int64)
        sizes = [g[1].count(",") + 1 for g in groups]
        paths = np.asarray([self._path_code(g[0]) for g in groups], np.int32)
        langs = np.asarray([self._language_code(languages.get(g[0])) for g in groups], np.int16)
        top = int(ids.max()) + 1 if len(ids) else 0
        self._path_of = np.full(top, -1, np.int32)
        self._language_of = np.full(top, -1, np.int16)
        self._path_of[ids] = np.repeat(paths, sizes)
        self._language_of[ids] = np.repeat(langs, sizes)

    def _path_code(self, path: str) -> int:
        code = self._path_codes.get(path)
        if code is None:
            code = self._path_codes[path] = len(self._paths)
            self._paths.append(path)
        return code

    def _language_code(self, language: str | None) -> int:
        return -1 if language is None else self._language_codes.setdefault(language, len(self._language_codes))

    def _set(self, rows: list[tuple[int, str, str | None]], reset: list[int]) -> None:
        top = max([r[0] for r in rows] + reset, default=-1) + 1
        if top > len(self._path_of):
            grow = top - len(self._path_of)
            self._path_of = np.concatenate([self._path_of, np.full(grow, -1, np.int32)])
            self._language_of = np.concatenate([self._language_of, np.full(grow, -1, np.int16)])
        ids = np.asarray(reset, np.int64)
        self._path_of[ids] = -1
        self._language_of[ids] = -1
        for rowid, path, language in rows:
            self._path_of[rowid] = self._path_code(path)
            self._language_of[rowid] = self._language_code(language)
