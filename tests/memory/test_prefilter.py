"""The prefilter's int8 codes and their scan (memory.stores.prefilter): the hand-written ONNX graph is
the one onnx's helpers build, the scan computes what integer arithmetic does, and the rough scores
it gives order vectors as their float scores do, within the code's error."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.checker
import onnx.helper
import pytest

from memory.stores.prefilter import LEVELS, QUERY_LEVELS, QUERY_OFFSET, Codes, Projection, scan_graph

DIM = 48


def test_the_scan_graph_is_what_onnx_builds() -> None:
    parsed = onnx.load_from_string(scan_graph())
    onnx.checker.check_model(parsed)
    built = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("MatMulInteger", ["query", "codes"], ["scores"])],
            "int8_scan",
            [
                onnx.helper.make_tensor_value_info("query", onnx.TensorProto.UINT8, [1, "dims"]),
                onnx.helper.make_tensor_value_info("codes", onnx.TensorProto.INT8, ["dims", "n"]),
            ],
            [onnx.helper.make_tensor_value_info("scores", onnx.TensorProto.INT32, [1, "n"])],
        ),
        opset_imports=[onnx.helper.make_opsetid("", 13)],
        ir_version=8,
    )
    assert scan_graph() == built.SerializeToString()


def test_the_scan_computes_integer_dot_products_minus_the_query_offset() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(-LEVELS, LEVELS + 1, (DIM, 5000), dtype=np.int8)
    values[:, :2] = LEVELS  # the largest products, where an int16 sum would saturate
    codes = Codes.of(values)
    signed = rng.integers(-QUERY_LEVELS, QUERY_LEVELS + 1, DIM)
    signed[:2] = QUERY_LEVELS
    expected = signed @ values.astype(np.int64)
    query = (signed + QUERY_OFFSET).astype(np.uint8)
    assert np.array_equal(codes.scores(query), expected)
    # Taking columns and appending others keeps each column's offset with it.
    kept = np.arange(0, 5000, 3)
    extra = Codes.of(rng.integers(-LEVELS, LEVELS + 1, (DIM, 7), dtype=np.int8))
    both = codes.taken(kept).extended(extra)
    wanted = np.concatenate([expected[kept], signed @ extra.values.astype(np.int64)])
    assert np.array_equal(both.scores(query), wanted)


@pytest.mark.parametrize("spectrum", ["embedding-like", "flat"])
def test_rough_scores_follow_the_float_scores(spectrum: str) -> None:
    rng = np.random.default_rng(1)
    scales = np.arange(1, DIM + 1) ** -1.5 if spectrum == "embedding-like" else np.ones(DIM)
    vectors = (rng.standard_normal((30_000, DIM)) * scales + 0.5).astype(np.float32)
    projection = Projection.fit(np.zeros((DIM, 0), np.float32), vectors)
    assert (projection.basis is None) == (spectrum == "flat")
    codes = projection.encode(np.ascontiguousarray(vectors.T))
    assert codes.values.dtype == np.int8 and codes.values.shape == (projection.dims, 30_000)
    kept = vectors - projection.mean
    if projection.basis is not None:  # what the kept components can see of each vector
        kept = kept @ projection.basis @ projection.basis.T
    for query in rng.standard_normal((5, DIM)).astype(np.float32):
        rough = codes.scores(projection.query(query)).astype(np.float64)
        assert np.corrcoef(rough, kept @ query)[0, 1] > 0.999


def test_a_value_beyond_the_fitted_range_is_clipped_not_wrapped() -> None:
    rng = np.random.default_rng(2)
    projection = Projection.fit(np.zeros((DIM, 0), np.float32), rng.standard_normal((3000, DIM)).astype(np.float32))
    assert projection.basis is None
    far = (projection.mean + 50)[:, None]  # ~50 standard deviations out on every component
    assert projection.encode(far).values[:, 0].tolist() == [LEVELS] * DIM
    assert projection.encode(-far + 2 * projection.mean[:, None]).values[:, 0].tolist() == [-LEVELS] * DIM
    assert projection.query(np.zeros(DIM, np.float32)).tolist() == [QUERY_OFFSET] * DIM  # scores all alike
    assert set(projection.query(np.ones(DIM, np.float32)).tolist()) <= set(range(1, 128))  # below 128: see QUERY_OFFSET
