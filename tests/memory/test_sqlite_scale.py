"""The embedded store's behaviour that matters at scale: counts kept by the writes, filters inside
the indexes, reopening, and stores written by an older schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

import memory.stores.sqlite as sqlite_store
from memory.catalog import indexed_workspaces
from memory.indexing.tokens import query_tokens
from memory.ranking import glob_match
from memory.stores.base import Filters, Hit, StoreStats
from memory.stores.sqlite import SQLiteStore
from memory.stores.vector_file import VectorFile
from tests.memory.conftest import FIXTURE_FILES, index_text

DIM = 8


def _source(i: int) -> str:
    return "\n\n".join(
        f"def handler_{i}_{j}(request):\n    '''Answer request {j} of module {i}.'''\n    return request.value_{j}\n"
        for j in range(3)
    )


def _fill(store: SQLiteStore, files: int) -> None:
    for i in range(files):
        index_text(store, f"pkg{i % 3}/mod_{i}.py", _source(i), "python")


def _random_vectors(n: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _embed_in_batches(store: SQLiteStore, batch: int) -> None:
    while pending := store.pending(batch):
        store.set_vectors([p.chunk_id for p in pending], _random_vectors(len(pending), len(pending)))


def _counted(path: Path) -> StoreStats:
    """What stats() must say, counted from the tables themselves."""
    with sqlite3.connect(path) as db:
        files = db.execute("SELECT count(*) FROM files").fetchone()[0]
        chunks = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
        vectors = db.execute("SELECT count(*) FROM vectors").fetchone()[0]
    return StoreStats(files=files, chunks=chunks, vectors=vectors)


def test_stats_stay_right_through_batches_edits_deletes_and_a_model_change(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = SQLiteStore(path, model_id="m1", dim=DIM)
    _fill(store, 30)
    store.set_vectors(["no-such-chunk"], _random_vectors(1))  # a vanished chunk changes nothing
    _embed_in_batches(store, batch=4)
    assert store.stats() == _counted(path) == StoreStats(files=30, chunks=90, vectors=90)
    index_text(store, "pkg0/mod_0.py", _source(0).replace("value_1", "other_1"), "python")  # one chunk re-made
    store.delete_files(["pkg1/mod_1.py", "not/indexed.py"])
    assert store.stats() == _counted(path) == StoreStats(files=29, chunks=87, vectors=86)
    again = store.pending(10)
    store.set_vectors([again[0].chunk_id] * 2, _random_vectors(2))  # the same chunk twice counts once
    assert store.stats() == _counted(path) == StoreStats(files=29, chunks=87, vectors=87)
    store.close()
    other_model = SQLiteStore(path, model_id="m2", dim=DIM)
    assert other_model.stats() == _counted(path) == StoreStats(files=29, chunks=87, vectors=0)
    other_model.close()


def _passes(hit: Hit, filters: Filters) -> bool:
    return (not filters.language or hit.language == filters.language) and (
        not filters.path_glob or glob_match(filters.path_glob, hit.path)
    )


def test_filters_give_the_top_results_of_post_filtering_and_follow_edits(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "index.sqlite", model_id="m1", dim=DIM)
    _fill(store, 30)
    index_text(store, "cmd/main.go", FIXTURE_FILES["cmd/main.go"], "go")
    _embed_in_batches(store, batch=7)
    tokens = query_tokens("answer request handler value")
    query = _random_vectors(1, seed=42)[0]
    cases = [Filters(path_glob="pkg1/**"), Filters(language="go"), Filters(path_glob="pkg2/*", language="python")]

    for filters in cases:
        for found, everything in (
            (store.keyword_search(tokens, 5, filters), store.keyword_search(tokens, 1000, Filters())),
            (store.vector_search(query, 5, filters), store.vector_search(query, 1000, Filters())),
        ):
            expected = [h.chunk_id for h in everything if _passes(h, filters)][:5]
            assert [h.chunk_id for h in found] == expected
            assert all(_passes(h, filters) for h in found)
    assert len(store.vector_search(query, 5, Filters(language="go"))) == 3  # the go file's chunks, no others
    # Edits after the masks were built: a new file that passes, and every pkg1 file gone.
    index_text(store, "pkg2/late.py", _source(99), "python")
    _embed_in_batches(store, batch=7)
    store.delete_files([p for p in store.manifest() if p.startswith("pkg1/")])
    late = store.keyword_search(query_tokens("module 99"), 3, Filters(path_glob="pkg2/*"))
    assert late and late[0].path == "pkg2/late.py"
    assert store.keyword_search(tokens, 5, Filters(path_glob="pkg1/**")) == []
    assert store.vector_search(query, 5, Filters(path_glob="pkg1/**")) == []
    assert store.keyword_search(tokens, 5, Filters(language="rust")) == []
    store.close()


def _everything(store: SQLiteStore) -> tuple[list[tuple[str, float]], ...]:
    """Every search this file asks, as (chunk id, score) lists: what must survive a reopen."""
    query = _random_vectors(1, seed=42)[0]
    tokens = query_tokens("answer request handler value module")
    return tuple(
        [(h.chunk_id, round(h.score, 5)) for h in found]
        for found in (
            store.vector_search(query, 1000, Filters()),
            store.vector_search(query, 7, Filters(path_glob="pkg2/**")),
            store.keyword_search(tokens, 1000, Filters()),
            store.keyword_search(tokens, 7, Filters(path_glob="pkg2/**")),
        )
    )


def test_reopening_gives_the_same_results_after_edits_deletes_and_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "COMPACT_MIN_SLOTS", 40)
    path = tmp_path / "index.sqlite"
    store = SQLiteStore(path, model_id="m1", dim=DIM)
    _fill(store, 20)
    _embed_in_batches(store, batch=9)
    for round_ in range(3):  # edits re-embed chunks, leaving dead slots until a compaction
        for i in range(0, 20, 2):
            index_text(store, f"pkg{i % 3}/mod_{i}.py", _source(i).replace("value", f"v{round_}"), "python")
        _embed_in_batches(store, batch=9)
    store.delete_files(["pkg1/mod_1.py"])
    before = _everything(store)
    assert len(before[0]) == store.stats().vectors == 57  # every live vector once, no deleted or replaced one
    generations = sorted(p.name for p in tmp_path.glob("index.sqlite.vectors-*.f32"))
    assert generations != ["index.sqlite.vectors-0.f32"]  # compacted at least once, the old files removed
    assert len(generations) == 1
    store.close()
    reopened = SQLiteStore(path, model_id="m1", dim=DIM)
    assert _everything(reopened) == before
    reopened.close()


def test_another_model_starts_a_new_vector_file(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = SQLiteStore(path, model_id="m1", dim=DIM)
    _fill(store, 4)
    _embed_in_batches(store, batch=5)
    store.close()
    other = SQLiteStore(path, model_id="m2", dim=DIM)
    assert other.vector_search(_random_vectors(1)[0], 10, Filters()) == []
    assert not VectorFile(path, 0, DIM).vectors_path.exists()
    _embed_in_batches(other, batch=5)
    assert len(other.vector_search(_random_vectors(1)[0], 100, Filters())) == 12
    assert VectorFile(path, 1, DIM).vectors_path.exists()
    other.close()


def _class_source(methods: int) -> str:
    body = "\n".join(
        f"    def method_{j}(self, value):\n        '''Scale value by {j}.'''\n        return value * {j}\n"
        for j in range(methods)
    )
    return f"class ReportScaler:\n    '''Scales report values.'''\n\n{body}"


def _stored_twice(db: sqlite3.Connection) -> int:
    """Chunks whose text is held a second time inside their embedding text."""
    return int(db.execute("SELECT count(*) FROM chunks WHERE instr(embed_text, text) > 0").fetchone()[0])


def _back_to_m005(path: Path, slots: int) -> None:
    """Undo m008, m007 and m006: the layout a store written before them has (the text a method is
    embedded with stored whole, one BLOB per vector, no counts)."""
    with sqlite3.connect(path) as db:
        db.execute("UPDATE chunks SET embed_text = embed_prefix || text WHERE embed_prefix != ''")
        db.execute("ALTER TABLE chunks DROP COLUMN embed_prefix")
        files = VectorFile(path, 0, DIM)
        ids, vectors = files.ids(slots), files.read(slots)
        live = [(int(rowid), vectors[slot].tobytes()) for slot, rowid in enumerate(ids) if rowid >= 0]
        db.execute("DROP TABLE vectors")
        db.execute("CREATE TABLE vectors (id INTEGER PRIMARY KEY, vec BLOB NOT NULL)")
        db.executemany("INSERT INTO vectors VALUES (?, ?)", live)
        db.execute("DROP TABLE counts")
        db.execute("DELETE FROM _migrations WHERE name IN ('m006_counts', 'm007_vector_files', 'm008_embed_prefix')")
        files.remove()


def test_a_store_written_before_m006_is_migrated_with_all_its_data(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = SQLiteStore(path, model_id="m1", dim=DIM)
    _fill(store, 12)
    _embed_in_batches(store, batch=5)  # 36 slots
    store.delete_files(["pkg0/mod_3.py"])
    index_text(store, "report.py", _class_source(40), "python")  # pending: methods carry their class line
    before, stats = _everything(store), store.stats()
    pending = [(p.chunk_id, p.embed_text) for p in store.pending(1000)]
    assert sum("class ReportScaler" in text for _, text in pending) >= 20
    store.close()
    _back_to_m005(path, slots=36)
    with sqlite3.connect(path) as db:
        assert _stored_twice(db) >= 20
        assert db.execute("SELECT count(*) FROM vectors").fetchone()[0] == 33
    migrated = SQLiteStore(path, model_id="m1", dim=DIM)
    assert _everything(migrated) == before
    assert migrated.stats() == _counted(path) == stats
    assert [(p.chunk_id, p.embed_text) for p in migrated.pending(1000)] == pending
    with sqlite3.connect(path) as db:
        assert _stored_twice(db) == 0
    _fill(migrated, 13)  # and it goes on: the deleted file back and one new one, every chunk embedded
    _embed_in_batches(migrated, batch=5)
    assert len(migrated.vector_search(_random_vectors(1)[0], 1000, Filters())) == migrated.stats().chunks
    migrated.close()


def test_the_catalog_counts_the_vector_files_in_an_index_size(tmp_path: Path) -> None:
    path = tmp_path / "index" / "ws-0123456789.sqlite"
    store = SQLiteStore(path, model_id="m1", dim=DIM)
    _fill(store, 50)
    _embed_in_batches(store, batch=64)
    store.close()
    vector_bytes = sum(p.stat().st_size for p in path.parent.glob("ws-0123456789.sqlite.vectors-*"))
    assert vector_bytes == 150 * (DIM * 4 + 8)
    on_disk = sum(p.stat().st_size for p in path.parent.iterdir())  # the folder holds this index only
    [summary] = indexed_workspaces(tmp_path)
    assert (summary.chunks, summary.vectors, summary.bytes) == (150, 150, on_disk)


def test_the_catalog_reads_the_kept_counts_and_counts_a_store_from_before_them(tmp_path: Path) -> None:
    path = tmp_path / "index" / "ws-0123456789.sqlite"
    store = SQLiteStore(path, model_id="m1", dim=DIM)
    _fill(store, 12)
    _embed_in_batches(store, batch=5)
    store.delete_files(["pkg0/mod_3.py"])
    stats = store.stats()
    store.close()
    [summary] = indexed_workspaces(tmp_path)
    assert (summary.files, summary.chunks, summary.vectors, summary.pending) == (
        stats.files, stats.chunks, stats.vectors, stats.chunks - stats.vectors
    )  # fmt: skip
    with sqlite3.connect(path) as db:  # the kept counts are what it read: change them, it follows
        db.execute("UPDATE counts SET n = n + 1000 WHERE name = 'chunks'")
    assert indexed_workspaces(tmp_path)[0].chunks == stats.chunks + 1000
    _back_to_m005(path, slots=36)
    [old] = indexed_workspaces(tmp_path)
    assert (old.error, old.files, old.chunks) == (None, stats.files, stats.chunks)
