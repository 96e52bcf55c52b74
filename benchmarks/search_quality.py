"""Search quality on a CodeSearchNet-style set built from the Python standard library.

Each query is the first paragraph of a function's docstring; its target is that function's source
with the docstring removed. The corpus is a fixed-seed sample of such functions (every query's
target included). A second set of identifier-style queries (a function's name split into words)
checks that hybrid ranking keeps BM25's exact-name wins.

    python benchmarks/search_quality.py            # 500 queries, 4000-function corpus
    python benchmarks/search_quality.py --quick    # 100 queries, 800 functions
    python benchmarks/search_quality.py --sweep    # also fusion depth/weight variants

Prints one JSON object on stdout. Vectors are cached (memory.embedding.embedders.EmbeddingCache), so a
second run costs only the queries.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.config import default_data_dir  # noqa: E402
from memory.embedding.embedders import DEFAULT_MAX_TOKENS, CachedEmbedder, EmbeddingCache, OnnxMiniLM  # noqa: E402
from memory.embedding.onnx_model import MinilmVariant  # noqa: E402
from memory.indexing.chunking import ChunkSpan  # noqa: E402
from memory.indexing.prepare import make_records  # noqa: E402
from memory.indexing.tokens import query_tokens, split_identifier  # noqa: E402
from memory.search import DEPTH, WEIGHTS  # noqa: E402
from memory.stores.base import FileState, Filters, Hit  # noqa: E402
from memory.stores.sqlite import SQLiteStore  # noqa: E402

SKIP_DIRS = {"test", "tests", "idlelib", "turtledemo", "site-packages", "__pycache__", "ensurepip", "lib2to3"}


@dataclass(frozen=True)
class Function:
    path: str
    qualname: str
    name: str
    query: str
    code: str
    start_line: int


def _functions(lib: Path) -> list[Function]:
    out: list[Function] = []
    for file in sorted(lib.rglob("*.py")):
        rel = file.relative_to(lib)
        if SKIP_DIRS & set(rel.parts[:-1]):
            continue
        try:
            source = file.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines()
        out.extend(_collect(tree, lines, rel.as_posix(), []))
    return out


def _collect(node: ast.AST, lines: list[str], path: str, scope: list[str]) -> list[Function]:
    found: list[Function] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            found += _collect(child, lines, path, [*scope, child.name])
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            fn = _target(child, lines, path, scope)
            if fn is not None:
                found.append(fn)
    return found


def _target(
    node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str], path: str, scope: list[str]
) -> Function | None:
    doc = ast.get_docstring(node)
    if not doc or not node.body or node.end_lineno is None:
        return None
    query = " ".join(doc.strip().split("\n\n")[0].split())[:300]
    if len(query.split()) < 3:
        return None
    doc_node = node.body[0]
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    kept = [
        line
        for n, line in enumerate(lines[start - 1 : node.end_lineno], start=start)
        if not (doc_node.lineno <= n <= (doc_node.end_lineno or doc_node.lineno))
    ]
    code = "\n".join(kept)
    if len([line for line in kept if line.strip()]) < 3:
        return None
    return Function(path, ".".join([*scope, node.name]), node.name, query, code, start)


def build(seed: int, n_queries: int, corpus_size: int) -> tuple[list[Function], list[Function], list[Function]]:
    functions = _functions(Path(os.__file__).parent)
    counts: dict[str, int] = {}
    for fn in functions:
        counts[fn.query] = counts.get(fn.query, 0) + 1
    unique = [fn for fn in functions if counts[fn.query] == 1]  # "Return self==value." has no single answer
    rng = random.Random(seed)
    rng.shuffle(unique)
    corpus = unique[:corpus_size]
    queries = corpus[:n_queries]
    named = [fn for fn in corpus if len(split_identifier(fn.name)) >= 2 and not fn.name.startswith("__")]
    return corpus, queries, named[: max(50, n_queries // 2)]


def _key(fn: Function) -> str:
    return f"{fn.path}::{fn.qualname}::{fn.start_line}"


def _score(ranked: list[list[Hit]], targets: list[str]) -> dict[str, float]:
    recall = mrr = 0.0
    for hits, target in zip(ranked, targets, strict=True):
        ids = [h.chunk_id for h in hits[:10]]
        if target in ids:
            recall += 1
            mrr += 1 / (ids.index(target) + 1)
    return {"recall@10": round(recall / len(targets), 4), "mrr@10": round(mrr / len(targets), 4)}


def main() -> None:
    # stdout carries only the JSON result; structlog's default logger would print there.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--corpus", type=int, default=4000)
    parser.add_argument("--limit", type=int, help="alias for --queries")
    parser.add_argument("--quick", action="store_true", help="100 queries over 800 functions")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    parser.add_argument(
        "--variant",
        choices=get_args(MinilmVariant),
        default="int8-matmul",
        help="MiniLM graph (memory/embedding/onnx_model.py)",
    )
    parser.add_argument("--sweep", action="store_true", help="also report fusion depth/weight variants")
    parser.add_argument("--cache", type=Path, default=default_data_dir() / "embeddings.sqlite")
    args = parser.parse_args()
    n_queries = args.limit or (100 if args.quick else args.queries)
    corpus_size = 800 if args.quick else max(args.corpus, n_queries)

    started = time.monotonic()
    corpus, queries, named = build(args.seed, n_queries, corpus_size)
    embedder = CachedEmbedder(OnnxMiniLM(max_tokens=args.max_tokens, variant=args.variant), EmbeddingCache(args.cache))
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.sqlite", model_id=embedder.model_id, dim=embedder.dim)
        ids: dict[str, str] = {}
        by_path: dict[str, list[Function]] = {}
        for fn in corpus:
            by_path.setdefault(fn.path, []).append(fn)
        for path, fns in by_path.items():
            spans = [
                ChunkSpan(
                    fn.start_line,
                    fn.start_line + fn.code.count("\n"),
                    "function",
                    fn.qualname,
                    fn.code.splitlines()[0].strip(),
                    fn.code,
                )
                for fn in fns
            ]
            records = make_records(path, "python", spans)
            for fn, record in zip(fns, records, strict=True):
                ids[_key(fn)] = record.chunk_id
            store.replace_file(FileState(path, 0, 0, path, "python"), records)
        embed_started = time.monotonic()
        pending = store.pending(len(corpus) + 1)
        store.set_vectors([p.chunk_id for p in pending], embedder.embed([p.embed_text for p in pending]))
        embed_s = time.monotonic() - embed_started

        def run(fns: list[Function], text_of: object) -> dict[str, dict[str, float]]:
            texts = [text_of(fn) for fn in fns]  # type: ignore[operator]
            targets = [ids[_key(fn)] for fn in fns]
            vectors = [embedder.embed_query(t) for t in texts]
            tokens = [query_tokens(t) for t in texts]
            result = {
                "bm25": _score([store.keyword_search(tk, 10, Filters()) for tk in tokens], targets),
                "dense": _score([store.vector_search(v, 10, Filters()) for v in vectors], targets),
                "hybrid": _score(
                    [
                        store.hybrid_search(tk, v, 10, Filters(), DEPTH, WEIGHTS)
                        for tk, v in zip(tokens, vectors, strict=True)
                    ],
                    targets,
                ),
            }
            if args.sweep:
                for depth in (10, 20, 30, 50, 100):
                    for weights in ((1.0, 1.0), (0.7, 1.0), (0.5, 1.0), (1.0, 0.7)):
                        key = f"hybrid_depth{depth}_w{weights[0]}-{weights[1]}"
                        result[key] = _score(
                            [
                                store.hybrid_search(tk, v, 10, Filters(), depth, weights)
                                for tk, v in zip(tokens, vectors, strict=True)
                            ],
                            targets,
                        )
            return result

        docstring = run(queries, lambda fn: fn.query)
        identifier = run(named, lambda fn: " ".join(split_identifier(fn.name)))
        store.close()
    print(
        json.dumps(
            {
                "benchmark": "search_quality",
                "model": embedder.model_id,
                "max_tokens": args.max_tokens,
                "seed": args.seed,
                "corpus_functions": len(corpus),
                "docstring_queries": len(queries),
                "identifier_queries": len(named),
                "fusion": {"method": "rrf", "k": 60, "depth": DEPTH, "weights_keyword_dense": list(WEIGHTS)},
                "docstring": docstring,
                "identifier": identifier,
                "embedded_now": embedder.computed,
                "embed_seconds": round(embed_s, 1),
                "wall_seconds": round(time.monotonic() - started, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
