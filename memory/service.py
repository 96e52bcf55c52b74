"""`MemoryService`: one workspace's store + embedder, and the plain functions the lead wraps as MCP
tools and CLI commands (`search_code`, `index_workspace`, `index_status`, `recall_solutions`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from memory.config import MemoryConfig, build_embedder, build_stores
from memory.errors import QueryError, WorkspaceError
from memory.indexing.files import LANGUAGES, canonical_language
from memory.indexing.sync import Indexer, Phase, Progress, ProgressCallback, Watcher
from memory.models import CodeHit, IndexStatus, SearchResponse
from memory.reranking import ChunkKind, path_kind
from memory.search import Mode, search
from memory.solutions import SolutionHit, SolutionMemory, SolvedEpisode
from memory.stores.base import Filters, Store

log = structlog.get_logger(__name__)

MAX_K = 100
FIRST_SEARCH_WAIT_S = 10.0
"""How long a search of a workspace with nothing indexed yet waits for its keyword index."""


class MemoryService:
    """Owns the store and embedder of one workspace. Thread-safe; cheap to query while indexing."""

    def __init__(
        self,
        config: MemoryConfig,
        *,
        embedder: Any = None,
        stores: tuple[Store, Store] | None = None,
        http_client: Any = None,
    ) -> None:
        root = config.workspace.expanduser().resolve()
        if not root.is_dir():
            raise WorkspaceError(f"workspace {root} is not a directory: pass the project root folder")
        self.config = config.model_copy(update={"workspace": root})
        self.root = root
        self.embedder = embedder if embedder is not None else build_embedder(self.config)
        model_id = self.embedder.model_id if self.embedder is not None else "none"
        dim = self.embedder.dim if self.embedder is not None else 384
        self.store, solutions_store = stores or build_stores(self.config, model_id, dim, http_client=http_client)
        self.indexer = Indexer(root, self.store, self.embedder, max_file_bytes=config.max_file_bytes)
        self.solutions = SolutionMemory(solutions_store, self.embedder)
        self._background: threading.Thread | None = None
        self._stop = threading.Event()
        self._lifecycle = threading.Lock()
        self._watcher: Watcher | None = None
        self._last_error: str | None = None

    # -- indexing -------------------------------------------------------------------------------
    def index_workspace(
        self, path: str | Path | None = None, progress_callback: ProgressCallback | None = None
    ) -> IndexStatus:
        """Index (or incrementally re-index) the workspace and embed every chunk; blocks until done.
        Keyword search works on each file as soon as it is chunked, from any thread or process."""
        self._check_workspace(path)
        self._run_sync(progress_callback, background=False)
        return self.index_status()

    def start_indexing(self, progress_callback: ProgressCallback | None = None) -> bool:
        """Index in a background thread; False when one is already running or the service is closing."""
        with self._lifecycle:  # a close() from another thread never meets a thread not yet started
            if self._stop.is_set() or (self._background is not None and self._background.is_alive()):
                return False
            self._background = threading.Thread(
                target=self._run_sync, args=(progress_callback, True), name="rlide-memory-index", daemon=True
            )
            self._background.start()
            if self.config.watch and self._watcher is None:
                self._watcher = Watcher(self.indexer, poll_interval_s=self.config.poll_interval_s)
                self._watcher.start()
            return True

    def wait_for_indexing(self, timeout_s: float | None = None) -> IndexStatus:
        if self._background is not None:
            self._background.join(timeout_s)
        return self.index_status()

    def refresh_paths(self, paths: Sequence[str], *, embed: bool = True) -> int:
        """Re-index a few files now (an editor save); returns chunks written."""
        written = self.indexer.sync_paths([self._relative(p) for p in paths])
        if embed:
            self.indexer.fill_vectors()
        return written

    def _run_sync(self, callback: ProgressCallback | None, background: bool) -> None:
        try:
            self.indexer.sync(callback, embed=True, stop=self._stop)
            self._last_error = None
        except Exception as exc:  # top of an indexing job: keep serving, report in index_status
            self._last_error = f"{type(exc).__name__}: {exc}"
            if not background:
                raise
            return
        if background:  # a server's index: its first searches should not wait for what can be read ahead
            try:
                self.store.warm(self._stop)
            except Exception as exc:  # only speed is lost; searches read what they need themselves
                log.warning("index.warm_failed", root=str(self.root), error=f"{type(exc).__name__}: {exc}")

    @property
    def is_indexing(self) -> bool:
        """A background index job is running, or a sync is chunking or embedding changes."""
        running = self._background is not None and self._background.is_alive()
        return running or self.indexer.progress.phase in (Phase.CHUNKING, Phase.EMBEDDING)

    def index_status(self) -> IndexStatus:
        # The sync's flags are read before the store: the sync sets them only after its writes
        # commit, so stats read second include whatever the flags vouch for (read the other way
        # round, a sync finishing in between paired "complete" with a store read before its writes).
        progress: Progress = self.indexer.progress
        phase = progress.phase
        synced = self.indexer.keyword_complete
        stats = self.store.stats()
        # A process that opens an index built earlier has not synced yet: what is there counts.
        keyword_complete = synced or (phase is Phase.IDLE and stats.files > 0)
        return IndexStatus(
            workspace=str(self.root),
            store=self.config.store,
            phase=phase.value,
            indexing=self.is_indexing,
            files_changed=progress.files_changed,
            files_done=progress.files_done,
            files_indexed=stats.files,
            chunks_indexed=stats.chunks,
            vectors_indexed=stats.vectors,
            vectors_pending=stats.pending if self.embedder is not None else 0,
            keyword_complete=keyword_complete,
            complete=keyword_complete and (self.embedder is None or stats.pending == 0),
            last_error=self._last_error or progress.error,
        )

    def _wait_for_a_first_index(self) -> None:
        """A search of a workspace with nothing indexed yet waits (up to FIRST_SEARCH_WAIT_S) for
        the keyword phase: answering "0 results" from an empty index tells the agent the code is not
        there. An index that has files answers at once, stale or not."""
        deadline = time.monotonic() + FIRST_SEARCH_WAIT_S
        while self.is_indexing and not self.indexer.keyword_complete and self.store.stats().files == 0:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    # -- search ---------------------------------------------------------------------------------
    def search_code(
        self,
        query: str,
        k: int = 10,
        path_glob: str | None = None,
        language: str | None = None,
        mode: str = "hybrid",
        kind: str | None = None,
    ) -> SearchResponse:
        """Search what is indexed now; never waits for indexing (starts it if nothing ever ran).
        `kind`: only code, tests or docs (memory.reranking.path_kind); without it, tests and docs
        rank below the code unless the query asks for them."""
        if not query.strip():
            raise QueryError("query is empty: pass words or identifiers to search for")
        if mode not in {m.value for m in Mode}:
            raise QueryError(f"mode {mode!r} is unknown: use one of hybrid, keyword, dense")
        if kind is not None and kind not in {c.value for c in ChunkKind}:
            raise QueryError(f"kind {kind!r} is unknown: use one of code, test, doc, or leave it out")
        k = max(1, min(k, MAX_K))
        if language:
            known = canonical_language(language)
            if known is None:
                raise QueryError(
                    f"language {language!r} is unknown: use one of {', '.join(sorted(LANGUAGES))}, or leave it out"
                )
            language = known
        if self._background is None and self.indexer.progress.phase is Phase.IDLE:
            # First search in this process: bring the index up to date in the background (it may
            # be new, or stale from before a restart) and answer from what is there now.
            self.start_indexing()
        self._wait_for_a_first_index()
        hits, used = search(
            self.store,
            self.embedder,
            query,
            k,
            Filters(path_glob=path_glob or None, language=language or None),
            mode=Mode(mode),
            kind=ChunkKind(kind) if kind else None,
        )
        status = self.index_status()
        note = None
        if not status.keyword_complete:
            note = (
                f"indexing in progress ({status.files_done} of {status.files_changed} changed files chunked,"
                f" {status.files_indexed} files searchable): results may be missing files; search again"
                " shortly or call index_status"
            )
        elif not status.complete:
            note = (
                f"{status.vectors_pending} chunks still await embeddings: ranking is partly keyword-only "
                "until they are done"
            )
        return SearchResponse(
            query=query,
            mode=used.value,
            index=status,
            note=note,
            results=[
                CodeHit(
                    path=h.path,
                    start_line=h.start_line,
                    end_line=h.end_line,
                    score=h.score,
                    relevance=round(h.relevance or 0.0, 3),
                    text=h.text,
                    symbol=h.symbol,
                    language=h.language,
                    kind=path_kind(h.path).value,
                )
                for h in hits
            ],
        )

    # -- past solutions -------------------------------------------------------------------------
    def remember_solution(self, episode: SolvedEpisode) -> str:
        return self.solutions.record(episode)

    def recall_solutions(self, query: str, k: int = 5, min_reward: float | None = None) -> list[SolutionHit]:
        return self.solutions.recall(query, max(1, min(k, MAX_K)), min_reward=min_reward)

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lifecycle:
            self._stop.set()
        if self._watcher is not None:
            self._watcher.stop()
        if self._background is not None:
            self._background.join(timeout=30)
        self.store.close()
        self.solutions.store.close()

    def __enter__(self) -> MemoryService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_workspace(self, path: str | Path | None) -> None:
        if path is not None and Path(path).expanduser().resolve() != self.root:
            raise WorkspaceError(
                f"this service serves {self.root}, not {path}: create a MemoryService "
                "with MemoryConfig(workspace=...) for that folder"
            )

    def _relative(self, path: str) -> str:
        full = (self.root / path).resolve()
        if not full.is_relative_to(self.root):
            raise WorkspaceError(f"{path} is outside the workspace {self.root}: pass a path inside it")
        return full.relative_to(self.root).as_posix()
