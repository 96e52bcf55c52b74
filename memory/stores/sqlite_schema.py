"""The embedded store's schema: ordered, named migrations recorded in `_migrations` (the
simonw/llm pattern), applied by `memory.stores.sqlite.SQLiteStore` when it opens a file."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np

from memory.stores.vector_file import VectorFile


def _run_script(db: sqlite3.Connection, script: str) -> None:
    # Not executescript(): it commits first, and migrations must stay inside our transaction.
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def _m001_initial(db: sqlite3.Connection) -> None:
    _run_script(
        db,
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE files (path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
                            sha256 TEXT NOT NULL, language TEXT NOT NULL);
        CREATE TABLE chunks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, so a cached vector row is never stale
            chunk_id TEXT NOT NULL UNIQUE, path TEXT NOT NULL, start_line INTEGER NOT NULL,
            end_line INTEGER NOT NULL, language TEXT NOT NULL, kind TEXT NOT NULL, symbol TEXT NOT NULL,
            text TEXT NOT NULL, embed_text TEXT NOT NULL, embed_hash TEXT NOT NULL, meta TEXT NOT NULL,
            has_vec INTEGER NOT NULL DEFAULT 0);
        CREATE INDEX chunks_path ON chunks(path);
        CREATE INDEX chunks_pending ON chunks(id) WHERE has_vec = 0;
        CREATE TABLE vectors (id INTEGER PRIMARY KEY, vec BLOB NOT NULL);
        CREATE VIRTUAL TABLE chunks_fts USING fts5(names, body, tokenize = "unicode61 tokenchars '_'");
        """,
    )


# Ordered, named migrations recorded in `_migrations` (the simonw/llm pattern).
def _m002_vector_log(db: sqlite3.Connection) -> None:
    # A change log of the vectors table lets each process refresh its numpy copy in O(changes)
    # instead of re-listing 60k ids after every edit.
    db.execute("CREATE TABLE vector_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, id INTEGER NOT NULL)")
    _log_vector_changes(db)


def _log_vector_changes(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TRIGGER vectors_ins AFTER INSERT ON vectors BEGIN INSERT INTO vector_log (id) VALUES (new.id); END"
    )
    db.execute(
        "CREATE TRIGGER vectors_del AFTER DELETE ON vectors BEGIN INSERT INTO vector_log (id) VALUES (old.id); END"
    )


def _m003_vocab(db: sqlite3.Connection) -> None:
    # Document frequency per token, read by keyword_search to skip near-stopword query tokens.
    db.execute("CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, 'row')")


def _m004_chunk_log(db: sqlite3.Connection) -> None:
    # What memory.stores.keyword_index needs to score BM25 in memory and follow other processes'
    # writes: the rows inserted or deleted since it last looked, and FTS5's postings per token.
    db.execute("CREATE TABLE chunk_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, id INTEGER NOT NULL)")
    db.execute("CREATE TRIGGER chunks_ins AFTER INSERT ON chunks BEGIN INSERT INTO chunk_log (id) VALUES (new.id); END")
    db.execute("CREATE TRIGGER chunks_del AFTER DELETE ON chunks BEGIN INSERT INTO chunk_log (id) VALUES (old.id); END")
    db.execute("CREATE VIRTUAL TABLE chunks_instances USING fts5vocab(chunks_fts, 'instance')")


def _m005_log_inserts_per_batch(db: sqlite3.Connection) -> None:
    # The insert trigger ran once a chunk: 10 us each, 0.6 s of CPU (a tenth of the writer's) in a
    # whole-stdlib index. replace_files, the one writer of chunks, logs a batch's ids in one statement.
    db.execute("DROP TRIGGER chunks_ins")


def _m006_counts(db: sqlite3.Connection) -> None:
    # What stats() reports, kept up to date by each write in its own transaction: three count(*)
    # after every write cost O(store) each time, and fill_vectors asks after every 128 vectors
    # (347 of 400 s of filling a 1M-chunk store).
    db.execute("CREATE TABLE counts (name TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    db.execute(
        "INSERT INTO counts VALUES ('files', (SELECT count(*) FROM files)), ('chunks', (SELECT count(*) FROM chunks)),"
        " ('vectors', (SELECT count(*) FROM chunks WHERE has_vec = 1))"
    )


def _m007_vector_files(db: sqlite3.Connection) -> None:
    # Vectors move out of the database into memory.stores.vector_file's flat files (one read loads
    # them all); `vectors` keeps which slot holds each chunk's vector. Written in id order, so
    # slot i is the i-th row by id.
    index_path = Path(next(row[2] for row in db.execute("PRAGMA database_list") if row[1] == "main"))
    first = db.execute("SELECT length(vec) FROM vectors LIMIT 1").fetchone()
    slots = 0
    if first is not None:
        out = VectorFile(index_path, 0, first[0] // 4)
        cursor = db.execute("SELECT id, vec FROM vectors ORDER BY id")
        while batch := cursor.fetchmany(10_000):
            ids = np.asarray([r[0] for r in batch], np.int64)
            vectors = np.frombuffer(b"".join(r[1] for r in batch), np.float32).reshape(len(batch), -1)
            out.append(slots, ids, vectors)
            slots += len(batch)
    db.execute("CREATE TABLE vector_slots (id INTEGER PRIMARY KEY, slot INTEGER NOT NULL)")
    db.execute("INSERT INTO vector_slots SELECT id, row_number() OVER (ORDER BY id) - 1 FROM vectors")
    db.execute("DROP TABLE vectors")  # and its triggers
    db.execute("ALTER TABLE vector_slots RENAME TO vectors")
    _log_vector_changes(db)
    db.execute("INSERT INTO counts VALUES ('slots', ?), ('vector_generation', 0)", (slots,))


def _m008_embed_prefix(db: sqlite3.Connection) -> None:
    # The text a method is embedded with is its class line then its text: storing it whole kept a
    # second copy of two chunks in three (25 of 172 MB for the standard library).
    db.execute("ALTER TABLE chunks ADD COLUMN embed_prefix TEXT NOT NULL DEFAULT ''")
    db.execute(
        "UPDATE chunks SET embed_prefix = substr(embed_text, 1, length(embed_text) - length(text)), embed_text = ''"
        " WHERE embed_text != '' AND length(embed_text) >= length(text)"
        " AND substr(embed_text, length(embed_text) - length(text) + 1) = text"
    )


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("m001_initial", _m001_initial),
    ("m002_vector_log", _m002_vector_log),
    ("m003_vocab", _m003_vocab),
    ("m004_chunk_log", _m004_chunk_log),
    ("m005_log_inserts_per_batch", _m005_log_inserts_per_batch),
    ("m006_counts", _m006_counts),
    ("m007_vector_files", _m007_vector_files),
    ("m008_embed_prefix", _m008_embed_prefix),
]
VECTOR_LOG_KEEP = 200_000  # older entries are pruned; a process further behind reloads everything
CHUNK_LOG_KEEP = VECTOR_LOG_KEEP
