"""How likely a hit is to answer the query: a probability from what the hit shows, not where it ranked.

The fused score is a reciprocal-rank sum (0.015-0.033 for any query): it orders hits but says
nothing about whether any of them is right. This model reads, for each hit that ranking kept, its
cosine to the query (dense list), its BM25 score relative to the best one's (keyword list), the
share of the query's tokens it contains, and what the ranking rules found in it (a raise site of a
pasted message, a test or doc nobody asked for); a logistic function of
those is the probability that the hit is (part of) the answer, and, with the rules' order, chooses the
final order of their top hits. The coefficients were fitted on the
natural-question set (`python benchmarks/search_quality.py --natural --fit-relevance`, which also
reports how well they hold on each project left out of the fit).

A store that fuses remotely (turbopuffer) returns no per-list scores: its hits are judged on token
coverage and the rules alone (`cosine` and `keyword` count as absent), which underestimates them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from memory.indexing.tokens import code_tokens
from memory.reranking import RuleMatch
from memory.stores.base import Hit

FEATURES = ("bias", "cosine", "keyword", "coverage", "raise_site", "unasked_kind")
COEFFICIENTS = (-5.359, 1.253, 2.785, 1.801, 2.812, -1.208)
"""`fitted_on_all` of `benchmarks/search_quality.py --natural --fit-relevance` (one per FEATURES entry)."""
JUDGED = 10
"""The rules' top hits (at least this many, or k) that the final order is chosen from."""
RELEVANCE_SHARE = 0.5
"""What the final order weighs relevance by, against the rules' order (each scaled to 0-1). On the
natural questions, with the coefficients fitted without the question's project, MRR@10 went from
0.643 (the rules alone) to 0.666 ordering by relevance alone and 0.671 at one half."""


@dataclass(frozen=True)
class ListScores:
    """The raw scores of the lists that were fused, by chunk id, with the lowest cosine and the best
    BM25 score among them."""

    cosine: dict[str, float]
    keyword: dict[str, float]
    lowest_cosine: float
    best_keyword: float

    @classmethod
    def of(cls, keyword: Sequence[Hit] = (), dense: Sequence[Hit] = ()) -> ListScores:
        cosine = {h.chunk_id: h.score for h in dense}
        bm25 = {h.chunk_id: h.score for h in keyword}
        return cls(cosine, bm25, min(cosine.values(), default=0.0), max(bm25.values(), default=0.0))


def features(hit: Hit, rules: RuleMatch, query_tokens: Sequence[str], lists: ListScores) -> tuple[float, ...]:
    """The model's inputs for one hit, in FEATURES order."""
    # Not in the dense top list: its cosine is at most the lowest one there.
    cosine = lists.cosine.get(hit.chunk_id, lists.lowest_cosine)
    best = lists.best_keyword
    keyword = lists.keyword.get(hit.chunk_id, 0.0) / best if best > 0 else 0.0
    wanted = set(query_tokens)
    found = wanted & set(code_tokens(f"{hit.path} {hit.symbol} {hit.text}")) if wanted else set()
    coverage = len(found) / len(wanted) if wanted else 0.0
    return (1.0, cosine, keyword, coverage, float(rules.tier == 2), float(rules.unasked_kind))


def probability(values: Sequence[float], coefficients: Sequence[float] = COEFFICIENTS) -> float:
    z = sum(c * v for c, v in zip(coefficients, values, strict=True))
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


def final_order(relevance: Sequence[float]) -> list[int]:
    """Positions of the rules' top hits (their relevance, in the rules' order) in the final order:
    by relevance and rules' rank together (RELEVANCE_SHARE), ties kept in the rules' order."""
    n = len(relevance)

    def key(position: int) -> tuple[float, int]:
        blended = RELEVANCE_SHARE * relevance[position]
        return (-(blended + (1 - RELEVANCE_SHARE) * (1 - position / n)), position)

    return sorted(range(n), key=key)
