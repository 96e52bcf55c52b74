"""Dense search's first pass over many vectors: a rough score for every vector from an int8 code.

A `Projection` centres the vectors, keeps their leading principal components when a few hold
`PREFILTER_VARIANCE` of the variance (all components otherwise), and codes each component in int8
with its own step. `Codes.scores` rates every coded vector against a query in one call of
onnxruntime's `MatMulInteger` (uint8 query x int8 codes) on one thread, so the keyword side of a
hybrid query keeps the other core.

Why int8: the first pass reads every vector and is bound by memory bandwidth. At 929k vectors on
129 components the float32 matrix is 480 MB and numpy's scan took 15 ms on two threads; its int8
code is 120 MB and takes 5 ms on one. The code's error is about 1% of a score's spread (a step is
1/127 of a component's largest value in the fit sample, the query's 1/63 of its largest), far
below what the dropped components already cost, and only the order of the first pass depends on
it: its best candidates are scored again from the float32 vectors (memory.stores.vector_index).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
Int8Matrix = npt.NDArray[np.int8]

PREFILTER_VARIANCE = 0.84
"""Principal components kept: the fewest holding this share of the variance. On the standard
library's 58k real MiniLM vectors that is 129 of 384, and the top 10 equalled the exact scan's for
519 of 519 queries (518 at 80%, 508 at 70%: docs/search.md)."""
FIT_SAMPLE = 20_000  # vectors the components are computed from: 0.1 s, and as good as all of them
ENCODE_BLOCK = 32_768  # vectors coded at a time: no float copy of a million of them
LEVELS = 127  # the vectors' int8 codes run from -127 to 127
QUERY_LEVELS = 63
QUERY_OFFSET = 64
"""The query goes as uint8 (uint8 x int8 is the kernel's fast path), its code plus 64: 1 to 127.
CPUs without VNNI multiply with `vpmaddubsw`, which sums two products in int16 and saturates past
32,767; with the query below 128 two products stay within 2 x 127 x 127 = 32,258, so the scan is
exact on every CPU."""


@dataclass(frozen=True)
class Codes:
    """Vectors coded for the first pass: one per column (`values`, dims x n, C order, as
    `MatMulInteger` reads its right operand), and what the query's offset adds to each score."""

    values: Int8Matrix
    offsets: npt.NDArray[np.int32]  # QUERY_OFFSET * each column's sum

    @classmethod
    def of(cls, values: Int8Matrix) -> Codes:
        return cls(values, QUERY_OFFSET * values.sum(axis=0, dtype=np.int32))

    def taken(self, kept: npt.NDArray[np.intp]) -> Codes:
        return Codes(np.ascontiguousarray(self.values[:, kept]), self.offsets[kept])

    def extended(self, other: Codes) -> Codes:
        return Codes(np.concatenate([self.values, other.values], axis=1), np.concatenate([self.offsets, other.offsets]))

    def scores(self, query: npt.NDArray[np.uint8]) -> npt.NDArray[np.int32]:
        """Each vector's score against a query coded by `Projection.query` (larger: closer)."""
        raw: npt.NDArray[np.int32] = _session().run(None, {"query": query[None, :], "codes": self.values})[0][0]
        return np.subtract(raw, self.offsets, out=raw)


@dataclass(frozen=True)
class Projection:
    """How vectors are coded: centred on `mean`, projected onto `basis` (None: every component
    kept), then each component divided by its `step` and rounded to int8."""

    mean: Matrix  # (dim,)
    basis: Matrix | None  # (dim, dims), orthonormal columns, largest variance first
    step: Matrix  # (dims,)

    @property
    def dims(self) -> int:
        return len(self.step)

    @classmethod
    def fit(cls, old: Matrix, new: Matrix) -> Projection:
        """Fitted on a sample of the vectors `old` (one per column) then `new` (one per row)."""
        dim, n = old.shape[0], old.shape[1] + len(new)
        rng = np.random.default_rng(0)  # the same index gives the same components, so the same results
        chosen = np.sort(rng.choice(n, FIT_SAMPLE, replace=False)) if n > FIT_SAMPLE else np.arange(n)
        split = int(np.searchsorted(chosen, old.shape[1]))
        sample = np.concatenate([old[:, chosen[:split]], new[chosen[split:] - old.shape[1]].T], axis=1)
        mean = sample.mean(axis=1, dtype=np.float64)
        centred = sample - mean[:, None]
        variances, vectors = np.linalg.eigh(centred @ centred.T)
        order = np.argsort(variances)[::-1]
        held = np.cumsum(variances[order]) / variances.sum()
        dims = int(np.searchsorted(held, PREFILTER_VARIANCE)) + 1
        # Variance spread evenly (more than half the components needed): projecting would save
        # little reading and lose much of each score, so every component is coded.
        basis = None if dims > dim // 2 else np.ascontiguousarray(vectors[:, order[:dims]], np.float32)
        reduced = centred if basis is None else basis.T @ centred
        step = np.maximum(np.abs(reduced).max(axis=1), 1e-12) / LEVELS
        return cls(mean.astype(np.float32), basis, step.astype(np.float32))

    def encode(self, columns: Matrix) -> Codes:
        """`columns` (dim x n, a vector per column) coded. A value beyond the fit sample's largest
        is clipped: a rarer vector's rough score suffers, not the exact one it is re-scored with."""
        out = np.empty((self.dims, columns.shape[1]), np.int8)
        shift = self.mean if self.basis is None else self.basis.T @ self.mean
        for start in range(0, columns.shape[1], ENCODE_BLOCK):
            block = columns[:, start : start + ENCODE_BLOCK]
            reduced = block if self.basis is None else self.basis.T @ block
            coded = np.rint((reduced - shift[:, None]) / self.step[:, None])
            out[:, start : start + block.shape[1]] = np.clip(coded, -LEVELS, LEVELS)
        return Codes.of(out)

    def query(self, vector: Matrix) -> npt.NDArray[np.uint8]:
        """The query coded for `Codes.scores`. q.c = q.(c - mean) + q.mean, and the second term is
        the same for every c: the order comes from q's components times c's centred ones, and those
        are step x code, so the query carries the steps."""
        weights = (vector if self.basis is None else vector @ self.basis) * self.step
        largest = float(np.abs(weights).max())
        coded = np.rint(weights * (QUERY_LEVELS / largest)) if largest > 0 else np.zeros(self.dims)
        return (coded + QUERY_OFFSET).astype(np.uint8)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _number(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _message(field: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _tensor_info(name: str, elem_type: int, shape: list[int | str]) -> bytes:
    """An ONNX ValueInfoProto: a tensor's name, element type and dimensions (numbers or names)."""
    dims = b"".join(_message(1, _number(1, d) if isinstance(d, int) else _message(2, d)) for d in shape)
    return _message(1, name) + _message(2, _message(1, _number(1, elem_type) + _message(2, dims)))


UINT8, INT8, INT32 = 2, 3, 6  # onnx.TensorProto.DataType


def scan_graph() -> bytes:
    """The ONNX model scores = MatMulInteger(query, codes), written as protobuf here so that the
    server never imports `onnx` (0.12 s and 35 MB; tests check it against onnx's own helpers)."""
    node = _message(1, "query") + _message(1, "codes") + _message(2, "scores") + _message(4, "MatMulInteger")
    graph = (
        _message(1, node)
        + _message(2, "int8_scan")
        + _message(11, _tensor_info("query", UINT8, [1, "dims"]))
        + _message(11, _tensor_info("codes", INT8, ["dims", "n"]))
        + _message(12, _tensor_info("scores", INT32, [1, "n"]))
    )
    return (
        _number(1, 8) + _message(7, graph) + _message(8, _message(1, "") + _number(2, 13))
    )  # IR 8, default domain opset 13


@functools.cache
def _session() -> Any:
    import onnxruntime as ort  # type: ignore[import-untyped]

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(scan_graph(), options, providers=["CPUExecutionProvider"])
