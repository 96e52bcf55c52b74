"""The code indexes on this machine, read without loading a model or a store: what the dashboard's
index view shows (files, chunks, vectors embedded and pending, size, last change) for every
workspace indexed under a data directory, including while another process is indexing it."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class IndexSummary:
    name: str
    """The workspace's folder name and a hash of its path, as the index file is named."""
    path: str
    files: int
    chunks: int
    vectors: int
    pending: int
    """Chunks still waiting for their embedding."""
    bytes: int
    modified: float
    error: str | None = None


def indexed_workspaces(data_dir: Path) -> list[IndexSummary]:
    """Every embedded index under `data_dir/index`, newest change first; one that cannot be read
    says why instead of hiding the others."""
    out = []
    for path in sorted((data_dir / "index").glob("*.sqlite")):
        stat = path.stat()
        # Its WAL files (`-wal`, `-shm`) and its vector files (memory.stores.vector_file) count too.
        beside = [*path.parent.glob(path.name + "-*"), *path.parent.glob(path.name + ".vectors-*")]
        size = stat.st_size + sum(p.stat().st_size for p in beside if p.is_file())
        try:
            files, chunks, pending = _counts(path)
            error = None
        except sqlite3.Error as exc:
            files = chunks = pending = 0
            error = f"cannot read {path.name}: {exc}"
        out.append(
            IndexSummary(path.stem, str(path), files, chunks, chunks - pending, pending, size, stat.st_mtime, error)
        )
    return sorted(out, key=lambda s: -s.modified)


def _counts(path: Path) -> tuple[int, int, int]:
    """(files, chunks, pending) from the `counts` table every write keeps (one small read: three
    `count(*)` scanned a 1M-chunk index on every poll of the dashboard), or counted in a store no
    rlide has opened since that table came (migration m006; this read-only look migrates nothing)."""
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=2.0)
    try:
        try:
            counts = dict(db.execute("SELECT name, n FROM counts").fetchall())
            return int(counts["files"]), int(counts["chunks"]), int(counts["chunks"] - counts["vectors"])
        except sqlite3.OperationalError:
            files = db.execute("SELECT count(*) FROM files").fetchone()[0]
            chunks = db.execute("SELECT count(*) FROM chunks").fetchone()[0]
            pending = db.execute("SELECT count(*) FROM chunks WHERE has_vec = 0").fetchone()[0]
            return int(files), int(chunks), int(pending)
    finally:
        db.close()
