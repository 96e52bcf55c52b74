"""The one interface every chunk store implements, and the records that cross it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:  # numpy is 0.13 s of the start of each indexer worker, which needs only the records
    import numpy as np
    import numpy.typing as npt

FloatArray: TypeAlias = "npt.NDArray[np.float32]"  # vectors: (dim,) or (n, dim), rows L2-normalised


@dataclass(frozen=True)
class FileState:
    """One manifest row: what the file looked like when it was last chunked."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    language: str


@dataclass(frozen=True)
class ChunkRecord:
    chunk_id: str
    path: str
    start_line: int
    end_line: int
    language: str
    kind: str
    symbol: str
    text: str
    name_tokens: str  # code tokens of the path and symbol: ranked above body matches
    tokens: str  # space-separated code tokens of the text (memory.indexing.tokens), indexed for BM25
    embed_text: str  # what the embedder sees: symbol and signature context, then the code (no path,
    # so a renamed file reuses its cached vectors)
    embed_hash: str  # sha256 of embed_text, the embedding cache key
    meta: str = ""  # free JSON for non-code documents (past solutions)


@dataclass(frozen=True)
class PendingChunk:
    chunk_id: str
    embed_text: str
    embed_hash: str


@dataclass(frozen=True)
class Filters:
    path_glob: str | None = None
    language: str | None = None


@dataclass(frozen=True)
class Hit:
    chunk_id: str
    path: str
    start_line: int
    end_line: int
    language: str
    symbol: str
    text: str
    score: float
    meta: str = ""
    relevance: float | None = None
    """The probability that this hit answers the query (memory.relevance), once ranked."""
    features: tuple[float, ...] = ()
    """What `relevance` was computed from (memory.relevance.FEATURES)."""


@dataclass(frozen=True)
class StoreStats:
    files: int
    chunks: int
    vectors: int

    @property
    def pending(self) -> int:
        return self.chunks - self.vectors


class Store(Protocol):
    """A workspace's chunks, their BM25 tokens and vectors, and the file manifest.

    Implementations must be safe for several processes writing one workspace: each method is
    its own short transaction, and `replace_file` is atomic per file.
    """

    model_id: str

    def manifest(self) -> dict[str, FileState]: ...

    def replace_file(self, state: FileState, chunks: Sequence[ChunkRecord]) -> int:
        """Make `chunks` the file's chunks; keep rows (and vectors) whose id is unchanged.
        Returns how many chunks were newly written."""
        ...

    def replace_files(self, batch: Sequence[tuple[FileState, Sequence[ChunkRecord]]]) -> int:
        """`replace_file` for several files in one transaction (bulk indexing)."""
        ...

    def delete_files(self, paths: Sequence[str]) -> None: ...

    def pending(self, limit: int) -> list[PendingChunk]:
        """Chunks that have no vector yet, oldest first."""
        ...

    def set_vectors(self, chunk_ids: Sequence[str], vectors: FloatArray) -> None:
        """Attach vectors; ids that vanished meanwhile (file edited again) are ignored."""
        ...

    def keyword_search(self, tokens: Sequence[str], k: int, filters: Filters) -> list[Hit]: ...

    def vector_search(self, vector: FloatArray, k: int, filters: Filters) -> list[Hit]: ...

    def hybrid_search(
        self,
        tokens: Sequence[str],
        vector: FloatArray,
        k: int,
        filters: Filters,
        depth: int,
        weights: Sequence[float] | None = None,
    ) -> list[Hit]:
        """Both lists cut to `depth`, fused by reciprocal rank (memory.ranking)."""
        ...

    def stats(self) -> StoreStats: ...

    def warm(self, stop: threading.Event | None = None) -> None:
        """Read ahead what the first searches would otherwise wait for; may take seconds (call it
        from a background thread) and returns early once `stop` is set."""
        ...

    def close(self) -> None: ...
