"""The in-memory vector index: exact up to a size, an int8 prefilter above it.

The prefilter must give what the exact scan gives on vectors shaped like real embeddings (most of
the variance in a few directions, which it keeps) and on vectors with no such shape (all of whose
components it codes), and keep its codes in step with edits (the codes themselves:
test_prefilter.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memory.ranking import top_k_candidates
from memory.stores.base import Filters
from memory.stores.sqlite import SQLiteStore
from memory.stores.vector_index import VectorIndex
from tests.memory.conftest import index_text

DIM = 64


def _unit(matrix: np.ndarray) -> np.ndarray:
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


def _embedding_like(n: int, seed: int) -> np.ndarray:
    """Unit vectors in topics, as code embeddings come: 60 topic centres spread over 12 directions
    around a shared mean, each vector its topic's centre plus noise in every direction. The vectors nearest a query are
    those of its topic, and the leading components tell the topics apart; the order within a topic
    comes from the noise, which only the exact re-scoring sees."""
    centres = np.random.default_rng(99).standard_normal((60, 12)) @ np.random.default_rng(98).standard_normal((12, DIM))
    shared = 2 * np.random.default_rng(97).standard_normal(DIM)  # embeddings share a direction: a mean far from 0
    rng = np.random.default_rng(seed)
    return _unit(shared + centres[rng.integers(0, 60, n)] + 0.3 * rng.standard_normal((n, DIM)))


def _index(vectors: np.ndarray, *, exact_up_to: int, first_id: int = 0) -> VectorIndex:
    ids = list(range(first_id, first_id + len(vectors)))
    return VectorIndex(DIM, exact_up_to=exact_up_to).replaced(np.zeros(0, bool), np.asarray(ids, np.int64), vectors)


def _exact(vectors: np.ndarray, ids: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    scores = vectors @ query
    return [int(ids[i]) for i in sorted(range(len(ids)), key=lambda i: (-scores[i], i))[:k]]


def test_prefilter_returns_the_exact_top_k_with_exact_scores() -> None:
    vectors = _embedding_like(3000, seed=1)
    index = _index(vectors, exact_up_to=1000)
    assert index.projection is not None and index.codes is not None
    assert index.projection.basis is not None and index.projection.dims <= DIM // 2
    assert index.rows is not None and index.columns is None  # gathered by row when prefiltering
    queries = _embedding_like(100, seed=2)
    same = 0
    for query in queries:
        hits = index.search(query, 10)
        same += [i for i, _ in hits] == _exact(vectors, index.ids, query, 10)
        for rowid, score in hits:
            assert score == pytest.approx(float(vectors[rowid] @ query), abs=1e-5)
    assert same >= 98


def test_exact_below_the_threshold_and_every_component_coded_without_a_dominant_subspace() -> None:
    small = _index(_embedding_like(900, seed=3), exact_up_to=1000)
    assert small.projection is None and small.columns is not None
    isotropic = _unit(np.random.default_rng(4).standard_normal((3000, DIM)))
    index = _index(isotropic, exact_up_to=1000)
    assert index.projection is not None and index.codes is not None
    assert index.projection.basis is None and index.codes.values.shape == (DIM, 3000)  # no subspace to keep
    for query in _unit(np.random.default_rng(5).standard_normal((50, DIM))):
        assert [i for i, _ in index.search(query, 10)] == _exact(isotropic, index.ids, query, 10)


def test_edits_keep_the_codes_in_step() -> None:
    vectors = _embedding_like(3000, seed=5)
    index = _index(vectors, exact_up_to=1000)
    projection = index.projection
    assert projection is not None
    keep = np.ones(3000, bool)
    keep[::3] = False  # a third deleted
    added = _embedding_like(500, seed=6)
    edited = index.replaced(keep, np.arange(5000, 5500), added)
    assert edited.projection is projection  # not refitted: the index has not doubled
    assert edited.codes is not None
    again = projection.encode(edited.vectors())
    assert np.array_equal(edited.codes.values, again.values) and np.array_equal(edited.codes.offsets, again.offsets)
    assert len(edited.ids) == 2500 and list(edited.ids[-500:]) == list(range(5000, 5500))
    all_vectors = np.concatenate([vectors[keep], added])
    for query in _embedding_like(20, seed=7):
        assert [i for i, _ in edited.search(query, 10)] == _exact(all_vectors, edited.ids, query, 10)


def test_shrinking_below_the_threshold_goes_back_to_exact_and_doubling_refits() -> None:
    index = _index(_embedding_like(1500, seed=8), exact_up_to=1000)
    assert index.projection is not None
    keep = np.zeros(1500, bool)
    keep[:600] = True
    shrunk = index.replaced(keep, np.zeros(0, np.int64), np.zeros((0, DIM), np.float32))
    assert shrunk.projection is None and shrunk.columns is not None and shrunk.rows is None
    grown = _embedding_like(3000, seed=9)
    regrown = index.replaced(np.ones(1500, bool), np.arange(9000, 12000), grown)
    assert regrown.projection is not index.projection and regrown.fitted_on_rows == 4500


def test_prefiltered_search_respects_the_rows_it_may_return() -> None:
    vectors = _embedding_like(4000, seed=10)
    index = _index(vectors, exact_up_to=1000)
    among = np.arange(0, 4000, 2)  # even rows only, still large enough to prefilter
    query = vectors[11]  # an odd row: the best match overall is not allowed
    hits = [i for i, _ in index.search(query, 10, among)]
    assert all(i % 2 == 0 for i in hits)
    assert hits == _exact(vectors[among], index.ids[among], query, 10)
    small = np.arange(5)  # too few to prefilter: scored directly
    assert sorted(i for i, _ in index.search(query, 3, small)) == sorted(_exact(vectors[:5], index.ids[:5], query, 3))


@pytest.mark.parametrize("k", [1, 10, 300])
def test_top_k_candidates_hold_every_top_score(k: int) -> None:
    rng = np.random.default_rng(k)
    scores = rng.integers(0, 50, 20_000).astype(np.float32)  # many ties at the k-th score
    found = set(top_k_candidates(scores, k).tolist())
    kth = np.sort(scores)[::-1][k - 1]
    assert set(np.flatnonzero(scores >= kth).tolist()) <= found


def test_sqlite_store_prefilters_vectors_it_reads_back(tmp_path: Path) -> None:
    """Through the store: vectors written by one connection and loaded by another's refresh."""
    path = tmp_path / "index.sqlite"
    writer = SQLiteStore(path, model_id="m", dim=DIM)
    source = "\n\n".join(f"def function_{i}(value):\n    return value + {i}\n" for i in range(1200))
    index_text(writer, "many.py", source)
    pending = writer.pending(10_000)
    vectors = _embedding_like(len(pending), seed=11)
    writer.set_vectors([p.chunk_id for p in pending], vectors)
    reader = SQLiteStore(path, model_id="m", dim=DIM, exact_up_to=500)
    exact = SQLiteStore(path, model_id="m", dim=DIM, exact_up_to=10**9)
    assert reader.dense_index().projection is not None and exact.dense_index().projection is None
    for query in _embedding_like(10, seed=12):
        prefiltered = reader.vector_search(query, 10, Filters())
        assert [h.chunk_id for h in prefiltered] == [h.chunk_id for h in exact.vector_search(query, 10, Filters())]
    for store in (writer, reader, exact):
        store.close()
