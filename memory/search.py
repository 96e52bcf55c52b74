"""Hybrid ranking: BM25 over code tokens and exact dense search, fused by reciprocal rank."""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Protocol

from memory.indexing.tokens import query_tokens
from memory.ranking import rrf
from memory.relevance import JUDGED, ListScores, features, final_order, probability
from memory.reranking import ChunkKind, read_query, rerank
from memory.stores.base import Filters, FloatArray, Hit, Store

# Each list is cut to its top DEPTH (at least k) before fusion. On benchmarks/search_quality.py
# (500 stdlib docstring queries) fusing the top 10 of each list gave R@10 0.79 against 0.76 at 30
# and 0.75 at 100: deeper lists let weak matches that appear in both lists outvote a list's own
# top hit. Unequal weights (0.5-1.0 either way) were worse on both query sets; see docs/search.md.
DEPTH = 10
WEIGHTS = (1.0, 1.0)  # (keyword, dense)
ERROR_WEIGHTS = (1.0, 0.2)
RERANK_DEPTH = 40
"""Fused candidates the ranking rules (memory.reranking) choose from."""


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
    kind: ChunkKind | None = None,
    final: bool = True,
) -> tuple[list[Hit], Mode]:
    """Top `k` hits and the mode actually used (keyword when no vectors exist yet): the lists are
    fused to RERANK_DEPTH candidates, which the query's rules (memory.reranking) then order; their
    top hits take their final order from the rules and their relevance (memory.relevance), which
    each carries. `final=False`: the rules' top max(k, JUDGED) in their order, with their features
    (benchmarks/search_quality.py refits the relevance on those)."""
    tokens = query_tokens(query)
    wide = max(k * 3, RERANK_DEPTH)
    intent = read_query(query)
    if intent.is_error:
        weights = ERROR_WEIGHTS  # the words of a message are matched exactly, not paraphrased
    keyword: list[Hit] = []
    dense: list[Hit] = []
    if mode is Mode.KEYWORD or embedder is None:
        used, hits = Mode.KEYWORD, (keyword := store.keyword_search(tokens, wide, filters))
    elif mode is Mode.DENSE or not tokens:
        used, hits = Mode.DENSE, (dense := store.vector_search(embedder.embed_query(query), wide, filters))
    elif getattr(store, "fuses_locally", False):
        # A local store fuses in-process: BM25 (SQLite, GIL released) runs on another thread
        # while this one embeds the query (ONNX, GIL released) and scores the vectors.
        pending = _query_pool().submit(store.keyword_search, tokens, wide, filters)
        dense = store.vector_search(embedder.embed_query(query), max(depth, k), filters)
        keyword = pending.result()
        # Dense votes with its top `depth` (deeper, weak matches outvote a list's own top hit); the
        # keyword list goes deeper, so an exact match ranked low can still meet the rules.
        used, hits = Mode.HYBRID, rrf([keyword, dense], wide, weights=weights)
    else:
        vector = embedder.embed_query(query)
        used, hits = Mode.HYBRID, store.hybrid_search(tokens, vector, wide, filters, max(depth, k), weights)
    lists = ListScores.of(keyword, dense)
    judged = [
        replace(hit, features=features(hit, rules, tokens, lists))
        for hit, rules in rerank(intent, hits, max(k, JUDGED), kind=kind)
    ]
    if not final:
        return judged, used
    relevance = [probability(hit.features) for hit in judged]
    return [replace(judged[i], relevance=relevance[i]) for i in final_order(relevance)[:k]], used


@functools.cache
def _query_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="rlide-bm25")
