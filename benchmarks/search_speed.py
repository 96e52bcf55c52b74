"""Speed of the memory package on the Python standard library (about 2,300 files, 58k chunks).

    python benchmarks/search_speed.py                  # whole stdlib
    python benchmarks/search_speed.py --quick          # json/email/http/asyncio/xml only, fewer queries
    python benchmarks/search_speed.py --real-vectors   # every chunk really embedded (see below)
    python benchmarks/search_speed.py --keyword-only   # keyword_ready_s alone
    python benchmarks/search_speed.py --scaling 1,4,16 # the store at 62.5k, 250k and 1M chunks (below)

Measures, and prints as one JSON object on stdout:
  keyword_ready_s     time from nothing to every file keyword-searchable (scan, parse, tokenize, write)
  embed_chunks_per_s  embedding throughput of the int8 MiniLM on a fixed-seed sample of real chunks
  query_ms            warm search_code latency (p50/p99) including the query embedding, at full size,
                      after the keyword read-ahead a server does once its index is built (its time)
  dense               how dense search ran (exact scan, or the int8 prefilter) and how often its
                      top 10 equalled the exact scan's
  edit_ms             one edited file re-chunked, re-embedded and returned by search again
  *_cpu_*             CPU seconds / ms behind the same numbers (the machine is shared: wall time
                      depends on the load average, which the JSON reports too)

The latency test needs a vector for every chunk. By default chunks not in the throughput sample
get random unit vectors: embedding 58k chunks takes 8 minutes here. Random vectors have no leading
principal components, so the prefilter codes all 384 of them (memory.stores.prefilter), which is
what an index without such structure would cost. `--real-vectors` embeds every chunk instead,
through the persistent embedding cache in rlide's data directory (8 minutes the first time, then
seconds), so the prefilter on the principal components that real vectors allow is what gets timed.
Either way it is compared with the exact scan. The query vectors are always real.

`--scaling COPIES` builds one store per entry of COPIES from that many copies of the standard
library (hard links, each copy under its own folder: real text, 58k chunks a copy of Python 3.11's)
and prints, per size: build time (keyword phase, then vectors), disk, the first keyword/dense/hybrid
query after reopening the store, the keyword read-ahead's time (a server's, once its index is
built), then warm p50/p99 per mode and with a language or path filter, how
dense search ran, and the query process's RSS. Its vectors, queries' included, are synthetic (unit
vectors seeded by the text, so no embedding time is counted anywhere); the JSON says so. By
default they are random, so the prefilter codes every component (the worst case);
`--scaling-vectors embedding-like` gives them the variance spectrum of real embeddings, so the
principal-component prefilter runs as it does on real vectors (see `SyntheticEmbedder`). Each size
builds in one child process and is queried in another, so RSS is the query side's alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The indexer's spawned worker processes re-import this script as `__mp_main__`, as they do any
# program's main module but a package's `__main__` (which is what `rlide` is: mcp_server.cli.app.main).
# They need none of what follows, which cost each of them 0.6 s of CPU inside the timed index.
if __name__ != "__mp_main__":
    import numpy as np
    import structlog

    from memory.config import MemoryConfig, default_data_dir
    from memory.embedding.embedders import CachedEmbedder, OnnxMiniLM
    from memory.search import Mode, search
    from memory.service import MemoryService
    from memory.stores.base import Filters, FloatArray
    from memory.stores.sqlite import SQLiteStore

QUICK_DIRS = ["json", "email", "http", "asyncio", "xml"]
QUERIES = [
    "parse an email address header",
    "open a socket connection with timeout",
    "decode json from a string",
    "compute the difference between two sequences",
    "read a zip archive member",
    "format a date as iso",
    "escape html special characters",
    "run a coroutine until complete",
    "copy file metadata",
    "split a path into directory and name",
    "compress data with zlib",
    "generate a random uuid",
    "walk a directory tree",
    "parse command line options",
    "encode bytes as base64",
    "lock a file",
    "send an http request and read the response",
    "serialize an object with pickle",
    "wait for a subprocess",
    "match a filename against a shell pattern",
    "tokenize python source",
    "create a temporary file",
    "convert a string to title case",
    "calculate a sha256 digest",
    "parse xml into an element tree",
]


def _cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its waited-for children (the index workers):
    on a machine shared with other jobs it says what the work costs, whatever the wall clock says."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def _throughput(embed: Callable[[list[str]], FloatArray], texts: list[str]) -> tuple[dict[str, Any], FloatArray]:
    started, cpu_started = time.monotonic(), time.process_time()
    vectors = embed(texts)
    seconds, cpu_seconds = time.monotonic() - started, time.process_time() - cpu_started
    figures = {
        "chunks": len(texts),
        "seconds": round(seconds, 2),
        "chunks_per_s": round(len(texts) / seconds, 1),
        "cpu_seconds": round(cpu_seconds, 2),
    }
    return figures, vectors


def _dense_figures(svc: MemoryService, model: OnnxMiniLM, queries: list[str], index_path: Path) -> dict[str, Any]:
    """How dense search ran and how often the prefilter's top 10 was the exact scan's (ids and
    order) for the benchmark's queries, and the two's latency side by side (dense search alone,
    query embedding excluded, the two interleaved)."""
    assert isinstance(svc.store, SQLiteStore)
    svc.store.vector_search(model.embed_query("warm up"), 10, Filters())
    index = svc.store.dense_index()
    figures: dict[str, Any] = {
        "vectors": len(index.ids),
        "mode": "exact" if index.projection is None else "prefilter",
        "prefilter_dims": None if index.projection is None else index.projection.dims,
    }
    if index.projection is not None:
        exact = SQLiteStore(index_path, model_id=svc.store.model_id, dim=svc.store.dim, exact_up_to=10**9)
        exact.vector_search(model.embed_query("warm up"), 10, Filters())
        same = 0
        times: dict[str, list[float]] = {"prefilter": [], "exact": []}
        for q in queries:
            vector = model.embed_query(q)
            t0 = time.perf_counter()
            fast = [h.chunk_id for h in svc.store.vector_search(vector, 10, Filters())]
            t1 = time.perf_counter()
            slow = [h.chunk_id for h in exact.vector_search(vector, 10, Filters())]
            times["prefilter"].append((t1 - t0) * 1000)
            times["exact"].append((time.perf_counter() - t1) * 1000)
            same += fast == slow
        exact.close()
        figures["prefilter_top10_equal_to_exact"] = round(same / len(queries), 4)
        figures["dense_only_p50_ms"] = {name: round(_percentile(t, 50), 2) for name, t in times.items()}
    return figures


def _keyword_ready_figures(files: int, chunks: int, seconds: float | None, cpu_seconds: float) -> dict[str, Any]:
    return {
        "benchmark": "search_speed",
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "files": files,
        "chunks": chunks,
        "keyword_ready_s": round(seconds or 0.0, 2),
        "keyword_ready_cpu_s": round(cpu_seconds, 2),
    }


SPECTRUM_DECAY = 0.51
"""`embedding-like` vectors: the i-th of 384 random orthogonal directions has standard deviation
i ** -0.51, so the leading 129 hold 84% of the variance, as measured on MiniLM's vectors of the
standard library (docs/search.md); around a shared mean, as real embeddings are."""


class SyntheticEmbedder:
    """Unit vectors, the same for the same text: the scaling mode times the store, not the model."""

    dim = 384

    def __init__(self, spectrum: str = "random") -> None:
        self.model_id = f"synthetic-{spectrum}-384"
        self.scales = np.ones(self.dim, np.float32)
        self.rotation = np.eye(self.dim, dtype=np.float32)
        self.mean = np.zeros(self.dim, np.float32)
        if spectrum == "embedding-like":
            rng = np.random.default_rng(0)
            self.scales = np.arange(1, self.dim + 1, dtype=np.float32) ** -SPECTRUM_DECAY
            self.rotation = np.linalg.qr(rng.standard_normal((self.dim, self.dim)))[0].astype(np.float32)
            self.mean = rng.standard_normal(self.dim).astype(np.float32) * self.scales.mean()

    def embed(self, texts: list[str]) -> FloatArray:
        out = np.stack([self.embed_query(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)
        return out.astype(np.float32)

    def embed_query(self, text: str) -> FloatArray:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        noise = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
        vector = self.rotation @ (noise * self.scales) + self.mean
        return vector / np.linalg.norm(vector)


def _rss_mb() -> dict[str, float]:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {key: round(int(status[key].split()[0]) / 1024, 1) for key in ("VmRSS", "VmHWM")}


def _scaling_config(root: Path) -> MemoryConfig:
    return MemoryConfig(workspace=root / "workspace", data_dir=root / "data", embedding_cache_path=None)


def _scaling_build(root: Path, spectrum: str) -> dict[str, Any]:
    embedder = CachedEmbedder(SyntheticEmbedder(spectrum), None)
    with MemoryService(_scaling_config(root), embedder=embedder) as svc:
        started = time.monotonic()
        svc.indexer.sync(embed=False)
        keyword_s = time.monotonic() - started
        started = time.monotonic()
        svc.indexer.fill_vectors()
        vectors_s = time.monotonic() - started
        stats = svc.store.stats()
    return {
        "files": stats.files,
        "chunks": stats.chunks,
        "vectors": stats.vectors,
        "build_keyword_s": round(keyword_s, 1),
        "build_vectors_s": round(vectors_s, 1),
    }


def _scaling_queries(root: Path, spectrum: str, n_queries: int) -> dict[str, Any]:
    embedder = SyntheticEmbedder(spectrum)
    store = SQLiteStore(_scaling_config(root).resolved_index_path(), model_id=embedder.model_id, dim=embedder.dim)
    queries = [f"{q} {i}" if i >= len(QUERIES) else q for i, q in enumerate(QUERIES * (n_queries // len(QUERIES) + 1))]
    runs: dict[str, tuple[Mode, Filters]] = {
        "keyword": (Mode.KEYWORD, Filters()),
        "dense": (Mode.DENSE, Filters()),
        "hybrid": (Mode.HYBRID, Filters()),
        "hybrid_language": (Mode.HYBRID, Filters(language="python")),
        "hybrid_path_glob": (Mode.HYBRID, Filters(path_glob="c0/json/**")),
    }
    first: dict[str, float] = {}
    for name in runs:  # right after opening: what a restarted server's first search of each kind costs
        mode, filters = runs[name]
        t0 = time.perf_counter()
        search(store, embedder, f"first {name} query after opening", 10, filters, mode=mode)
        first[name] = round((time.perf_counter() - t0) * 1000, 1)
    t0 = time.perf_counter()
    store.warm()  # as a server does once its background index is done (MemoryService._run_sync)
    figures: dict[str, Any] = {"first_query_ms": first, "read_ahead_s": round(time.perf_counter() - t0, 2)}
    for name, (mode, filters) in runs.items():
        times = []
        for q in queries[:n_queries]:
            t0 = time.perf_counter()
            search(store, embedder, q, 10, filters, mode=mode)
            times.append((time.perf_counter() - t0) * 1000)
        figures[f"{name}_ms"] = {"p50": round(_percentile(times, 50), 2), "p99": round(_percentile(times, 99), 2)}
    index = store.dense_index()
    figures["dense_mode"] = "exact" if index.projection is None else f"int8 prefilter on {index.projection.dims} dims"
    store.close()
    return {**figures, "rss_mb": _rss_mb()}


def _disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem
        shutil.copy2(src, dst)


def scaling(copies: list[int], spectrum: str, n_queries: int) -> dict[str, Any]:
    """One store per entry of `copies` (see the module docstring), each built and queried by a child process."""
    lib = Path(os.__file__).parent
    sizes = []
    for n in copies:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            for i in range(n):
                shutil.copytree(
                    lib,
                    root / "workspace" / f"c{i}",
                    ignore=shutil.ignore_patterns("site-packages", "__pycache__"),
                    copy_function=_link_or_copy,
                )
            child = [sys.executable, __file__, "--scaling-dir", tmp, "--queries", str(n_queries)]
            child += ["--scaling-vectors", spectrum]
            built = json.loads(
                subprocess.run([*child, "--scaling-step", "build"], check=True, capture_output=True, text=True).stdout
            )
            queried = json.loads(
                subprocess.run([*child, "--scaling-step", "query"], check=True, capture_output=True, text=True).stdout
            )
            sizes.append({"copies": n, **built, "disk_mb": round(_disk_bytes(root / "data") / 2**20, 1), **queried})
            print(json.dumps(sizes[-1]), file=sys.stderr)
    return {
        "benchmark": "search_speed_scaling",
        "vectors": f"synthetic ({spectrum}): unit vectors for chunks and queries, no embedding time counted",
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "queries_per_mode": n_queries,
        "sizes": sizes,
    }


def main() -> None:
    # stdout carries only the JSON result; structlog's default logger would print there.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--limit", type=int, help="index at most this many stdlib top-level entries")
    parser.add_argument("--embed-sample", type=int, default=512)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--real-vectors", action="store_true", help="embed every chunk (cached across runs)")
    parser.add_argument(
        "--keyword-only",
        action="store_true",
        help="stop after keyword-ready (about 15 s; for paired runs of two commits)",
    )
    parser.add_argument("--scaling", help="comma-separated stdlib copies per store, e.g. 1,4,16 (synthetic vectors)")
    parser.add_argument("--scaling-vectors", choices=["random", "embedding-like"], default="random")
    parser.add_argument("--scaling-dir", help=argparse.SUPPRESS)  # a child of --scaling: its folder
    parser.add_argument("--scaling-step", choices=["build", "query"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scaling_dir:
        root, spectrum = Path(args.scaling_dir), args.scaling_vectors
        built = args.scaling_step == "build"
        print(json.dumps(_scaling_build(root, spectrum) if built else _scaling_queries(root, spectrum, args.queries)))
        return
    if args.scaling:
        copies = [int(n) for n in args.scaling.split(",")]
        print(json.dumps(scaling(copies, args.scaling_vectors, args.queries), indent=2))
        return
    embed_sample = 128 if args.quick else args.embed_sample
    n_queries = 60 if args.quick else args.queries
    lib = Path(os.__file__).parent
    rng = random.Random(args.seed)

    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "stdlib"
        entries = sorted(p for p in lib.iterdir() if p.name not in {"site-packages", "__pycache__"})
        if args.quick:
            entries = [lib / d for d in QUICK_DIRS]
        if args.limit:
            entries = entries[: args.limit]
        workspace.mkdir()
        for entry in entries:
            if entry.is_dir():
                shutil.copytree(entry, workspace / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(entry, workspace / entry.name)

        config = MemoryConfig(
            workspace=workspace,
            data_dir=Path(tmp) / "data",
            embedding_cache_path=default_data_dir() / "embeddings.sqlite" if args.real_vectors else None,
        )
        svc = MemoryService(config)
        cpu_before = _cpu_seconds()
        progress = svc.indexer.sync(embed=False)
        keyword_ready_s = progress.keyword_ready_s
        keyword_ready_cpu_s = _cpu_seconds() - cpu_before  # this process + the finished worker processes
        stats = svc.store.stats()
        if args.keyword_only:
            svc.close()
            print(json.dumps(_keyword_ready_figures(stats.files, stats.chunks, keyword_ready_s, keyword_ready_cpu_s)))
            return

        # Embedding throughput on real chunks, through the same path sync uses (dedupe + buckets),
        # then the same chunks as rlide embedded them before: the shipped graph at 128 word pieces.
        pending = svc.store.pending(stats.chunks)
        sample = rng.sample(pending, min(embed_sample, len(pending)))
        texts = [p.embed_text for p in sample]
        assert svc.embedder is not None and isinstance(svc.embedder.inner, OnnxMiniLM)
        model = svc.embedder.inner
        tokens = [len(e.ids) for e in model._tokenizer.encode_batch(texts)]
        embed, vectors = _throughput(model.embed, texts)  # the model itself: the cache may know these
        baseline = OnnxMiniLM(max_tokens=128, variant="shipped")
        shipped, _ = _throughput(baseline.embed, texts)
        embed.update(mean_tokens=round(statistics.mean(tokens), 1), model=model.model_id)
        shipped.update(model=baseline.model_id)
        svc.store.set_vectors([p.chunk_id for p in sample], vectors)

        if args.real_vectors:
            svc.indexer.sync(embed=True)
        else:  # random unit vectors for the rest (see module docstring)
            rest = svc.store.pending(stats.chunks)
            for start in range(0, len(rest), 5000):
                part = rest[start : start + 5000]
                fake = np.random.default_rng(args.seed).standard_normal((len(part), 384)).astype(np.float32)
                fake /= np.linalg.norm(fake, axis=1, keepdims=True)
                svc.store.set_vectors([p.chunk_id for p in part], fake)

        # Warm query latency, end to end through search_code (query embedding included), after
        # the read-ahead a server does once its background index is done (MemoryService._run_sync).
        t0 = time.perf_counter()
        svc.store.warm()
        read_ahead_s = time.perf_counter() - t0
        queries = [
            f"{q} {i}" if i >= len(QUERIES) else q for i, q in enumerate(QUERIES * (n_queries // len(QUERIES) + 1))
        ][:n_queries]
        for q in QUERIES[:5]:
            svc.search_code(q + " warmup")
        hybrid_ms, keyword_ms, embed_ms, hybrid_cpu_ms = [], [], [], []
        for q in queries:
            t0, c0 = time.perf_counter(), time.process_time()
            svc.search_code(q, k=10)
            hybrid_ms.append((time.perf_counter() - t0) * 1000)
            hybrid_cpu_ms.append((time.process_time() - c0) * 1000)
            t0 = time.perf_counter()
            svc.search_code(q, k=10, mode="keyword")
            keyword_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            model.embed_query(q + " uncached")
            embed_ms.append((time.perf_counter() - t0) * 1000)

        dense = _dense_figures(svc, model, queries, config.resolved_index_path())

        # One edited file searchable again: re-chunk, write, embed its new chunks, search.
        target = workspace / ("json/decoder.py" if (workspace / "json").exists() else entries[0].name)
        rel = target.relative_to(workspace).as_posix()
        edit_ms = []
        for i in range(5):
            marker = f"zqx_marker_{['alpha', 'bravo', 'charlie', 'delta', 'echo'][i]}"
            with target.open("a") as fh:
                fh.write(f"\n\ndef {marker}(value):\n    return value * {i + 2}\n")
            t0 = time.perf_counter()
            svc.refresh_paths([rel])
            hits = svc.search_code(marker.replace("_", " "), k=3).results
            edit_ms.append((time.perf_counter() - t0) * 1000)
            assert hits and hits[0].path == rel and marker in hits[0].text, hits[:1]
        final = svc.index_status()
        svc.close()

    print(
        json.dumps(
            {
                **_keyword_ready_figures(
                    final.files_indexed, final.chunks_indexed, keyword_ready_s, keyword_ready_cpu_s
                ),
                "embed": embed,
                "embed_baseline_shipped_graph": shipped,
                "embed_speedup": round(embed["chunks_per_s"] / shipped["chunks_per_s"], 2),
                "query_ms": {
                    "hybrid_p50": round(_percentile(hybrid_ms, 50), 2),
                    "hybrid_p99": round(_percentile(hybrid_ms, 99), 2),
                    "hybrid_cpu_p50": round(_percentile(hybrid_cpu_ms, 50), 2),
                    "keyword_p50": round(_percentile(keyword_ms, 50), 2),
                    "keyword_p99": round(_percentile(keyword_ms, 99), 2),
                    "query_embedding_p50": round(_percentile(embed_ms, 50), 2),
                    "after_read_ahead_s": round(read_ahead_s, 2),
                    "queries": len(queries),
                },
                "dense": dense,
                "edit_ms": {"median": round(statistics.median(edit_ms), 1), "max": round(max(edit_ms), 1)},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
