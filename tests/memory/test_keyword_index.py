"""The in-memory BM25 (memory/stores/keyword_index.py) against FTS5's own bm25(), on real stores."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import memory.stores.keyword_index as keyword_index
import memory.stores.sqlite as sqlite_store
from memory.indexing.tokens import query_tokens
from memory.stores.base import Filters
from memory.stores.sqlite import BM25_WEIGHTS, SQLiteStore
from tests.memory.conftest import index_text

WORDS = ["parse", "header", "email", "socket", "timeout", "json", "string", "case", "title", "file", "path", "tree"]
QUERIES = ["parse email header", "socket timeout", "title case string", "json", "file path tree walk", "zzz_absent"]


def _source(rng: random.Random, n: int) -> str:
    # Common words get high weights so that document frequencies range from a few rows to most.
    funcs = []
    for i in range(n):
        words = rng.choices(WORDS, weights=range(len(WORDS), 0, -1), k=rng.randint(2, 12))
        name = "_".join(words[:2])
        body = " ".join(words[2:]) or "nothing"
        funcs.append(f"def {name}_{i}(value):\n    '''{body}'''\n    return value\n")
    return "\n\n".join(funcs)


def _fts5(store: SQLiteStore, tokens: list[str], k: int) -> list[tuple[int, float]]:
    match = " OR ".join(f'"{t}"' for t in tokens)
    rows = store._reader().execute(
        "SELECT rowid, bm25(chunks_fts, ?, ?) AS s FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY s LIMIT ?",
        (*BM25_WEIGHTS, match, k),
    )
    return [(rowid, -score) for rowid, score in rows]


def _assert_same_ranking(store: SQLiteStore) -> None:
    for query in QUERIES:
        tokens = query_tokens(query)
        ours = store._keywords.top(store._reader(), tokens, 1000)
        theirs = _fts5(store, tokens, 1000)
        assert len(ours) == len(theirs), query
        assert dict(ours) == pytest.approx(dict(theirs), rel=1e-9), query  # the same rows, the same scores
        assert [s for _, s in ours] == sorted((s for _, s in ours), reverse=True)


def test_scores_equal_fts5_and_follow_another_writer(tmp_path: Path) -> None:
    rng = random.Random(7)
    path = tmp_path / "index.sqlite"
    reader, writer = SQLiteStore(path, model_id="m", dim=4), SQLiteStore(path, model_id="m", dim=4)
    try:
        for i in range(12):
            index_text(writer, f"pkg/mod{i}.py", _source(rng, 8))
        _assert_same_ranking(reader)  # postings for every query token are now cached
        # Another connection (another process, as far as the reader can tell) edits and deletes.
        for i in range(0, 12, 3):
            index_text(writer, f"pkg/mod{i}.py", _source(rng, 5))
        writer.delete_files(["pkg/mod1.py", "pkg/mod2.py"])
        index_text(writer, "pkg/new.py", _source(rng, 6))
        _assert_same_ranking(reader)  # patched in place, not reloaded
        # A filter every row passes changes nothing (memory.stores.row_filter).
        ours = reader.keyword_search(query_tokens("socket timeout"), 3, Filters())
        theirs = reader.keyword_search(query_tokens("socket timeout"), 3, Filters(language="python"))
        assert [h.chunk_id for h in ours] == [h.chunk_id for h in theirs]
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], rel=1e-9)
    finally:
        reader.close()
        writer.close()


def test_a_reader_behind_the_pruned_log_reloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    path = tmp_path / "index.sqlite"
    reader, writer = SQLiteStore(path, model_id="m", dim=4), SQLiteStore(path, model_id="m", dim=4)
    try:
        index_text(writer, "a.py", _source(rng, 10))
        _assert_same_ranking(reader)
        monkeypatch.setattr(sqlite_store, "CHUNK_LOG_KEEP", 3)
        for i in range(5):
            index_text(writer, f"b{i}.py", _source(rng, 4))
        first = writer._reader().execute("SELECT min(seq) FROM chunk_log").fetchone()[0]
        assert reader._keywords._seq < first - 1  # the entries it would need are gone
        _assert_same_ranking(reader)
    finally:
        reader.close()
        writer.close()


def test_the_postings_cache_is_sized_by_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyword_index, "MIN_POSTINGS", 0)
    monkeypatch.setattr(keyword_index, "POSTINGS_PER_ROW", 2)  # far below what the queries need: evictions
    rng = random.Random(5)
    store = SQLiteStore(tmp_path / "index.sqlite", model_id="m", dim=4)
    try:
        index_text(store, "small.py", _source(rng, 20))
        _assert_same_ranking(store)
        rows = store._keywords._rows
        assert 0 < store._keywords._held <= 2 * rows + max(len(p.rows) for p in store._keywords._cache.values())
        for i in range(6):
            index_text(store, f"more{i}.py", _source(rng, 20))
        _assert_same_ranking(store)
        assert store._keywords._rows > 5 * rows
        assert store._keywords._held > 2 * rows  # the larger table keeps more
    finally:
        store.close()


def test_long_rows_are_measured_as_fts5_does(tmp_path: Path) -> None:
    # Rows of over 127 tokens store their length in multi-byte varints (keyword_index._set_lengths).
    rng = random.Random(3)
    store = SQLiteStore(tmp_path / "index.sqlite", model_id="m", dim=4)
    try:
        for i, words in enumerate((40, 200, 3000)):
            body = " ".join(rng.choices(WORDS, k=words))
            index_text(store, f"long{i}.py", f"def long_{i}(value):\n    '''{body}'''\n    return value\n")
        index_text(store, "short.py", _source(rng, 10))
        _assert_same_ranking(store)
    finally:
        store.close()


def test_warming_reads_ahead_the_tokens_slowest_to_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyword_index, "WARM_MIN_INSTANCES", 12)
    rng = random.Random(9)
    store = SQLiteStore(tmp_path / "index.sqlite", model_id="m", dim=4)
    try:
        for i in range(20):
            index_text(store, f"pkg/mod{i}.py", _source(rng, 10))
        db = store._reader()
        occurrences = dict(db.execute("SELECT term, count(*) FROM chunks_instances GROUP BY term").fetchall())
        rows_with = dict(db.execute("SELECT term, count(DISTINCT doc) FROM chunks_instances GROUP BY term").fetchall())
        chunks = store.stats().chunks
        already_set = __import__("threading").Event()
        already_set.set()
        store.warm(already_set)
        assert not store._keywords._cache  # asked to stop before the first token
        store.warm()
        cached = set(store._keywords._cache)
        slow = {t for t, n in occurrences.items() if n >= 12 and rows_with[t] <= 0.25 * chunks}
        assert cached == slow and len(slow) >= 3, (sorted(cached), sorted(slow))
        assert any(rows_with[t] > 0.25 * chunks for t in occurrences)  # too common to be asked for: left out
        assert store._keywords._held <= store._keywords._limit() // 2
        _assert_same_ranking(store)  # what was read ahead scores as FTS5 does
        # Within half the cache: the tokens with the most occurrences first.
        monkeypatch.setattr(keyword_index, "MIN_POSTINGS", 0)
        monkeypatch.setattr(keyword_index, "POSTINGS_PER_ROW", 1)
        tight = SQLiteStore(tmp_path / "index.sqlite", model_id="m", dim=4)
        try:
            tight.warm()
            some = set(tight._keywords._cache)
            assert some and some < slow and tight._keywords._held <= chunks // 2
            assert min(occurrences[t] for t in some) >= max(occurrences[t] for t in slow - some)
        finally:
            tight.close()
    finally:
        store.close()
