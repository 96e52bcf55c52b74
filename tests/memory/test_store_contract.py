"""One contract, every store (SQLite and turbopuffer through its HTTP fake)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memory.embedding.embedders import CachedEmbedder
from memory.errors import QueryError
from memory.indexing.tokens import query_tokens
from memory.stores.base import Filters, Store
from tests.memory.conftest import FIXTURE_FILES, index_text


def _embed_pending(store: Store, embedder: CachedEmbedder) -> int:
    pending = store.pending(1000)
    if pending:
        store.set_vectors([p.chunk_id for p in pending], embedder.embed([p.embed_text for p in pending]))
    return len(pending)


def test_empty_store(store: Store) -> None:
    assert store.manifest() == {}
    stats = store.stats()
    assert (stats.files, stats.chunks, stats.vectors) == (0, 0, 0)
    assert store.keyword_search(["user"], 5, Filters()) == []
    assert store.pending(10) == []


def test_keyword_before_vectors_then_dense(store: Store, embedder: CachedEmbedder) -> None:
    written = index_text(store, "app/users.py", FIXTURE_FILES["app/users.py"], "python")
    assert written == 2  # the small class whole, and the function
    assert set(store.manifest()) == {"app/users.py"}
    assert store.stats().pending == written
    hits = store.keyword_search(query_tokens("add_user"), 3, Filters())
    assert hits and hits[0].symbol == "UserRepository"
    assert hits[0].path == "app/users.py" and (hits[0].start_line, hits[0].end_line) == (6, 17)
    assert store.vector_search(embedder.embed_query("hash a password"), 3, Filters()) == []
    assert _embed_pending(store, embedder) == written
    assert store.stats().pending == 0
    dense = store.vector_search(embedder.embed_query("split comma separated values"), 1, Filters())
    assert dense[0].symbol == "parse_csv_line"
    assert 0.0 < dense[0].score <= 1.0


def test_replace_keeps_unchanged_chunks_and_vectors(store: Store, embedder: CachedEmbedder) -> None:
    text = FIXTURE_FILES["app/users.py"]
    index_text(store, "app/users.py", text, "python")
    _embed_pending(store, embedder)
    before = store.stats()
    assert index_text(store, "app/users.py", text, "python") == 0
    assert store.stats() == before
    edited = text.replace("return [field.strip()", "return [field.strip().lower()")
    assert index_text(store, "app/users.py", edited, "python") == 1
    after = store.stats()
    assert (after.chunks, after.pending) == (before.chunks, 1)
    hits = store.keyword_search(query_tokens("lower"), 5, Filters())
    assert [h.symbol for h in hits] == ["parse_csv_line"]


def test_delete_files(store: Store) -> None:
    index_text(store, "app/users.py", FIXTURE_FILES["app/users.py"], "python")
    index_text(store, "cmd/main.go", FIXTURE_FILES["cmd/main.go"], "go")
    store.delete_files(["app/users.py"])
    assert set(store.manifest()) == {"cmd/main.go"}
    assert store.keyword_search(query_tokens("add_user password"), 5, Filters()) == []
    assert store.keyword_search(query_tokens("fibonacci"), 5, Filters())[0].path == "cmd/main.go"


def test_filters_and_hybrid(store: Store, embedder: CachedEmbedder) -> None:
    for path, lang in [("app/users.py", "python"), ("web/server.ts", "typescript"), ("cmd/main.go", "go")]:
        index_text(store, path, FIXTURE_FILES[path], lang)
    _embed_pending(store, embedder)
    query = "start an http server on a port"
    vector = embedder.embed_query(query)
    assert store.vector_search(vector, 1, Filters())[0].symbol == "startServer"
    assert all(h.language == "go" for h in store.vector_search(vector, 5, Filters(language="go")))
    assert all(
        h.path.endswith(".py") for h in store.keyword_search(query_tokens("user server"), 5, Filters(path_glob="*.py"))
    )
    assert store.keyword_search(query_tokens("fibonacci"), 5, Filters(path_glob="app/**")) == []
    fused = store.hybrid_search(query_tokens(query), vector, 3, Filters(), depth=20)
    assert fused[0].symbol == "startServer"
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)


def test_path_globs_with_braces_and_classes(store: Store) -> None:
    for path, lang in [("app/users.py", "python"), ("web/server.ts", "typescript"), ("cmd/main.go", "go")]:
        index_text(store, path, FIXTURE_FILES[path], lang)
    found_by = {"app/users.py": "add_user", "web/server.ts": "startServer", "cmd/main.go": "fibonacci"}

    def paths(glob: str) -> set[str]:
        return {
            path
            for path, query in found_by.items()
            if path in {h.path for h in store.keyword_search(query_tokens(query), 5, Filters(path_glob=glob))}
        }

    assert paths("**") == set(found_by)

    assert paths("{app,web}/**") == {"app/users.py", "web/server.ts"}
    assert paths("*.{go,ts}") == {"web/server.ts", "cmd/main.go"}
    assert paths("[a-c]*/*") == {"app/users.py", "cmd/main.go"}
    assert paths("[!a]*/*.{py,go}") == {"cmd/main.go"}
    with pytest.raises(QueryError, match=r"path_glob '\{app,web/\*\*': a '\{' is never closed"):
        store.keyword_search(query_tokens("fibonacci"), 5, Filters(path_glob="{app,web/**"))


def test_set_vectors_ignores_vanished_chunks(store: Store, embedder: CachedEmbedder) -> None:
    index_text(store, "cmd/main.go", FIXTURE_FILES["cmd/main.go"], "go")
    pending = store.pending(100)
    store.delete_files(["cmd/main.go"])
    store.set_vectors([p.chunk_id for p in pending], np.ones((len(pending), embedder.dim), np.float32))
    assert store.stats().chunks == 0


def test_sqlite_bm25_leaves_out_near_stopword_tokens_only_when_rarer_ones_exist(tmp_path: Path) -> None:
    from memory.stores.sqlite import COMMON_TOKEN_SHARE, SQLiteStore

    store = SQLiteStore(tmp_path / "index.sqlite", model_id="m", dim=4)
    try:
        files = {f"pkg/mod{i}.py": f"def handler_{i}(request):\n    return request.body\n" for i in range(12)}
        files["pkg/special.py"] = "def checksum_frobnicate(request):\n    return crc(request)\n"
        for path, text in files.items():
            index_text(store, path, text, "python")
        assert COMMON_TOKEN_SHARE * store.stats().chunks < 13  # `request` is in every chunk
        both = store.keyword_search(query_tokens("request frobnicate"), 10, Filters())
        assert [hit.path for hit in both] == ["pkg/special.py"]  # rows matching only `request` skipped
        common = store.keyword_search(query_tokens("request"), 10, Filters())
        assert len(common) == 10  # a query of common tokens only keeps them
    finally:
        store.close()
