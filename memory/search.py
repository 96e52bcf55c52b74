"""Hybrid ranking: BM25 over code tokens and exact dense search, fused by reciprocal rank."""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from memory.indexing.tokens import query_tokens
from memory.ranking import rrf
from memory.stores.base import Filters, FloatArray, Hit, Store

# Each list is cut to its top DEPTH (at least k) before fusion. On benchmarks/search_quality.py
# (500 stdlib docstring queries) fusing the top 10 of each list gave R@10 0.79 against 0.76 at 30
# and 0.75 at 100: deeper lists let weak matches that appear in both lists outvote a list's own
# top hit. Unequal weights (0.5-1.0 either way) were worse on both query sets; see docs/search.md.
DEPTH = 10
WEIGHTS = (1.0, 1.0)  # (keyword, dense)


class Mode(enum.StrEnum):
    HYBRID = "hybrid"
    KEYWORD = "keyword"
    DENSE = "dense"


class QueryEmbedder(Protocol):
    def embed_query(self, text: str) -> FloatArray: ...


def search(
    store: Store,
    embedder: QueryEmbedder | None,
    query: str,
    k: int,
    filters: Filters,
    *,
    mode: Mode = Mode.HYBRID,
    depth: int = DEPTH,
    weights: Sequence[float] = WEIGHTS,
) -> tuple[list[Hit], Mode]:
    """Top `k` hits and the mode actually used (keyword when no vectors exist yet)."""
    tokens = query_tokens(query)
    if mode is Mode.KEYWORD or embedder is None:
        return store.keyword_search(tokens, k, filters), Mode.KEYWORD
    if mode is Mode.DENSE or not tokens:
        return store.vector_search(embedder.embed_query(query), k, filters), Mode.DENSE
    depth = max(depth, k)
    if getattr(store, "fuses_locally", False):
        # A local store fuses in-process: BM25 (SQLite, GIL released) runs on another thread
        # while this one embeds the query (ONNX, GIL released) and scores the vectors.
        pending = _query_pool().submit(store.keyword_search, tokens, depth, filters)
        dense = store.vector_search(embedder.embed_query(query), depth, filters)
        return rrf([pending.result(), dense], k, weights=weights), Mode.HYBRID
    return store.hybrid_search(tokens, embedder.embed_query(query), k, filters, depth, weights), Mode.HYBRID


@functools.cache
def _query_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="rlide-bm25")
