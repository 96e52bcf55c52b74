"""Several processes on one index, and an indexer killed with SIGKILL mid-way."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from memory.config import MemoryConfig
from memory.embedding.embedders import CachedEmbedder
from memory.service import MemoryService

ROOT = Path(__file__).resolve().parents[2]
STDLIB = Path(os.__file__).parent


def _spawn(repo: Path, action: str, home: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, RLIDE_HOME=str(home), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, "-m", "tests.memory.worker", str(repo), action],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_index_and_search_one_workspace(repo: Path, rlide_home: Path, embedder: CachedEmbedder) -> None:
    procs = [_spawn(repo, "index-and-search", rlide_home) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        final = json.loads(out.strip().splitlines()[-1])
        assert final["done"] and set(final["found"]) == {"cmd/main.go"}
    # The shared index is whole and has no duplicates: a fresh process agrees with a clean index.
    with MemoryService(MemoryConfig(workspace=repo), embedder=embedder) as svc:
        status = svc.index_workspace()
        assert status.complete and status.files_indexed == 5
        db = sqlite3.connect(svc.config.resolved_index_path())
        dupes = db.execute("SELECT count(*) - count(DISTINCT chunk_id) FROM chunks").fetchone()[0]
        fts = db.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
        assert dupes == 0 and fts == status.chunks_indexed
        assert embedder.computed == 0  # the two processes left nothing pending


@pytest.mark.slow
def test_killed_indexer_leaves_usable_index_that_resumes(
    tmp_path: Path, rlide_home: Path, embedder: CachedEmbedder
) -> None:
    repo = tmp_path / "stdlib-slice"
    for name in ["json/decoder.py", "json/encoder.py", "shlex.py", "textwrap.py", "fnmatch.py", "colorsys.py"]:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(STDLIB / name, repo / name)
    proc = _spawn(repo, "index", rlide_home)
    assert proc.stdout is not None
    for line in proc.stdout:
        if json.loads(line).get("vectors_done", 0) >= 8:
            break  # keyword phase done, a few vector batches committed, more pending
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    with MemoryService(MemoryConfig(workspace=repo), embedder=embedder) as svc:
        db = sqlite3.connect(svc.config.resolved_index_path())
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        before = svc.index_status()
        assert before.files_indexed == 6 and 0 < before.vectors_indexed < before.chunks_indexed
        assert svc.search_code("dedent", mode="keyword").results[0].path == "textwrap.py"
        after = svc.index_workspace()
        assert after.complete and after.chunks_indexed == before.chunks_indexed
        assert svc.indexer.progress.files_changed == 0  # resumed: no file re-chunked
        assert embedder.computed == before.vectors_pending  # only what was missing got embedded
        assert svc.search_code("remove common leading whitespace").results[0].path == "textwrap.py"


def test_sqlite_vector_copies_follow_other_connections(tmp_path: Path, embedder: CachedEmbedder) -> None:
    """Two connections (as two processes would have): B's numpy copy follows A's writes and deletes."""
    from memory.indexing.chunking import chunk_text
    from memory.indexing.prepare import make_records
    from memory.stores.base import FileState, Filters
    from memory.stores.sqlite import SQLiteStore
    from tests.memory.conftest import FIXTURE_FILES

    a = SQLiteStore(tmp_path / "shared.sqlite", model_id=embedder.model_id, dim=embedder.dim)
    b = SQLiteStore(tmp_path / "shared.sqlite", model_id=embedder.model_id, dim=embedder.dim)
    query = embedder.embed_query("nth fibonacci number")

    def add(path: str, lang: str) -> None:
        records = make_records(path, lang, chunk_text(FIXTURE_FILES[path], lang))
        a.replace_file(FileState(path, 1, 1, path, lang), records)
        pending = a.pending(100)
        a.set_vectors([p.chunk_id for p in pending], embedder.embed([p.embed_text for p in pending]))

    add("app/users.py", "python")
    assert b.vector_search(query, 1, Filters())[0].path == "app/users.py"
    add("cmd/main.go", "go")
    assert b.vector_search(query, 1, Filters())[0].path == "cmd/main.go"
    a.delete_files(["cmd/main.go"])
    assert b.vector_search(query, 1, Filters())[0].path == "app/users.py"
    assert b.stats().vectors == a.stats().vectors
    a.close()
    b.close()
