"""The plain functions the lead wraps as MCP tools, driven on a real store and model."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from memory.config import MemoryConfig
from memory.embedding.embedders import CachedEmbedder, OnnxMiniLM, OpenAIEmbedder
from memory.errors import EmbedderError, QueryError, RlideMemoryError, WorkspaceError
from memory.service import MemoryService
from memory.solutions import SolvedEpisode
from memory.stores.sqlite import SQLiteStore
from memory.stores.sqlite_schema import MIGRATIONS


@pytest.fixture
def svc(repo: Path, embedder: CachedEmbedder) -> Iterator[MemoryService]:
    with MemoryService(MemoryConfig(workspace=repo), embedder=embedder) as service:
        service.index_workspace()
        yield service


def test_search_code_response(svc: MemoryService) -> None:
    response = svc.search_code("check a user's password hash", k=3)
    assert response.mode == "hybrid" and response.index.complete and response.note is None
    top = response.results[0]
    assert (top.path, top.start_line, top.end_line) == ("app/users.py", 6, 17)
    assert "def check_password" in top.text and top.score > 0
    dumped = response.model_dump()
    assert set(dumped["results"][0]) >= {"path", "start_line", "end_line", "score", "relevance", "text"}


def test_relevance_says_whether_the_top_hit_answers_not_where_it_ranked(svc: MemoryService) -> None:
    """A rank-based score is the same for the first hit of any query; relevance is a probability
    from what the hit contains: high for the function a question is about, low for the best of
    nothing."""
    answered = svc.search_code("check a user's password hash", k=3).results[0]
    unanswerable = svc.search_code("render a quaternion rotation matrix in opengl shaders", k=3).results[0]
    assert 0.0 <= unanswerable.relevance < 0.05 < 0.2 < answered.relevance <= 1.0


def test_filters(svc: MemoryService) -> None:
    assert {h.language for h in svc.search_code("server function", language="go").results} == {"go"}
    # Any case and common aliases name the same language; an unknown one is an error, not an
    # empty result that would read as "no such code here".
    assert (
        svc.search_code("server function", language=" Golang").results
        == svc.search_code("server function", language="go").results
    )
    assert {h.language for h in svc.search_code("user password", language="PY").results} == {"python"}
    with pytest.raises(QueryError, match="'cobol' is unknown: use one of .*python.*typescript"):
        svc.search_code("server", language="cobol")
    assert all(h.path.startswith("web/") for h in svc.search_code("server", path_glob="web/**").results)
    assert svc.search_code("fibonacci", path_glob="*.py", mode="keyword").results == []
    assert svc.search_code("rate limit requests per ip", mode="dense").results[0].path == "web/server.ts"


def test_errors_are_actionable(svc: MemoryService, tmp_path: Path) -> None:
    with pytest.raises(QueryError, match="pass words"):
        svc.search_code("   ")
    with pytest.raises(QueryError, match="use one of hybrid"):
        svc.search_code("x", mode="fuzzy")
    with pytest.raises(WorkspaceError, match="create a MemoryService"):
        svc.index_workspace(tmp_path)
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        svc.refresh_paths(["../../etc/passwd"])
    with pytest.raises(RlideMemoryError, match="not a directory"):
        MemoryService(MemoryConfig(workspace=tmp_path / "missing", embedder="none"))


def test_search_never_blocks_and_reports_progress(repo: Path, embedder: CachedEmbedder) -> None:
    with MemoryService(MemoryConfig(workspace=repo), embedder=embedder) as service:
        first = service.search_code("fibonacci")  # nothing indexed yet: starts indexing, answers now
        assert not first.index.complete or first.results
        if not first.index.keyword_complete:  # the note counts what the index block counts
            progress = f"{first.index.files_done} of {first.index.files_changed} changed files chunked"
            assert first.note is not None and progress in first.note, first.note
        status = service.wait_for_indexing(60)
        assert status.complete and status.phase == "ready"
        assert service.search_code("fibonacci").results[0].path == "cmd/main.go"


def test_solutions_roundtrip(svc: MemoryService) -> None:
    svc.remember_solution(
        SolvedEpisode(
            episode_id="ep-1",
            task="Fix flaky test in the CSV parser",
            summary="Strip whitespace around fields",
            files_touched=["app/users.py"],
            reward=1.0,
        )
    )
    svc.remember_solution(
        SolvedEpisode(
            episode_id="ep-2",
            task="Add rate limiting to the HTTP server",
            summary="Count hits per IP in a Map",
            files_touched=["web/server.ts"],
            reward=0.4,
        )
    )
    hits = svc.recall_solutions("throttle requests from one client", k=2)
    assert hits[0].episode.episode_id == "ep-2" and hits[0].episode.files_touched == ["web/server.ts"]
    assert [h.episode.episode_id for h in svc.recall_solutions("throttle requests", k=2, min_reward=0.5)] == ["ep-1"]
    svc.solutions.forget("ep-2")
    assert all(h.episode.episode_id != "ep-2" for h in svc.recall_solutions("rate limiting", k=5))
    # Code sync never touches the solution memory.
    svc.index_workspace()
    assert svc.recall_solutions("csv parser", k=1)[0].episode.episode_id == "ep-1"


def test_sqlite_migrations_and_model_change(tmp_path: Path) -> None:
    path = tmp_path / "idx.sqlite"
    store = SQLiteStore(path, model_id="model-a", dim=4)
    from memory.indexing.chunking import chunk_text
    from memory.indexing.prepare import make_records
    from memory.stores.base import FileState

    recs = make_records("a.py", "python", chunk_text("def f(x):\n    return x + 1\n" * 3, "python"))
    store.replace_file(FileState("a.py", 1, 1, "h", "python"), recs)
    store.set_vectors([r.chunk_id for r in recs], np.eye(4, dtype=np.float32)[: len(recs)])
    assert store.stats().pending == 0
    store.close()
    reopened = SQLiteStore(path, model_id="model-b", dim=4)  # other model: vectors dropped, text kept
    assert reopened.stats().pending == reopened.stats().chunks > 0
    names = [r[0] for r in reopened._db.execute("SELECT name FROM _migrations")]
    assert names == [name for name, _ in MIGRATIONS]  # every one applied, once, in order
    reopened.close()


class _EmbeddingsHandler(BaseHTTPRequestHandler):
    model: OnnxMiniLM

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer sk-test":
            self.send_response(401)
            self.end_headers()
            return
        vectors = self.model.embed(body["input"])
        payload = {
            "object": "list",
            "model": body["model"],
            "data": [
                {"object": "embedding", "index": i, "embedding": v.tolist()}
                for i, v in reversed(list(enumerate(vectors)))
            ],
        }
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_openai_compatible_embedder(minilm: OnnxMiniLM) -> None:
    """A real HTTP server on loopback speaking the OpenAI embeddings API (backed by the real model)."""
    _EmbeddingsHandler.model = minilm
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        remote = OpenAIEmbedder(base_url=url, model="minilm", api_key="sk-test", dim=384, batch_size=2)
        texts = ["read a file", "sort a list", "read a file"]
        got = remote.embed(texts)
        assert np.allclose(got, minilm.embed(texts), atol=1e-5)  # order restored, duplicates sent once
        with pytest.raises(EmbedderError, match="check the URL"):
            OpenAIEmbedder(base_url=url, model="m", api_key="wrong", dim=384).embed(["x"])
        with pytest.raises(EmbedderError, match="openai_dim"):
            OpenAIEmbedder(base_url=url, model="m", api_key="sk-test", dim=1536).embed(["x"])
    finally:
        server.shutdown()


def test_minilm_vector_of_a_text_does_not_depend_on_its_neighbours(minilm: OnnxMiniLM) -> None:
    texts = ["short", "a much longer text about parsing configuration files " * 8, "short", "def f(x): pass"] * 3
    together = minilm.embed(texts)
    alone = np.stack([minilm.embed([t])[0] for t in texts])
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    # Both sessions took part and the int8 graph quantizes per run: still the same vector.
    assert np.array_equal(together, alone)
    assert np.array_equal(minilm.embed_query("short"), together[0])
    assert float(together[0] @ together[1]) < 0.9


def test_service_on_turbopuffer(repo: Path, embedder: CachedEmbedder) -> None:
    """The whole service on the turbopuffer store, through the client's pluggable HTTP transport."""
    pytest.importorskip("turbopuffer", reason="the turbopuffer extra is not installed")
    import httpx2

    from tests.memory.fake_turbopuffer import FakeTurbopuffer

    fake = FakeTurbopuffer()
    config = MemoryConfig(
        workspace=repo,
        store="turbopuffer",
        turbopuffer_api_key="tpuf-test",
        turbopuffer_base_url="http://turbopuffer.fake",
    )
    with MemoryService(config, embedder=embedder, http_client=httpx2.Client(transport=fake)) as service:
        status = service.index_workspace()
        assert status.complete and status.files_indexed == 5 and status.store == "turbopuffer"
        response = service.search_code("start an http server on a port", k=3)
        assert response.mode == "hybrid" and response.results[0].path == "web/server.ts"
        assert service.search_code("fibonacci", language="go", mode="keyword").results[0].path == "cmd/main.go"
        (repo / "cmd" / "main.go").unlink()
        service.index_workspace()
        assert all(h.path != "cmd/main.go" for h in service.search_code("fibonacci").results)
        service.remember_solution(
            SolvedEpisode(episode_id="ep-9", task="speed up fibonacci", summary="memoize the recursion")
        )
        assert service.recall_solutions("make recursion faster", k=1)[0].episode.episode_id == "ep-9"
    namespaces = set(fake.namespaces)
    assert len(namespaces) == 2 and "rlide-solutions" in namespaces
    assert any(path.endswith("/query") for _, path in fake.requests)


def test_keyword_only_service(repo: Path) -> None:
    with MemoryService(MemoryConfig(workspace=repo, embedder="none")) as service:
        status = service.index_workspace()
        assert status.complete and status.vectors_pending == 0
        response = service.search_code("RateLimiter allow")
        assert response.mode == "keyword" and response.results[0].path == "web/server.ts"
        assert response.results[0].symbol == "RateLimiter"


def test_restart_serves_old_index_and_catches_up(repo: Path, embedder: CachedEmbedder) -> None:
    with MemoryService(MemoryConfig(workspace=repo), embedder=embedder) as first:
        first.index_workspace()
    (repo / "app" / "offline.py").write_text("def written_while_down(x):\n    return x\n")
    with MemoryService(MemoryConfig(workspace=repo), embedder=embedder) as second:
        response = second.search_code("fibonacci")  # answers from the existing index at once
        assert response.results[0].path == "cmd/main.go"
        status = second.wait_for_indexing(60)  # the first search started a catch-up sync
        assert status.complete and status.files_indexed == 6
        assert second.search_code("written_while_down").results[0].path == "app/offline.py"
