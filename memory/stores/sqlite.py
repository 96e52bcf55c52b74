"""Embedded default store: one SQLite file per workspace (WAL), FTS5 over pre-tokenized code tokens,
float32 vectors in flat files beside it (`vector_file`) searched with numpy (exactly up to
`exact_up_to` vectors; see `vector_index`), filters as row masks (`row_filter`).

Several processes may index and search one file: every write is one short `BEGIN IMMEDIATE`
transaction, readers never block in WAL mode, and `busy_timeout` absorbs writer contention. Each
process keeps the vectors in a numpy matrix, read from the vector file with one read when it
first searches, that it refreshes incrementally when `PRAGMA data_version` says another
connection committed.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import structlog

from common.sqlite_wal import open_wal
from memory.errors import StoreBusyError, StoreError
from memory.ranking import glob_regex, rrf
from memory.stores.base import ChunkRecord, FileState, Filters, FloatArray, Hit, PendingChunk, StoreStats
from memory.stores.keyword_index import KeywordIndex
from memory.stores.row_filter import Mask, RowFilter, changes_since, snapshot
from memory.stores.sqlite_schema import CHUNK_LOG_KEEP, MIGRATIONS, VECTOR_LOG_KEEP
from memory.stores.vector_file import VectorFile
from memory.stores.vector_index import EXACT_UP_TO, VectorIndex

log = structlog.get_logger(__name__)

BM25_WEIGHTS = (2.0, 1.0)  # names (path + symbol) column, body column
COMPACT_MIN_SLOTS = 10_000  # below this, dead slots cost too little to rewrite the vectors for
COMMON_TOKEN_SHARE = 0.25
"""BM25 leaves out query tokens found in more than this share of chunks when the query has rarer
ones. FTS5 scores every row that matches any token (about 1 us a row), and a token such as `case`
matches 40% of the standard library while weighing almost nothing (FTS5's IDF is log 1.5 at 40%,
log 3 at 25%, against log 500 for a token in 100 of 58k chunks). On the search_speed queries this
cut the slowest BM25 from 89 to 37 ms; recall on benchmarks/search_quality.py was unchanged at 25%
(at 12.5% identifier-style queries lost 4 points of BM25 R@10: `get`, `name` and the like are
common in bodies but decisive in names)."""


def _embed_columns(chunk: ChunkRecord) -> tuple[str, str]:
    """(embed_prefix, embed_text) as stored: what the embedder sees is usually the text after a
    line of context (a method's class), so only that line is stored; embed_text only when it is
    something else."""
    if chunk.embed_text.endswith(chunk.text):
        return chunk.embed_text[: len(chunk.embed_text) - len(chunk.text)], ""
    return "", chunk.embed_text


class SQLiteStore:
    fuses_locally = True  # memory.search runs BM25 and the query embedding concurrently

    def __init__(
        self,
        path: Path,
        *,
        model_id: str,
        dim: int,
        busy_timeout_s: float = 30.0,
        exact_up_to: int | None = None,  # default: vector_index.EXACT_UP_TO
    ) -> None:
        self.path = path
        self.model_id = model_id
        self.dim = dim
        path.parent.mkdir(parents=True, exist_ok=True)
        self._busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        try:
            self._db = open_wal(path, busy_timeout_s=busy_timeout_s)
            # Reads use other connections than the writer (WAL readers never wait for it), so a
            # background indexer's write batch never holds up search_code in this process:
            # _rdb keeps the numpy vector copy and stats in step; each thread gets its own reader
            # for BM25 and row fetches, so BM25 can run while the vector side works.
            self._rdb = self._connect_reader()
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot open the index at {path}: {exc}; check the directory is writable "
                "or set data_dir to another location"
            ) from exc
        self._lock = threading.RLock()  # writes: the indexer and the background embedder
        self._read_lock = threading.RLock()  # reads: searches, stats, the numpy vector copy
        self._local_writes = 0
        self._after_commit: list[Callable[[], None]] = []  # what a write does once committed
        self._vectors = VectorIndex(dim, exact_up_to=EXACT_UP_TO if exact_up_to is None else exact_up_to)
        self._keywords = KeywordIndex(BM25_WEIGHTS)
        self._filter = RowFilter()
        self._migrate()
        self._check_model()

    # -- plumbing -------------------------------------------------------------------------------
    def _connect_reader(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
        conn.execute("PRAGMA query_only = 1")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect_reader()
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreBusyError(
                    f"the index {self.path} stayed locked by another process: {exc}; retry, or stop the other indexer"
                ) from exc
            self._after_commit = []
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self._local_writes += 1
            for action in self._after_commit:  # memory.stores.vector_file: dead slots, old generations
                action()

    def _migrate(self) -> None:
        with self._write() as db:
            db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
            done = {row[0] for row in db.execute("SELECT name FROM _migrations")}
            for name, migration in MIGRATIONS:
                if name not in done:
                    migration(db)
                    db.execute("INSERT INTO _migrations VALUES (?, ?)", (name, time.time()))

    def _check_model(self) -> None:
        with self._write() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'model_id'").fetchone()
            if row is not None and row[0] != self.model_id:
                # FloatArray of another model are useless to this one: drop them, keep the text index.
                log.warning("store.model_changed", old=row[0], new=self.model_id, path=str(self.path))
                db.execute("DELETE FROM vectors")
                db.execute("UPDATE chunks SET has_vec = 0")
                db.execute("UPDATE counts SET n = 0 WHERE name IN ('vectors', 'slots')")
                self._new_vector_generation(db)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('model_id', ?)", (self.model_id,))

    # -- manifest and writes -------------------------------------------------------------------
    def manifest(self) -> dict[str, FileState]:
        rows = self._reader().execute("SELECT path, size, mtime_ns, sha256, language FROM files").fetchall()
        return {r[0]: FileState(*r) for r in rows}

    def replace_file(self, state: FileState, chunks: Sequence[ChunkRecord]) -> int:
        return self.replace_files([(state, chunks)])

    def replace_files(self, batch: Sequence[tuple[FileState, Sequence[ChunkRecord]]]) -> int:
        with self._write() as db:
            new: list[ChunkRecord] = []
            known_files = 0
            for state, chunks in batch:
                known_files += db.execute("SELECT count(*) FROM files WHERE path = ?", (state.path,)).fetchone()[0]
                old = dict(db.execute("SELECT chunk_id, id FROM chunks WHERE path = ?", (state.path,)).fetchall())
                wanted = {c.chunk_id for c in chunks}
                self._delete_rows(db, [rowid for cid, rowid in old.items() if cid not in wanted])
                new.extend(c for c in chunks if c.chunk_id not in old)
            # Ids are assigned here (we hold the write lock) so both inserts can be executemany:
            # bulk indexing spends most of its write time in per-row Python -> SQLite calls.
            row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
            first = (row[0] if row else 0) + 1
            db.executemany(
                "INSERT INTO chunks (id, chunk_id, path, start_line, end_line, language, kind, symbol, text,"
                " embed_prefix, embed_text, embed_hash, meta) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        first + i,
                        c.chunk_id,
                        c.path,
                        c.start_line,
                        c.end_line,
                        c.language,
                        c.kind,
                        c.symbol,
                        c.text,
                        *_embed_columns(c),
                        c.embed_hash,
                        c.meta,
                    )
                    for i, c in enumerate(new)
                ],
            )
            db.executemany(
                "INSERT INTO chunks_fts (rowid, names, body) VALUES (?, ?, ?)",
                [(first + i, c.name_tokens, c.tokens) for i, c in enumerate(new)],
            )
            db.execute("INSERT INTO chunk_log (id) SELECT id FROM chunks WHERE id >= ?", (first,))
            db.executemany(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)",
                [(st.path, st.size, st.mtime_ns, st.sha256, st.language) for st, _ in batch],
            )
            self._add_counts(db, files=len(batch) - known_files, chunks=len(new))
            db.execute("DELETE FROM chunk_log WHERE seq <= (SELECT max(seq) FROM chunk_log) - ?", (CHUNK_LOG_KEEP,))
        return len(new)

    @staticmethod
    def _add_counts(db: sqlite3.Connection, *, files: int = 0, chunks: int = 0, vectors: int = 0) -> None:
        db.executemany(
            "UPDATE counts SET n = n + ? WHERE name = ?",
            [(delta, name) for name, delta in (("files", files), ("chunks", chunks), ("vectors", vectors)) if delta],
        )

    def _delete_rows(self, db: sqlite3.Connection, rowids: Sequence[int]) -> None:
        for start in range(0, len(rowids), 500):
            part = list(rowids[start : start + 500])
            marks = ",".join("?" * len(part))
            db.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", part)
            self._forget_vectors(db, part)
            chunks = db.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part).rowcount
            self._add_counts(db, chunks=-chunks)

    # -- vectors (memory.stores.vector_file) --------------------------------------------------
    def _vector_file(self, db: sqlite3.Connection) -> tuple[VectorFile, int]:
        """The current generation's files and their committed slot count."""
        counts = dict(db.execute("SELECT name, n FROM counts WHERE name IN ('slots', 'vector_generation')"))
        return VectorFile(self.path, counts["vector_generation"], self.dim), counts["slots"]

    @staticmethod
    def _count(db: sqlite3.Connection, name: str) -> int:
        return int(db.execute("SELECT n FROM counts WHERE name = ?", (name,)).fetchone()[0])

    def _forget_vectors(self, db: sqlite3.Connection, rowids: Sequence[int]) -> None:
        """Delete the vectors of `rowids`; their slots are marked dead once this commits."""
        slots: list[int] = []
        for start in range(0, len(rowids), 500):
            part = list(rowids[start : start + 500])
            marks = ",".join("?" * len(part))
            slots += [r[0] for r in db.execute(f"DELETE FROM vectors WHERE id IN ({marks}) RETURNING slot", part)]
        if slots:
            self._add_counts(db, vectors=-len(slots))
            out, _ = self._vector_file(db)
            self._after_commit.append(lambda: out.mark_dead(slots))

    def _new_vector_generation(self, db: sqlite3.Connection) -> VectorFile:
        old, _ = self._vector_file(db)
        db.execute("UPDATE counts SET n = n + 1 WHERE name = 'vector_generation'")
        self._after_commit.append(old.remove)
        new, _ = self._vector_file(db)
        new.remove()  # leftovers of a generation whose transaction never committed
        return new

    def _compact_vectors(self, db: sqlite3.Connection) -> None:
        """Rewrite the live vectors into a new generation once dead slots outnumber them (every
        re-embedded chunk leaves one behind)."""
        old, slots = self._vector_file(db)
        if slots < COMPACT_MIN_SLOTS or slots < 2 * self._count(db, "vectors"):
            return
        live = db.execute("SELECT id, slot FROM vectors ORDER BY slot").fetchall()
        new = self._new_vector_generation(db)
        kept = np.asarray([r[1] for r in live], np.int64)
        ids = np.asarray([r[0] for r in live], np.int64)
        new.append(0, ids, old.read(slots)[kept])
        db.executemany("UPDATE vectors SET slot = ? WHERE id = ?", [(i, r[0]) for i, r in enumerate(live)])
        db.execute("UPDATE counts SET n = ? WHERE name = 'slots'", (len(live),))

    def delete_files(self, paths: Sequence[str]) -> None:
        with self._write() as db:
            for path in paths:
                rowids = [r[0] for r in db.execute("SELECT id FROM chunks WHERE path = ?", (path,))]
                self._delete_rows(db, rowids)
                gone = db.execute("DELETE FROM files WHERE path = ?", (path,)).rowcount
                self._add_counts(db, files=-gone)

    def pending(self, limit: int) -> list[PendingChunk]:
        rows = (
            self._reader()
            .execute(
                "SELECT chunk_id, CASE WHEN embed_text = '' THEN embed_prefix || text ELSE embed_text END, embed_hash"
                " FROM chunks"
                " WHERE has_vec = 0 ORDER BY id LIMIT ?",
                (limit,),
            )
            .fetchall()
        )
        return [PendingChunk(*r) for r in rows]

    def set_vectors(self, chunk_ids: Sequence[str], vectors: FloatArray) -> None:
        vectors = np.asarray(vectors, np.float32)
        with self._write() as db:
            found: dict[int, int] = {}  # row id -> position in `vectors`; the last one of an id wins
            for i, cid in enumerate(chunk_ids):
                row = db.execute("SELECT id FROM chunks WHERE chunk_id = ?", (cid,)).fetchone()
                if row is not None:  # else the file changed again while we embedded; its new chunks are pending
                    found[row[0]] = i
            if not found:
                return
            ids = list(found)
            self._forget_vectors(db, ids)  # replaced ones
            out, slots = self._vector_file(db)
            out.append(slots, np.asarray(ids, np.int64), vectors[list(found.values())])
            db.executemany("INSERT INTO vectors VALUES (?, ?)", [(rowid, slots + i) for i, rowid in enumerate(ids)])
            db.execute("UPDATE counts SET n = n + ? WHERE name = 'slots'", (len(ids),))
            db.executemany("UPDATE chunks SET has_vec = 1 WHERE id = ?", [(rowid,) for rowid in ids])
            self._add_counts(db, vectors=len(ids))
            self._compact_vectors(db)
            db.execute("DELETE FROM vector_log WHERE seq <= (SELECT max(seq) FROM vector_log) - ?", (VECTOR_LOG_KEEP,))

    # -- search --------------------------------------------------------------------------------
    def _hits(self, scored: Sequence[tuple[int, float]]) -> list[Hit]:
        if not scored:
            return []
        marks = ",".join("?" * len(scored))
        rows = (
            self._reader()
            .execute(
                "SELECT id, chunk_id, path, start_line, end_line, language, symbol, text, meta FROM chunks"
                f" WHERE id IN ({marks})",
                [rowid for rowid, _ in scored],
            )
            .fetchall()
        )
        by_id = {r[0]: r for r in rows}
        out: list[Hit] = []
        for rowid, score in scored:
            if rowid in by_id:
                _, chunk_id, path, start, end, language, symbol, text, meta = by_id[rowid]
                out.append(Hit(chunk_id, path, start, end, language, symbol, text, score, meta))
        return out

    def keyword_search(self, tokens: Sequence[str], k: int, filters: Filters) -> list[Hit]:
        if not tokens:
            return []
        reader = self._reader()
        selected = self._selective(reader, [t.replace('"', "") for t in tokens])
        return self._hits(self._keywords.top(reader, selected, k, self._allowed(reader, filters)))

    def _allowed(self, reader: sqlite3.Connection, filters: Filters) -> Mask | None:
        if filters.path_glob:
            glob_regex(filters.path_glob)  # a malformed glob is a QueryError before any work
        return self._filter.mask(reader, filters)

    def _common_token_rows(self) -> float:
        """A token in more rows than this is too common to keep in a query (COMMON_TOKEN_SHARE)."""
        return COMMON_TOKEN_SHARE * self.stats().chunks

    def _selective(self, reader: sqlite3.Connection, tokens: list[str]) -> list[str]:
        """`tokens` without those in more than COMMON_TOKEN_SHARE of chunks, unless all of them are."""
        if len(tokens) < 2:
            return tokens
        found = self._keywords.document_frequencies(reader, tokens)
        ceiling = self._common_token_rows()
        # Absent tokens match nothing either way; dropping every common one must leave some present.
        present = [t for t in tokens if found.get(t, 0) > 0]
        return [t for t in present if found[t] <= ceiling] or present or tokens

    def _refresh_vectors(self) -> None:
        with self._read_lock:
            try:
                self._read_vectors()
            except FileNotFoundError:  # another process compacted them after our snapshot: read the new files
                self._read_vectors()

    def _read_vectors(self) -> None:
        with self._read_lock:
            version = (self._rdb.execute("PRAGMA data_version").fetchone()[0], self._local_writes)
            if version == self._vectors.version:
                return
            index = self._vectors
            with snapshot(self._rdb):  # one state for the log position, the slot count and the slots read
                files, slots = self._vector_file(self._rdb)
                last, touched = changes_since(self._rdb, "vector_log", index.seq)
                if touched is None or files.vectors_path != index.source:
                    ids = files.ids(slots)
                    # The last slot of each live id (see vector_file: a crash can leave a replaced one alive).
                    _, last_of = np.unique(ids[::-1], return_index=True)
                    kept = np.sort(len(ids) - 1 - last_of)
                    kept = kept[ids[kept] >= 0]
                    vectors = files.read(slots)
                    fresh = VectorIndex(self.dim, exact_up_to=index.exact_up_to).replaced(
                        np.zeros(0, bool), ids[kept], vectors if len(kept) == slots else vectors[kept]
                    )
                elif touched:
                    found = []
                    for start in range(0, len(touched), 500):
                        part = touched[start : start + 500]
                        marks = ",".join("?" * len(part))
                        found += self._rdb.execute(
                            f"SELECT id, slot FROM vectors WHERE id IN ({marks})", part
                        ).fetchall()
                    found.sort(key=lambda r: r[1])
                    keep = ~np.isin(index.ids, np.asarray(touched, np.int64))
                    fresh = index.replaced(
                        keep,
                        np.asarray([r[0] for r in found], np.int64),
                        files.read_slots(np.asarray([r[1] for r in found], np.int64)),
                    )
                else:  # other tables changed: the same vectors (no copy of the matrix)
                    fresh = index
            fresh.source = files.vectors_path
            fresh.seq = last
            fresh.version = version
            self._vectors = fresh

    def dense_index(self) -> VectorIndex:
        """The vectors dense search scans now (a snapshot: never changed once returned), e.g. to
        report whether it prefilters and on how many components."""
        self._refresh_vectors()
        return self._vectors

    def _vector_scores(self, vector: FloatArray, depth: int, filters: Filters) -> list[tuple[int, float]]:
        allowed = self._allowed(self._reader(), filters)
        index = self.dense_index()
        if not len(index.ids):
            return []
        among = None
        if allowed is not None:
            inside = index.ids < len(allowed)  # rows newer than the mask: not known to pass
            among = np.flatnonzero(inside & allowed[np.where(inside, index.ids, 0)])
        return index.search(vector, depth, among)

    def vector_search(self, vector: FloatArray, k: int, filters: Filters) -> list[Hit]:
        return self._hits(self._vector_scores(vector, k, filters))

    def hybrid_search(
        self,
        tokens: Sequence[str],
        vector: FloatArray,
        k: int,
        filters: Filters,
        depth: int,
        weights: Sequence[float] | None = None,
    ) -> list[Hit]:
        keyword = self.keyword_search(tokens, depth, filters)
        dense = self.vector_search(vector, depth, filters)
        return rrf([keyword, dense], k, weights=weights)

    def warm(self, stop: threading.Event | None = None) -> None:
        """The postings of the tokens slowest to read (memory.stores.keyword_index.KeywordIndex.warm)."""
        # Tokens too common to be kept in a query are not worth reading ahead.
        self._keywords.warm(self._reader(), self._common_token_rows(), stop)

    def stats(self) -> StoreStats:
        # Kept by every write (the `counts` table): one small read, however large the store.
        counts = dict(self._reader().execute("SELECT name, n FROM counts").fetchall())
        return StoreStats(files=counts["files"], chunks=counts["chunks"], vectors=counts["vectors"])

    def close(self) -> None:
        with self._lock, self._read_lock, self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._rdb.close()
            self._db.close()
