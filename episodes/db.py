"""Database connections for the episode log: SQLite (embedded default) and PostgreSQL (teams).

Both speak the same small surface, so the stores over them (`EpisodeStore` and the `PolicyTurns`
and `TrainingRuns` it holds) keep one copy of every query. Queries are written with `?`
placeholders; the PostgreSQL side rewrites them to `%s`.

The log's errors, one tree: `StoreError` > `StoreBusy`, `EpisodeNotFound`, `EpisodeClosed`,
`PolicyTurnRefused`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from common.sqlite_wal import open_wal
from episodes.records import Episode, EpisodeSource, EpisodeStatus

Row = tuple[Any, ...]


class StoreError(Exception):
    """The episode log cannot be opened or used."""


class StoreBusy(StoreError):
    """A `wait=False` transaction could not start at once: another thread or process is writing."""


class EpisodeNotFound(StoreError):
    def __init__(self, episode_id: str) -> None:
        super().__init__(f"no episode with id {episode_id!r}")
        self.episode_id = episode_id


def check_episode_id(episode_id: str) -> None:
    """`EpisodeNotFound` for an id no episode can have. Ids are ASCII (`ep_` + hex digits), and
    text that is not valid UTF-8 (a lone surrogate, from JSON's "\\ud800" in a tool argument or
    from a mis-decoded command line) cannot even be sent to SQLite or PostgreSQL: it would fail
    the query with a `UnicodeEncodeError` instead of saying there is no such episode."""
    if not episode_id.isascii():
        raise EpisodeNotFound(episode_id)


class EpisodeClosed(StoreError):
    def __init__(self, episode: Episode) -> None:
        super().__init__(f"episode {episode.id} already ended with status {episode.status.value}")
        self.episode = episode


class PolicyTurnRefused(StoreError):
    """A policy turn was offered to an episode that is not an open policy episode."""

    def __init__(self, episode_id: str, source: EpisodeSource, status: EpisodeStatus) -> None:
        super().__init__(f"episode {episode_id} is a {source.value} episode with status {status.value}")
        self.episode_id = episode_id
        self.source = source
        self.status = status


class Cursor(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...
    def fetchone(self) -> Row | None: ...
    def fetchall(self) -> list[Row]: ...


class Database(Protocol):
    dialect: str
    url: str

    def transaction(self, *, write: bool, wait: bool = True) -> Any:
        """A context manager yielding a `Cursor`; commits on success, rolls back on error.

        `wait=False` raises `StoreBusy` instead of waiting for a lock, so an event loop can try a
        write in place and hand it to a thread only when it would block."""

    def close(self) -> None: ...


class SQLiteDatabase:
    """One connection shared by the threads of a process, serialised by a lock.

    WAL lets readers and one writer proceed at once across processes (one server per IDE window
    plus the training worker); `BEGIN IMMEDIATE` takes the write lock up front so two writers never
    deadlock upgrading a read lock, and `busy_timeout` makes the loser wait instead of failing.
    `common.sqlite_wal.open_wal` sets both up.
    """

    dialect = "sqlite"

    def __init__(self, path: Path, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = open_wal(path, busy_timeout_s=busy_timeout_ms / 1000)
            self._conn.execute("PRAGMA foreign_keys=ON")
        except (sqlite3.Error, OSError) as exc:  # OSError: the directory cannot be created
            raise StoreError(f"cannot open the episode log at {path}: {exc}") from exc
        self._lock = threading.Lock()
        self._busy_timeout_ms = busy_timeout_ms

    @contextmanager
    def transaction(self, *, write: bool, wait: bool = True) -> Iterator[sqlite3.Cursor]:
        if not self._lock.acquire(blocking=wait):
            raise StoreBusy("another thread of this process is using the episode log")
        try:
            cur = self._conn.cursor()
            try:
                if not wait:
                    cur.execute("PRAGMA busy_timeout=0")
                try:
                    cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                except sqlite3.OperationalError as exc:
                    if not wait and "locked" in str(exc):
                        raise StoreBusy(f"episode log {self.path} is locked by another writer") from exc
                    raise
                finally:
                    if not wait:
                        cur.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
                try:
                    yield cur
                except BaseException:
                    cur.execute("ROLLBACK")
                    raise
                cur.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"episode log {self.path}: {exc}") from exc
            finally:
                cur.close()
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class _PgCursor:
    def __init__(self, cur: Any) -> None:
        self._cur = cur

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _PgCursor:
        self._cur.execute(sql.replace("?", "%s"), tuple(params))
        return self

    def fetchone(self) -> Row | None:
        row = self._cur.fetchone()
        return None if row is None else tuple(row)

    def fetchall(self) -> list[Row]:
        return [tuple(row) for row in self._cur.fetchall()]


class PostgresDatabase:
    """A psycopg connection, serialised by a lock like the SQLite one."""

    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError(
                "RLIDE_DATABASE_URL points at PostgreSQL but psycopg is not installed: pip install 'rlide[postgres]'"
            ) from exc
        self.url = url
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {mask_url_password(url)}: {exc}") from exc
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self, *, write: bool, wait: bool = True) -> Iterator[_PgCursor]:
        if not wait:
            raise StoreBusy("PostgreSQL is written from a worker thread, never from the event loop")
        import psycopg

        try:
            with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
                yield _PgCursor(cur)
        except psycopg.Error as exc:
            raise StoreError(f"episode log {mask_url_password(self.url)}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def mask_url_password(url: str) -> str:
    parsed = urlparse(url)
    if parsed.password is None:
        return url
    return url.replace(f":{parsed.password}@", ":***@", 1)


def connect(url: str) -> Database:
    """Open `sqlite:///path`, a bare file path, or `postgresql://...`."""
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresDatabase(url)
    if url.startswith("sqlite:///"):
        return SQLiteDatabase(Path(url.removeprefix("sqlite:///")).expanduser())
    if "://" in url:
        raise StoreError(f"unsupported database URL {mask_url_password(url)!r}: use sqlite:///PATH or postgresql://...")
    return SQLiteDatabase(Path(url).expanduser())
