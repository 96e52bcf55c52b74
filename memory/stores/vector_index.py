"""The SQLite store's in-memory vectors: one matrix per process, scored with numpy after an int8 first pass.

Up to `EXACT_UP_TO` vectors every query scores every vector. Above it a query first gives every
vector a rough score from its int8 code (on its leading principal components where a few hold most
of the variance: memory.stores.prefilter), then re-scores the best `PREFILTER_FACTOR * depth`
exactly and returns the best of those, with exact scores.

Measured on the Python standard library (57,803 real MiniLM vectors; see docs/search.md): 129 of
384 components hold 84% of the variance, and the prefilter returned the same top 10, in the same
order, as the exact scan for every query. The exact scan reads 89 MB per query and is bound by
memory bandwidth; the prefilter's codes are 7.5 MB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memory.ranking import top_k, top_k_candidates
from memory.stores.prefilter import Codes, Projection

Matrix = npt.NDArray[np.float32]

EXACT_UP_TO = 20_000
"""Above this many vectors dense search prefilters. At 20k the exact scan takes about 1.2 ms, and a
prefilter would save under a millisecond."""
PREFILTER_FACTOR = 10
"""Candidates re-scored exactly per result wanted, at least (`top_k_candidates` takes all above a
sampled bound: about 900 at 58k vectors). Factors 5 to 40 all gave the exact lists above."""
TRANSPOSE_BLOCK = 8192
REFIT_GROWTH = 2.0  # refit once the index has doubled since the last fit


def _columns(old: Matrix, new: Matrix) -> Matrix:
    """`old` (one vector per column) then `new` (one per row, possibly a memory map), as one C-order
    matrix with a vector per column. `new` is transposed a block at a time: all at once, the
    transposing copy of 232k vectors took 1-2 s, in blocks 0.2-0.9 s."""
    out = np.empty((old.shape[0], old.shape[1] + len(new)), np.float32)
    out[:, : old.shape[1]] = old
    for start in range(0, len(new), TRANSPOSE_BLOCK):
        part = new[start : start + TRANSPOSE_BLOCK]
        out[:, old.shape[1] + start : old.shape[1] + start + len(part)] = part.T
    return out


class VectorIndex:
    """This process's copy of the vectors: rowids and matrix (filters come as the rows allowed).

    Scanned exactly, the matrix is stored one vector per column (`columns`, dim x n, C order):
    `query @ columns` scored 58k x 384 in 3.5 ms where `rows @ query` took 5.9 ms (OpenBLAS's two
    sgemv kernels). With a prefilter only the int8 codes are scanned, and the full vectors are
    read just for the candidates: stored one per row (`rows`, n x dim), those 400 vectors are
    contiguous (0.05 ms where gathering 400 columns took 0.8 ms). One of the two is set.

    A snapshot is never changed: `replaced` builds the next one, so a search running in another
    thread keeps a consistent view."""

    def __init__(self, dim: int, *, exact_up_to: int = EXACT_UP_TO) -> None:
        self.ids = np.zeros(0, np.int64)
        self.columns: Matrix | None = np.zeros((dim, 0), np.float32)
        self.rows: Matrix | None = None
        self.version: tuple[int, int] = (-1, -1)
        self.seq = -1  # last vector_log entry applied; -1: never loaded
        self.source: Path | None = None  # the vector file it was read from (memory.stores.vector_file)
        self.dim = dim
        self.exact_up_to = exact_up_to
        self.projection: Projection | None = None
        self.codes: Codes | None = None  # projection.encode(all vectors), when prefiltering
        self.fitted_on_rows = 0  # size at the projection's fit

    def vectors(self, kept: npt.NDArray[np.intp] | None = None) -> Matrix:
        """The vectors (all, or those at `kept`) one per column, as a view where possible."""
        if self.rows is not None:
            return self.rows.T if kept is None else self.rows[kept].T
        assert self.columns is not None
        return self.columns if kept is None else self.columns[:, kept]

    def replaced(self, keep: npt.NDArray[np.bool_], ids: npt.NDArray[np.int64], new: Matrix) -> VectorIndex:
        """The next snapshot: the rows where `keep` is true, then `new` (one vector per row) with `ids`."""
        out = VectorIndex(self.dim, exact_up_to=self.exact_up_to)
        kept = np.flatnonzero(keep)
        unchanged = len(kept) == len(self.ids)  # the common case after an edit elsewhere: appends only
        out.ids = np.concatenate([self.ids[kept], np.asarray(ids, np.int64)])
        old = self.vectors(None if unchanged else kept)
        if len(out.ids) > self.exact_up_to:
            if self.projection is not None and len(out.ids) < REFIT_GROWTH * self.fitted_on_rows:
                assert self.codes is not None
                out.fitted_on_rows, out.projection = self.fitted_on_rows, self.projection
                codes = self.codes if unchanged else self.codes.taken(kept)
                out.codes = codes.extended(self.projection.encode(new.T))
            else:
                out.fitted_on_rows = len(out.ids)
                out.projection = Projection.fit(old, new)
        if out.projection is None:
            out.columns = _columns(old, new)
            return out
        out.columns = None
        # A first load keeps the vector file's mapping (its slots never change): the prefilter reads
        # only the candidates' rows, and copying them all cost 0.75 s of the first query at 232k.
        out.rows = new if not old.shape[1] else np.concatenate([old.T, new])
        if out.codes is None:
            out.codes = out.projection.encode(out.rows.T)
        return out

    def search(
        self, vector: npt.NDArray[Any], depth: int, among: npt.NDArray[np.intp] | None = None
    ) -> list[tuple[int, float]]:
        """The best `depth` (rowid, cosine) among the vectors at `among` (default: all), best first."""
        query = np.asarray(vector, np.float32)
        wanted = PREFILTER_FACTOR * depth
        size = len(self.ids) if among is None else len(among)
        if self.projection is None or self.codes is None or wanted * 8 > size:
            if self.rows is not None and among is not None:  # a small subset: gather it
                scores = self.rows[among] @ query
            else:
                scores = query @ self.vectors()
                scores = scores if among is None else scores[among]
            best = top_k(scores, depth)
            chosen = best if among is None else among[best]
            return [(int(self.ids[i]), float(scores[j])) for i, j in zip(chosen, best, strict=True)]
        assert self.rows is not None
        rough = self.codes.scores(self.projection.query(query))
        candidates = top_k_candidates(rough, wanted) if among is None else among[top_k_candidates(rough[among], wanted)]
        exact = self.rows[candidates] @ query
        best = top_k(exact, depth)
        return [(int(self.ids[candidates[j]]), float(exact[j])) for j in best]
