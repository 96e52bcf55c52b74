"""Incremental indexing: a manifest diff decides which files are re-chunked; chunks become
keyword-searchable at once and vectors fill in afterwards (in the background when served)."""

from __future__ import annotations

import enum
import itertools
import multiprocessing
import threading
import time
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from memory.cpus import usable_cpus
from memory.embedding.embedders import CachedEmbedder
from memory.indexing.files import SourceFile, walk_workspace
from memory.indexing.prepare import PreparedFile, keep_stdout_clean, prepare_file
from memory.stores.base import ChunkRecord, FileState, Store

log = structlog.get_logger(__name__)

PARALLEL_MIN_FILES = 200
PARALLEL_WORKERS_MAX = 4
"""Past this, workers would wait on the one writer: preparing the stdlib takes ~17 CPU-s, writing
it ~5. On 2 CPUs a third worker was slower (12.4-14.4 s to keyword-ready against 11.8-12.3 s)."""
WRITE_BATCH_CHUNKS = 2000  # chunks per write transaction during bulk indexing


class Phase(enum.Enum):
    IDLE = "idle"
    SCANNING = "scanning"
    CHUNKING = "chunking"
    EMBEDDING = "embedding"
    READY = "ready"
    FAILED = "failed"


@dataclass
class Progress:
    phase: Phase = Phase.IDLE
    files_seen: int = 0
    files_changed: int = 0
    files_done: int = 0
    files_deleted: int = 0
    chunks_written: int = 0
    vectors_done: int = 0
    vectors_pending: int = 0
    started_at: float = 0.0
    keyword_ready_s: float | None = None  # seconds from start until every file was chunked
    finished_s: float | None = None
    error: str | None = None
    skipped: list[str] = field(default_factory=list)


ProgressCallback = Callable[[Progress], None]


def worker_count() -> int:
    """Worker processes for a bulk sync: one per CPU this process may run on, up to PARALLEL_WORKERS_MAX."""
    return min(PARALLEL_WORKERS_MAX, usable_cpus())


def _prepare_all(root: Path, sources: list[SourceFile]) -> Generator[PreparedFile, None, None]:
    """Prepared files in order; in worker processes when there are many (parsing and tokenizing
    dominate keyword indexing time, and SQLite writes overlap with them in this process)."""
    workers = worker_count()
    if len(sources) < PARALLEL_MIN_FILES or workers < 2:
        yield from (prepare_file(str(root), s) for s in sources)
        return
    # spawn, not fork: the serving process has threads (embedder, watcher) and ORT state.
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=keep_stdout_clean)
    try:
        yield from pool.map(prepare_file, itertools.repeat(str(root)), sources, chunksize=16)
    finally:  # also on early close (stop requested): drop the files not started yet
        pool.shutdown(wait=True, cancel_futures=True)


class Indexer:
    """Keeps one workspace's store in step with its files."""

    def __init__(
        self,
        root: Path,
        store: Store,
        embedder: CachedEmbedder | None,
        *,
        max_file_bytes: int = 1_000_000,
        embed_batch: int = 128,
    ) -> None:
        self.root = root
        self.store = store
        self.embedder = embedder
        self.max_file_bytes = max_file_bytes
        self.embed_batch = embed_batch
        self.progress = Progress()
        # True once a sync has chunked every file it saw, until a later scan finds changes: a
        # watcher's quiet polls must not make search results look incomplete while they scan.
        self.keyword_complete = False
        self._sync_lock = threading.Lock()  # one sync at a time per process

    # -- keyword phase ----------------------------------------------------------------------------
    def sync(
        self, callback: ProgressCallback | None = None, *, embed: bool = True, stop: threading.Event | None = None
    ) -> Progress:
        """Bring the store up to date with the files; embed pending chunks when `embed`."""
        with self._sync_lock:
            progress = self.progress = Progress(phase=Phase.SCANNING, started_at=time.monotonic())
            notify = callback or (lambda p: None)
            try:
                manifest = self.store.manifest()
                seen: set[str] = set()
                changed: list[SourceFile] = []
                for source in walk_workspace(self.root, max_file_bytes=self.max_file_bytes):
                    seen.add(source.path)
                    old = manifest.get(source.path)
                    if old is None or old.size != source.size or old.mtime_ns != source.mtime_ns:
                        changed.append(source)
                progress.files_seen = len(seen)
                progress.files_changed = len(changed)
                deleted = [p for p in manifest if p not in seen]
                if deleted:
                    self.store.delete_files(deleted)
                progress.files_deleted = len(deleted)
                if changed or deleted:
                    self.keyword_complete = False
                progress.phase = Phase.CHUNKING
                notify(progress)
                prepared = _prepare_all(self.root, changed)
                try:
                    self._write_prepared(prepared, progress, notify, stop)
                finally:
                    prepared.close()
                if stop is not None and stop.is_set():
                    return progress
                progress.keyword_ready_s = time.monotonic() - progress.started_at
                self.keyword_complete = True
                progress.vectors_pending = self.store.stats().pending
                notify(progress)
                if embed and self.embedder is not None:
                    self.fill_vectors(notify, stop)
                progress.phase = Phase.READY
                progress.finished_s = time.monotonic() - progress.started_at
                notify(progress)
                return progress
            except Exception as exc:  # top of a background job: record, log, re-raise
                progress.phase = Phase.FAILED
                progress.error = f"{type(exc).__name__}: {exc}"
                log.exception("index.failed", root=str(self.root))
                raise

    def _write_prepared(
        self,
        prepared: Iterable[PreparedFile],
        progress: Progress,
        notify: ProgressCallback,
        stop: threading.Event | None,
    ) -> None:
        batch: list[tuple[FileState, list[ChunkRecord]]] = []
        size = 0
        vanished: list[str] = []
        for item in prepared:
            if stop is not None and stop.is_set():
                break
            if item.state is None:
                vanished.append(item.source.path)
                continue
            if item.skipped:
                progress.skipped.append(item.source.path)
            batch.append((item.state, item.records))
            size += len(item.records) + 1
            progress.files_done += 1
            if size >= WRITE_BATCH_CHUNKS:
                progress.chunks_written += self.store.replace_files(batch)
                batch, size = [], 0
                notify(progress)
        if batch:
            progress.chunks_written += self.store.replace_files(batch)
        if vanished:
            self.store.delete_files(vanished)

    def index_file(self, source: SourceFile) -> int:
        """Re-chunk one file; returns the number of chunks written. A touched but unchanged file
        yields the same chunk ids, so only its manifest row moves and nothing is re-embedded."""
        item = prepare_file(str(self.root), source)
        if item.state is None:
            self.store.delete_files([source.path])
            return 0
        if item.skipped:
            self.progress.skipped.append(source.path)
        return self.store.replace_file(item.state, item.records)

    def sync_paths(self, paths: Iterable[str]) -> int:
        """Re-index just these workspace-relative paths (an editor save, a watcher event); the
        caller vouches that they are indexable. Returns the number of chunks written."""
        written = 0
        manifest = self.store.manifest()
        for path in paths:
            full = self.root / path
            if not full.is_file():
                if path in manifest:
                    self.store.delete_files([path])
                continue
            st = full.stat()
            written += self.index_file(SourceFile(path, st.st_size, st.st_mtime_ns))
        return written

    # -- vector phase ---------------------------------------------------------------------------
    def fill_vectors(self, notify: ProgressCallback | None = None, stop: threading.Event | None = None) -> int:
        """Embed every pending chunk, a batch at a time; safe to interrupt and resume."""
        if self.embedder is None:
            return 0
        done = 0
        progress = self.progress
        previous = progress.phase
        progress.phase = Phase.EMBEDDING
        try:
            while stop is None or not stop.is_set():
                batch = self.store.pending(self.embed_batch)
                if not batch:
                    break
                vectors = self.embedder.embed([p.embed_text for p in batch])
                self.store.set_vectors([p.chunk_id for p in batch], vectors)
                done += len(batch)
                progress.vectors_done += len(batch)
                progress.vectors_pending = self.store.stats().pending
                if notify is not None:
                    notify(progress)
        finally:
            if progress.phase is Phase.EMBEDDING:  # sync moves on to READY itself; refresh_paths does not
                progress.phase = previous
        return done


class Watcher:
    """Keeps a served workspace fresh by polling (a scan only stats files whose manifest row exists)."""

    def __init__(
        self, indexer: Indexer, *, poll_interval_s: float = 2.0, on_change: Callable[[], None] | None = None
    ) -> None:
        self.indexer = indexer
        self.poll_interval_s = poll_interval_s
        self.on_change = on_change
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rlide-memory-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        # Polling a full scan is cheap (stat only for unchanged files) and, unlike inotify, also
        # sees changes made by other machines on network filesystems.
        while not self._stop.wait(self.poll_interval_s):
            try:
                progress = self.indexer.sync(embed=True, stop=self._stop)
            except Exception:  # keep watching; the failure is logged by sync
                continue
            if (progress.files_changed or progress.files_deleted) and self.on_change is not None:
                self.on_change()


__all__ = ["Indexer", "Phase", "Progress", "ProgressCallback", "Watcher"]
