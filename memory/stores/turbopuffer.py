"""turbopuffer store: one namespace per workspace, pre-tokenized BM25 columns (same tokens as the
SQLite store), cosine vectors, and server-side fusion with `multi_query` + RRF.

turbopuffer requires a vector on every document of a namespace with a vector index, yet chunks must
be keyword-searchable before they are embedded. So a pending chunk carries a placeholder unit
vector and `has_vec = false`, which every vector query filters out; `set_vectors` re-upserts the
row with its real vector. File manifest rows live in the same namespace (`doc_type = "file"`), so
one write request (atomic in turbopuffer) replaces a file's chunks and its manifest row together.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import structlog

from memory.errors import MemoryConfigError, StoreError
from memory.ranking import RRF_K, expand_braces, glob_regex, rooted_glob
from memory.stores.base import ChunkRecord, FileState, Filters, FloatArray, Hit, PendingChunk, StoreStats

try:
    import turbopuffer as tpuf
except ImportError as exc:  # optional extra
    raise ImportError("turbopuffer") from exc

log = structlog.get_logger(__name__)

PAGE = 1000
STATS_TTL_S = 2.0
NAME_WEIGHT = 2.0  # same column weighting as the SQLite store's bm25(names, body)
_HIT_ATTRS = ["path", "start_line", "end_line", "language", "symbol", "text", "meta"]
_FTS = {"type": "[]string", "full_text_search": {"tokenizer": "pre_tokenized_array"}}
_PATH = {"type": "string", "filterable": True, "glob": True}  # path_glob filters use Glob


def make_client(
    *, api_key: str | None, region: str | None, base_url: str | None, http_client: Any = None
) -> tpuf.Turbopuffer:
    """A client; `http_client` (an `httpx2.Client` with any transport) is how tests plug a fake in."""
    try:
        return tpuf.Turbopuffer(
            api_key=api_key,
            region=region if base_url is None else None,
            base_url=base_url,
            http_client=http_client,
            max_retries=2,
        )
    except tpuf.TurbopufferError as exc:
        raise MemoryConfigError(
            f"turbopuffer client: {exc}; set turbopuffer_api_key (or TURBOPUFFER_API_KEY) "
            "and turbopuffer_region, or use store='sqlite'"
        ) from exc


def _file_id(path: str) -> str:
    return "file-" + hashlib.sha1(path.encode()).hexdigest()[:32]


class TurbopufferStore:
    def __init__(self, client: tpuf.Turbopuffer, namespace: str, *, model_id: str, dim: int) -> None:
        self.client = client
        self.namespace = namespace
        self.ns = client.namespace(namespace)
        self.model_id = model_id
        self.dim = dim
        self._placeholder = [1.0] + [0.0] * (dim - 1)
        self._stats: tuple[float, StoreStats] | None = None

    # -- plumbing -------------------------------------------------------------------------------
    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except tpuf.NotFoundError:
            return None  # the namespace does not exist until the first write: it is empty
        except tpuf.APIError as exc:
            raise StoreError(
                f"turbopuffer {what} on namespace {self.namespace!r} failed: {exc}; check the "
                "API key, region and network, or use store='sqlite'"
            ) from exc

    def _query(self, **kwargs: Any) -> list[Any]:
        response = self._call("query", self.ns.query, **kwargs)
        return list(response.rows or []) if response is not None else []

    def _write(self, **kwargs: Any) -> None:
        self._stats = None
        self._call(
            "write",
            self.ns.write,
            distance_metric="cosine_distance",
            schema={"names": _FTS, "body": _FTS, "path": _PATH},
            **kwargs,
        )

    def _filter(self, filters: Filters, *extra: Any) -> Any:
        clauses: list[Any] = [("doc_type", "Eq", "chunk"), *extra]
        if filters.language:
            clauses.append(("language", "Eq", filters.language))
        if filters.path_glob:
            # Same semantics as the SQLite store: a slash-less pattern matches the name anywhere,
            # and braces are expanded here into an Or of brace-free globs (classes and `**` are
            # plain Unix glob, which turbopuffer's Glob takes).
            glob_regex(filters.path_glob)  # validates early, like the SQLite store
            globs = [("path", "Glob", p) for p in expand_braces(rooted_glob(filters.path_glob))]
            clauses.append(globs[0] if len(globs) == 1 else ("Or", globs))
        return ("And", clauses)

    @staticmethod
    def _hit(row: Any, score: float) -> Hit:
        get = row.model_extra or {}
        return Hit(
            chunk_id=str(row.id),
            path=str(get.get("path", "")),
            start_line=int(get.get("start_line", 0)),
            end_line=int(get.get("end_line", 0)),
            language=str(get.get("language", "")),
            symbol=str(get.get("symbol", "")),
            text=str(get.get("text", "")),
            score=score,
            meta=str(get.get("meta", "")),
        )

    # -- manifest and writes -------------------------------------------------------------------
    def _paged(self, filters: Any, attrs: list[str]) -> list[Any]:
        rows: list[Any] = []
        last: str | None = None
        while True:
            page_filter = filters if last is None else ("And", [filters, ("id", "Gt", last)])
            page = self._query(filters=page_filter, rank_by=("id", "asc"), top_k=PAGE, include_attributes=attrs)
            rows.extend(page)
            if len(page) < PAGE:
                return rows
            last = str(page[-1].id)

    def manifest(self) -> dict[str, FileState]:
        rows = self._paged(("doc_type", "Eq", "file"), ["path", "size", "mtime_ns", "sha256", "language"])
        out: dict[str, FileState] = {}
        for row in rows:
            a = row.model_extra or {}
            out[a["path"]] = FileState(a["path"], int(a["size"]), int(a["mtime_ns"]), a["sha256"], a["language"])
        return out

    def replace_file(self, state: FileState, chunks: Sequence[ChunkRecord]) -> int:
        old = {
            str(r.id) for r in self._paged(("And", [("doc_type", "Eq", "chunk"), ("path", "Eq", state.path)]), ["path"])
        }
        wanted = {c.chunk_id for c in chunks}
        rows = [self._chunk_row(c) for c in chunks if c.chunk_id not in old]
        rows.append(
            {
                "id": _file_id(state.path),
                "vector": self._placeholder,
                "has_vec": False,
                "doc_type": "file",
                "path": state.path,
                "size": state.size,
                "mtime_ns": state.mtime_ns,
                "sha256": state.sha256,
                "language": state.language,
                "names": [],
                "body": [],
            }
        )
        deletes = sorted(old - wanted)
        self._write(upsert_rows=rows, **({"deletes": deletes} if deletes else {}))
        return len(rows) - 1

    def replace_files(self, batch: Sequence[tuple[FileState, Sequence[ChunkRecord]]]) -> int:
        # One write request per file keeps each file's replacement atomic on the server.
        return sum(self.replace_file(state, chunks) for state, chunks in batch)

    def _chunk_row(self, c: ChunkRecord, vector: list[float] | None = None) -> dict[str, Any]:
        return {
            "id": c.chunk_id,
            "vector": vector or self._placeholder,
            "has_vec": vector is not None,
            "doc_type": "chunk",
            "path": c.path,
            "start_line": c.start_line,
            "end_line": c.end_line,
            "language": c.language,
            "kind": c.kind,
            "symbol": c.symbol,
            "text": c.text,
            "embed_text": c.embed_text,
            "embed_hash": c.embed_hash,
            "meta": c.meta,
            "names": c.name_tokens.split(),
            "body": c.tokens.split(),
        }

    def delete_files(self, paths: Sequence[str]) -> None:
        if paths:
            self._write(delete_by_filter=("path", "In", list(paths)))

    def pending(self, limit: int) -> list[PendingChunk]:
        rows = self._query(
            filters=("And", [("doc_type", "Eq", "chunk"), ("has_vec", "Eq", False)]),
            rank_by=("id", "asc"),
            top_k=limit,
            include_attributes=["embed_text", "embed_hash"],
        )
        return [
            PendingChunk(str(r.id), (r.model_extra or {})["embed_text"], (r.model_extra or {})["embed_hash"])
            for r in rows
        ]

    def set_vectors(self, chunk_ids: Sequence[str], vectors: FloatArray) -> None:
        if not chunk_ids:
            return
        by_id = dict(zip(chunk_ids, np.asarray(vectors, np.float32), strict=True))
        # Re-upsert whole rows: ids deleted meanwhile (file edited again) are simply not found.
        rows = self._query(
            filters=("id", "In", list(chunk_ids)), rank_by=("id", "asc"), top_k=len(chunk_ids), include_attributes=True
        )
        upserts = []
        for row in rows:
            attrs = {k: v for k, v in (row.model_extra or {}).items() if not k.startswith("$")}
            attrs.update(id=str(row.id), vector=by_id[str(row.id)].tolist(), has_vec=True)
            upserts.append(attrs)
        if upserts:
            self._write(upsert_rows=upserts)

    # -- search --------------------------------------------------------------------------------
    @staticmethod
    def _bm25(tokens: Sequence[str]) -> Any:
        return ("Sum", [("Product", NAME_WEIGHT, ("names", "BM25", list(tokens))), ("body", "BM25", list(tokens))])

    def keyword_search(self, tokens: Sequence[str], k: int, filters: Filters) -> list[Hit]:
        if not tokens:
            return []
        rows = self._query(
            rank_by=self._bm25(tokens), filters=self._filter(filters), top_k=k, include_attributes=_HIT_ATTRS
        )
        return [self._hit(r, float((r.model_extra or {}).get("$dist", 0.0))) for r in rows]

    def vector_search(self, vector: FloatArray, k: int, filters: Filters) -> list[Hit]:
        rows = self._query(
            rank_by=("vector", "ANN", np.asarray(vector, np.float32).tolist()),
            filters=self._filter(filters, ("has_vec", "Eq", True)),
            top_k=k,
            include_attributes=_HIT_ATTRS,
        )
        return [self._hit(r, 1.0 - float((r.model_extra or {}).get("$dist", 1.0))) for r in rows]

    def hybrid_search(
        self,
        tokens: Sequence[str],
        vector: FloatArray,
        k: int,
        filters: Filters,
        depth: int,
        weights: Sequence[float] | None = None,
    ) -> list[Hit]:
        queries = [
            {
                "rank_by": self._bm25(tokens),
                "filters": self._filter(filters),
                "top_k": depth,
                "include_attributes": _HIT_ATTRS,
            },
            {
                "rank_by": ("vector", "ANN", np.asarray(vector, np.float32).tolist()),
                "filters": self._filter(filters, ("has_vec", "Eq", True)),
                "top_k": depth,
                "include_attributes": _HIT_ATTRS,
            },
        ]
        rrf: dict[str, Any] = {"rank_constant": RRF_K}
        if weights is not None:
            rrf["weights"] = list(weights)
        response = self._call("multi_query", self.ns.multi_query, queries=queries, rerank_by=("RRF", rrf), limit=k)
        if response is None or not response.results:
            return []
        rows = response.results[0].rows or []
        # Which score key a fused row carries is not documented in the client; fall back to the
        # fused order, which is what callers rely on.
        return [
            self._hit(r, float((r.model_extra or {}).get("$dist", 1.0 / (RRF_K + rank))))
            for rank, r in enumerate(rows, start=1)
        ]

    def stats(self) -> StoreStats:
        # search_code reports index status on every call; three count queries per search would
        # double its latency, so counts are reused for STATS_TTL_S unless this process wrote.
        now = time.monotonic()
        if self._stats is not None and now - self._stats[0] < STATS_TTL_S:
            return self._stats[1]

        def count(filters: Any) -> int:
            response = self._call("query", self.ns.query, filters=filters, aggregate_by={"n": ("Count",)})
            return int((response.aggregations or {}).get("n", 0)) if response is not None else 0

        files = count(("doc_type", "Eq", "file"))
        chunks = count(("doc_type", "Eq", "chunk"))
        vectors = count(("And", [("doc_type", "Eq", "chunk"), ("has_vec", "Eq", True)]))
        stats = StoreStats(files=files, chunks=chunks, vectors=vectors)
        self._stats = (now, stats)
        return stats

    def delete_all(self) -> None:
        self._call("delete_all", self.ns.delete_all)

    def warm(self, stop: threading.Event | None = None) -> None:
        """Nothing to read ahead: the namespace's caches are turbopuffer's."""

    def close(self) -> None:
        self.client.close()
