"""top_k selects by a sampled bound: it must agree with a full sort on every kind of score array."""

from __future__ import annotations

import numpy as np
import pytest

from memory.ranking import top_k


def _by_full_sort(scores: np.ndarray, k: int) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


@pytest.mark.parametrize("n", [0, 1, 9, 640, 641, 5000, 60_000])
@pytest.mark.parametrize("k", [1, 10, 100])
def test_top_k_equals_a_full_sort(n: int, k: int) -> None:
    rng = np.random.default_rng(n * 1000 + k)
    for scores in (
        rng.standard_normal(n).astype(np.float32),
        np.sort(rng.standard_normal(n))[::-1].copy(),  # best scores all at the front: the sample misses most
        rng.integers(0, 3, n).astype(np.float64),  # ties everywhere, the boundary inside a tie
        np.where(rng.random(n) < 0.99, -np.inf, rng.random(n)),  # filtered out: few finite scores
    ):
        assert top_k(scores, k).tolist() == _by_full_sort(scores, k)


def test_top_k_of_nothing_is_empty() -> None:
    assert top_k(np.zeros(5), 0).tolist() == []
