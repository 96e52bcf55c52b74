"""Incremental sync: edits, renames and deletes follow through, and nothing is re-embedded needlessly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memory.config import MemoryConfig
from memory.embedding.embedders import CachedEmbedder
from memory.service import MemoryService


def _service(repo: Path, embedder: CachedEmbedder) -> MemoryService:
    return MemoryService(MemoryConfig(workspace=repo), embedder=embedder)


def _paths(svc: MemoryService, query: str, **kw: object) -> list[str]:
    return [h.path for h in svc.search_code(query, k=5, **kw).results]  # type: ignore[arg-type]


def test_first_index_then_nothing_to_do(repo: Path, embedder: CachedEmbedder) -> None:
    with _service(repo, embedder) as svc:
        progress: list[str] = []
        status = svc.index_workspace(progress_callback=lambda p: progress.append(p.phase.value))
        assert status.complete and status.vectors_pending == 0
        assert status.files_indexed == 5  # users.py, server.ts, main.go, README.md, .gitignore
        assert progress[-1] == "ready" and "chunking" in progress
        computed, calls = embedder.computed, embedder.calls
        assert computed == status.chunks_indexed
        svc.index_workspace()
        assert (embedder.computed, embedder.calls) == (computed, calls)  # nothing changed, no model call
        assert svc.indexer.progress.files_changed == 0


def test_edit_rename_delete(repo: Path, embedder: CachedEmbedder) -> None:
    with _service(repo, embedder) as svc:
        svc.index_workspace()
        base = embedder.computed

        # Edit: only the changed chunk is embedded; the new words are searchable.
        users = repo / "app" / "users.py"
        users.write_text(
            users.read_text().replace(
                'return [field.strip() for field in line.split(",")]',
                'return [field.strip() for field in line.split(";")]  # semicolon separated ledger',
            )
        )
        os.utime(users, ns=(users.stat().st_atime_ns, users.stat().st_mtime_ns + 1_000_000))
        svc.index_workspace()
        assert embedder.computed == base + 1
        assert _paths(svc, "semicolon ledger", mode="keyword")[0] == "app/users.py"

        # Rename: results follow the new path; the text is unchanged, so the cache serves it.
        (repo / "cmd" / "main.go").rename(repo / "cmd" / "fib.go")
        svc.index_workspace()
        assert embedder.computed == base + 1
        hits = _paths(svc, "fibonacci number")
        assert "cmd/fib.go" in hits and "cmd/main.go" not in hits

        # Delete: gone from keyword and dense results and from the manifest.
        (repo / "web" / "server.ts").unlink()
        status = svc.index_workspace()
        assert "web/server.ts" not in _paths(svc, "startServer RateLimiter http listen port")
        assert "web/server.ts" not in svc.store.manifest()
        assert status.files_indexed == 4
        assert embedder.computed == base + 1


def test_touch_without_change_embeds_nothing(repo: Path, embedder: CachedEmbedder) -> None:
    with _service(repo, embedder) as svc:
        svc.index_workspace()
        base = (embedder.computed, embedder.calls)
        users = repo / "app" / "users.py"
        os.utime(users, ns=(users.stat().st_atime_ns, users.stat().st_mtime_ns + 5_000_000))
        svc.index_workspace()
        assert (embedder.computed, embedder.calls) == base
        assert svc.indexer.progress.files_changed == 1 and svc.indexer.progress.chunks_written == 0


def test_a_scan_that_cannot_list_the_workspace_fails_and_deletes_nothing(repo: Path, embedder: CachedEmbedder) -> None:
    """Out of file descriptors, the scan once listed nothing and took that to mean every file was
    deleted: a healthy index emptied and reported complete."""
    import errno
    import resource

    with _service(repo, embedder) as svc:
        svc.index_workspace()
        os.utime(repo / "app" / "users.py")  # a changed file too, so the sync has work to do
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        fillers: list[int] = []
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(fd) for fd in os.listdir("/proc/self/fd")) + 4, hard))
        try:
            while True:  # take every descriptor left, so the scan's next open fails for real
                try:
                    fillers.append(os.open(os.devnull, os.O_RDONLY))
                except OSError as exc:
                    assert exc.errno == errno.EMFILE
                    break
            with pytest.raises(OSError, match="Too many open files"):
                svc.indexer.sync(embed=False)
        finally:
            for fd in fillers:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        status = svc.index_status()
        assert status.files_indexed == 5 and "Too many open files" in (status.last_error or "")
        assert svc.index_workspace().files_indexed == 5 and svc.index_status().last_error is None


def test_keyword_search_before_vectors(repo: Path, embedder: CachedEmbedder) -> None:
    with _service(repo, embedder) as svc:
        progress = svc.indexer.sync(embed=False)
        assert progress.keyword_ready_s is not None
        response = svc.search_code("fibonacci")
        assert response.results[0].path == "cmd/main.go"
        assert response.index.vectors_pending > 0 and not response.index.complete
        assert response.note is not None and "await embeddings" in response.note


def test_refresh_paths_and_watcher(repo: Path, embedder: CachedEmbedder) -> None:
    config = MemoryConfig(workspace=repo, watch=True, poll_interval_s=0.2)
    with MemoryService(config, embedder=embedder) as svc:
        svc.start_indexing()
        svc.wait_for_indexing(60)
        (repo / "app" / "extra.py").write_text("def quaternion_multiply(a, b):\n    return a * b\n")
        svc.refresh_paths(["app/extra.py"])  # 1 chunk, or 0 if the watcher got there first
        assert _paths(svc, "quaternion_multiply")[0] == "app/extra.py"
        # The watcher picks up a change nobody told us about.
        (repo / "app" / "later.py").write_text("def zebra_stripes_count(z):\n    return len(z)\n")
        import time

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "app/later.py" not in _paths(svc, "zebra_stripes_count"):
            time.sleep(0.1)
        assert _paths(svc, "zebra_stripes_count")[0] == "app/later.py"


def test_refresh_paths_reindexes_only_named_files(repo: Path, embedder: CachedEmbedder) -> None:
    with _service(repo, embedder) as svc:
        svc.index_workspace()
        base = embedder.computed
        (repo / "app" / "extra.py").write_text("def quaternion_multiply(a, b):\n    return a * b\n")
        assert svc.refresh_paths(["app/extra.py"]) == 1
        assert embedder.computed == base + 1
        assert svc.search_code("quaternion multiply").results[0].path == "app/extra.py"
        (repo / "app" / "extra.py").unlink()
        assert svc.refresh_paths(["app/extra.py"]) == 0
        assert "app/extra.py" not in svc.store.manifest()
        status = svc.index_status()
        assert status.complete and not status.indexing


def test_bulk_path_in_worker_processes_matches_serial(
    repo: Path, embedder: CachedEmbedder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Large syncs chunk in spawn worker processes; the result must equal the in-process path."""
    import memory.indexing.sync

    with _service(repo, embedder) as serial:
        serial.indexer.sync(embed=False)
        expected = sorted((c.chunk_id, c.embed_hash) for c in serial.store.pending(1000))
    monkeypatch.setattr(memory.indexing.sync, "PARALLEL_MIN_FILES", 1)
    config = MemoryConfig(workspace=repo, index_path=tmp_path / "parallel.sqlite")
    with MemoryService(config, embedder=embedder) as parallel:
        progress = parallel.indexer.sync(embed=False)
        assert progress.files_done == 5
        assert sorted((c.chunk_id, c.embed_hash) for c in parallel.store.pending(1000)) == expected


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity API on this platform")
def test_bulk_syncs_take_a_worker_per_cpu_they_may_use_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process pinned to one CPU (a container's cpuset, `taskset`) prepares files in-process
    rather than in two workers fighting over that CPU; a big machine gets more, up to the cap."""
    import memory.indexing.sync

    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        assert memory.indexing.sync.worker_count() == 1
    finally:
        os.sched_setaffinity(0, allowed)
    assert memory.indexing.sync.worker_count() == min(len(allowed), memory.indexing.sync.PARALLEL_WORKERS_MAX)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    assert memory.indexing.sync.worker_count() == memory.indexing.sync.PARALLEL_WORKERS_MAX == 4


def test_a_background_index_reads_ahead_for_the_first_searches(
    repo: Path, embedder: CachedEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memory.stores.keyword_index as keyword_index

    monkeypatch.setattr(keyword_index, "WARM_MIN_INSTANCES", 2)
    with _service(repo, embedder) as svc:
        svc.index_workspace()  # in the foreground: the caller waits for the index, not for reading ahead
        assert not svc.store._keywords._cache  # type: ignore[attr-defined]
    with _service(repo, embedder) as svc:  # a server's start: the same index, synced in the background
        assert svc.start_indexing()
        svc.wait_for_indexing(60)
        warmed = set(svc.store._keywords._cache)  # type: ignore[attr-defined]
        assert len(warmed) >= 10 and "csv" in warmed, sorted(warmed)
        assert _paths(svc, "fibonacci")[0] == "cmd/main.go"


def test_a_sync_finishing_while_status_is_read_never_reads_as_complete_and_empty(
    repo: Path, embedder: CachedEmbedder
) -> None:
    """index_status reads the sync's flags and the store at two moments; a sync that finishes in
    between (CI under load did this) must not pair "complete" with a store read before its writes."""
    with _service(repo, embedder) as svc:
        read_stats = svc.store.stats

        def stats_then_let_the_sync_finish():  # type: ignore[no-untyped-def]
            before = read_stats()
            if before.files == 0:  # the first read only: the whole sync runs after it
                svc.index_workspace()
            return before

        svc.store.stats = stats_then_let_the_sync_finish  # type: ignore[method-assign]
        status = svc.index_status()
        assert not (status.complete and status.files_indexed == 0), status
        assert svc.index_status().complete and svc.index_status().files_indexed == 5
