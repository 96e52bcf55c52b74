"""The prepared int8-matmul MiniLM graph (memory/embedding/onnx_model.py), against the shipped one."""

from __future__ import annotations

import importlib.metadata
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from memory.embedding.embedders import OnnxMiniLM
from memory.embedding.onnx_model import (
    NUM_HEADS,
    drop_nan_guards,
    fuse_attention,
    prepared_model_path,
    prepared_model_target,
    shipped_model_path,
)
from memory.errors import EmbedderError

CODE = [
    "def read_config(path):\n    with open(path) as fh:\n        return json.load(fh)",
    "class LRUCache:\n    def __init__(self, size):\n        self.items = OrderedDict()",
    "func fib(n int) int { if n < 2 { return n }; return fib(n-1) + fib(n-2) }",
    "export function startServer(port: number) { return http.createServer(app).listen(port) }",
    "fn parse_header(line: &str) -> Option<(String, String)> { line.split_once(':') }",
]


def _guarded_softmax() -> onnx.ModelProto:
    """softmax -> Where(IsNaN(p), 0, p) -> Identity, plus a Where of another shape that must stay."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["p"], axis=-1),
        helper.make_node("IsNaN", ["p"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "p"], ["guarded"]),
        helper.make_node("Identity", ["guarded"], ["y"]),
        helper.make_node("Greater", ["x", "zero"], ["positive"]),
        helper.make_node("Where", ["positive", "x", "zero"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "guarded",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]),
        ],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_drop_nan_guards_rewires_only_the_guard() -> None:
    model = _guarded_softmax()
    x = np.array([[1.0, 2.0, -3.0], [0.5, -0.5, 0.0]], np.float32)
    before = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert drop_nan_guards(model.graph) == 1
    assert [n.op_type for n in model.graph.node] == ["Softmax", "Identity", "Greater", "Where"]
    onnx.checker.check_model(model)
    after = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])
    assert drop_nan_guards(model.graph) == 0


def _float_graph(tmp_path: Path) -> onnx.ModelProto:
    """The shipped graph with its int8 weights folded into float32 constants (preparation's step 1)."""
    folded = tmp_path / "folded.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(folded)
    ort.InferenceSession(str(shipped_model_path()), options, providers=["CPUExecutionProvider"])
    return onnx.load(str(folded))


def _hidden_states(model: onnx.ModelProto, ids: list[int]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    row = np.asarray([ids], np.int64)
    feed = {"input_ids": row, "attention_mask": np.ones_like(row), "token_type_ids": np.zeros_like(row)}
    return np.asarray(session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})[0])


def test_fused_attention_computes_what_the_exported_attention_did(tmp_path: Path) -> None:
    """Step 3 on the float graph, before quantization, so only the fusion is compared: the same
    hidden states for unpadded texts of several lengths, from one Attention node per layer."""
    exported = _float_graph(tmp_path)
    fused = onnx.ModelProto()
    fused.CopyFrom(exported)
    assert fuse_attention(fused, NUM_HEADS) == 6
    ops = [node.op_type for node in fused.graph.node]
    assert ops.count("Attention") == 6 and "Softmax" not in ops and "Transpose" not in ops
    assert "attention_mask" not in {i.name for i in fused.graph.input}  # nothing reads it any more
    tokenizer = OnnxMiniLM()._tokenizer
    for text in ["x", "where is the reward computed?", *CODE]:
        ids = tokenizer.encode(text).ids
        np.testing.assert_allclose(_hidden_states(fused, ids), _hidden_states(exported, ids), atol=2e-5)


def test_fuse_attention_leaves_a_graph_without_the_pattern_alone() -> None:
    model = _guarded_softmax()
    before = model.SerializeToString()
    assert fuse_attention(model, NUM_HEADS) == 0
    assert model.SerializeToString() == before


def test_prepared_graph_matches_the_shipped_one() -> None:
    prepared = OnnxMiniLM()
    shipped = OnnxMiniLM(variant="shipped")
    assert prepared.model_id != shipped.model_id  # different vectors, different cache and store key
    a, b = prepared.embed(CODE), shipped.embed(CODE)
    cosine = (a * b).sum(axis=1)
    assert cosine.min() > 0.98, cosine
    # The same nearest neighbour for each query under both graphs.
    queries = ["load json settings from a file", "least recently used cache", "fibonacci number"]
    for query, want in zip(queries, [0, 1, 2], strict=True):
        assert int(np.argmax(a @ prepared.embed_query(query))) == want
        assert int(np.argmax(b @ shipped.embed_query(query))) == want


def test_preparing_from_scratch_is_atomic_under_concurrency(tmp_path: Path) -> None:
    cache = tmp_path / "models"
    cache.mkdir()
    # An earlier recipe's graph of the same packages is superseded; another onnxruntime's is not.
    superseded = prepared_model_target(cache, "q8dyn-v0")
    superseded.write_bytes(b"old graph")
    runtime = importlib.metadata.version("onnxruntime")
    other_runtime = cache / superseded.name.replace(f"-ort{runtime}.onnx", "-ort0.0.1.onnx")
    other_runtime.write_bytes(b"another environment's graph")
    results: list[Path | BaseException] = []

    def prepare() -> None:
        try:
            results.append(prepared_model_path(cache))
        except BaseException as exc:  # surfaced by the assertion below
            results.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and results[0] == results[1], results
    path = results[0]
    assert isinstance(path, Path) and path.parent == cache
    # No half files, and the superseded graph is gone.
    assert sorted(p.name for p in cache.iterdir()) == sorted([".prepare.lock", path.name, other_runtime.name])
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert "IsNaN" not in ops and "MatMulInteger" in ops and "QAttention" in ops


def test_unwritable_model_cache_is_an_actionable_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(EmbedderError, match="RLIDE_MODEL_CACHE"):
        prepared_model_path(blocker / "models")
