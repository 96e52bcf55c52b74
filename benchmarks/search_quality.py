"""Search quality on a CodeSearchNet-style set built from the Python standard library.

Each query is the first paragraph of a function's docstring; its target is that function's source
with the docstring removed. The corpus is a fixed-seed sample of such functions (every query's
target included). A second set of identifier-style queries (a function's name split into words)
checks that hybrid ranking keeps BM25's exact-name wins.

A third set, the natural questions (tests/data/natural_questions.jsonl), asks what a developer or a
coding agent asks while fixing a bug (behaviour, concept, configuration, pasted error messages) about
three real projects copied whole, with their tests, docs and changelogs (tests/data/search_projects,
see its README.md). Each project folder is indexed with rlide's own `MemoryService` and searched
with `search_code`; a plain BM25 over 40-line windows of every file is the baseline. A hit is a
result in an answer's file whose lines overlap the answer symbol's definition.

    python benchmarks/search_quality.py            # 500 queries, 4000-function corpus, natural questions
    python benchmarks/search_quality.py --quick    # 100 queries, 800 functions (no natural questions)
    python benchmarks/search_quality.py --natural  # the natural questions only
    python benchmarks/search_quality.py --sweep    # also fusion depth/weight variants
    python benchmarks/search_quality.py --natural --fit-relevance  # refit memory/relevance.py's coefficients

Each natural question's top 10 also checks the hits' relevance (memory/relevance.py), a probability
that the hit answers: its calibration (expected calibration error over 10 bins, Brier score) on
every question, and, with --fit-relevance, the coefficients fitted on all questions and on each pair
of projects with the third left out (the figures for that third are the honest ones).

Prints one JSON object on stdout. Vectors are cached (memory.embedding.embedders.EmbeddingCache), so a
second run costs only the queries.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.config import MemoryConfig, default_data_dir  # noqa: E402
from memory.embedding.embedders import DEFAULT_MAX_TOKENS, CachedEmbedder, EmbeddingCache, OnnxMiniLM  # noqa: E402
from memory.embedding.onnx_model import MinilmVariant  # noqa: E402
from memory.indexing.chunking import ChunkSpan  # noqa: E402
from memory.indexing.files import decode_source, walk_workspace  # noqa: E402
from memory.indexing.prepare import make_records  # noqa: E402
from memory.indexing.tokens import query_tokens, split_identifier  # noqa: E402
from memory.relevance import COEFFICIENTS, FEATURES, final_order, probability  # noqa: E402
from memory.search import DEPTH, WEIGHTS, search  # noqa: E402
from memory.service import MemoryService  # noqa: E402
from memory.stores.base import FileState, Filters, Hit  # noqa: E402
from memory.stores.sqlite import SQLiteStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NATURAL_QUESTIONS = ROOT / "tests" / "data" / "natural_questions.jsonl"
NATURAL_PROJECTS = ROOT / "tests" / "data" / "search_projects"
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


# -- natural questions over real projects -------------------------------------------------------

KINDS = ("behaviour", "concept", "config", "error")
BM25_K1, BM25_B = 1.2, 0.75
WINDOW, STRIDE = 40, 20
Span = tuple[str, int, int]  # (path relative to the project folder, first line, last line), 1-based inclusive


@dataclass(frozen=True)
class Question:
    id: str
    project: str
    kind: str
    question: str
    answers: tuple[Span, ...]


def symbol_spans(source: str) -> dict[str, tuple[int, int]]:
    """Every class and function of a module by qualified name ("Class.method", "outer.inner"), with its
    lines from the first decorator to the end. Overloads and property setters share a name: their
    lines are merged."""
    spans: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = ".".join([*scope, child.name])
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                end = child.end_lineno or child.lineno
                old = spans.get(name)
                spans[name] = (min(start, old[0]), max(end, old[1])) if old else (start, end)
                visit(child, [*scope, child.name])
            else:
                visit(child, scope)

    visit(ast.parse(source), [])
    return spans


def load_questions(path: Path = NATURAL_QUESTIONS, projects: Path = NATURAL_PROJECTS) -> list[Question]:
    """The question set, each answer resolved to its lines; stops on an answer that does not exist."""
    questions: list[Question] = []
    spans: dict[Path, dict[str, tuple[int, int]]] = {}
    errors: list[str] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if row["kind"] not in KINDS:
            errors.append(f"line {n} ({row['id']}): kind {row['kind']!r} is not one of {KINDS}")
        answers: list[Span] = []
        for answer in row["answers"]:
            file = projects / row["project"] / answer["path"]
            if not file.is_file():
                errors.append(f"line {n} ({row['id']}): {file} does not exist")
                continue
            if top1_kind(answer["path"]) != "other_source":
                errors.append(f"line {n} ({row['id']}): {answer['path']} is a test, doc or changelog")
            if file not in spans:
                spans[file] = symbol_spans(file.read_text(encoding="utf-8"))
            span = spans[file].get(answer["symbol"])
            if span is None:
                errors.append(f"line {n} ({row['id']}): {answer['symbol']} is not defined in {file}")
                continue
            answers.append((answer["path"], *span))
        questions.append(Question(row["id"], row["project"], row["kind"], row["question"], tuple(answers)))
    ids = Counter(q.id for q in questions)
    errors += [f"question id {i} appears {c} times" for i, c in ids.items() if c > 1]
    if errors:
        raise SystemExit("natural questions: " + "; ".join(errors))
    return questions


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def bm25_tokens(text: str) -> list[str]:
    """Words and identifiers, lowercase; an identifier counts whole and as its camelCase/snake_case
    parts (`max_age` -> max_age, max, age)."""
    out: list[str] = []
    for word in _WORD.findall(text):
        parts = [p.lower() for piece in word.split("_") for p in _CAMEL_PART.findall(piece)]
        whole = word.lower().strip("_")
        if whole and (len(parts) != 1 or parts[0] != whole):
            out.append(whole)
        out.extend(parts)
    return out


class WindowBM25:
    """Okapi BM25 (k1=1.2, b=0.75) over 40-line windows, stride 20, of every file rlide would index."""

    def __init__(self, root: Path) -> None:
        self.windows: list[Span] = []
        self.lengths: list[int] = []
        postings: dict[str, list[tuple[int, int]]] = {}
        for source in walk_workspace(root, max_file_bytes=1_000_000):
            text = decode_source((root / source.path).read_bytes())
            if text is None:
                continue
            lines = text.splitlines()
            for start in range(0, max(len(lines) - (WINDOW - STRIDE), 1), STRIDE):
                chunk = lines[start : start + WINDOW]
                counts = Counter(bm25_tokens("\n".join(chunk)))
                doc = len(self.windows)
                self.windows.append((source.path, start + 1, start + len(chunk)))
                self.lengths.append(sum(counts.values()))
                for token, tf in counts.items():
                    postings.setdefault(token, []).append((doc, tf))
        self.postings = postings
        self.avg_length = sum(self.lengths) / max(len(self.lengths), 1)

    def search(self, query: str, k: int = 10) -> list[Span]:
        n = len(self.windows)
        scores: dict[int, float] = {}
        for token in dict.fromkeys(bm25_tokens(query)):
            found = self.postings.get(token, [])
            idf = math.log((n - len(found) + 0.5) / (len(found) + 0.5) + 1)
            for doc, tf in found:
                norm = BM25_K1 * (1 - BM25_B + BM25_B * self.lengths[doc] / self.avg_length)
                scores[doc] = scores.get(doc, 0.0) + idf * tf * (BM25_K1 + 1) / (tf + norm)
        best = sorted(scores, key=lambda d: (-scores[d], d))[:k]
        return [self.windows[d] for d in best]


def first_hit(results: list[Span], answers: tuple[Span, ...]) -> int | None:
    """1-based rank of the first result that overlaps an answer, within the top 10."""
    for rank, (path, start, end) in enumerate(results[:10], start=1):
        if any(path == a_path and start <= a_end and a_start <= end for a_path, a_start, a_end in answers):
            return rank
    return None


def top1_kind(path: str) -> str:
    """What a first result that is not an answer is: tests, docs, changelog or other source."""
    parts = path.split("/")
    name = parts[-1].upper()
    if parts[0] == "releasenotes" or name.startswith(("CHANGES", "CHANGELOG", "HISTORY")):
        return "changelog"
    if parts[0] in {"tests", "test"} or name.startswith("TEST_"):
        return "tests"
    if parts[0] in {"docs", "doc"} or name.endswith((".RST", ".MD")):
        return "docs"
    return "other_source"


def _rank_scores(ranks: list[int | None]) -> dict[str, float]:
    n = max(len(ranks), 1)
    return {
        "n": len(ranks),
        "hit@1": round(sum(r == 1 for r in ranks) / n, 4),
        "hit@5": round(sum(r is not None and r <= 5 for r in ranks) / n, 4),
        "mrr@10": round(sum(1 / r for r in ranks if r is not None) / n, 4),
    }


@dataclass(frozen=True)
class Sample:
    """One of the rules' top 10 hits for a question (in the rules' order), and whether it answers."""

    project: str
    question: str
    kind: str
    features: tuple[float, ...]
    answers: bool


def reordered_mrr(samples: list[Sample], coefficients_of: Callable[[str], list[float]]) -> dict[str, float]:
    """MRR@10 by kind of question when each question's hits take memory.relevance's final order
    under the coefficients `coefficients_of(project)` gives."""
    by_question: dict[str, list[Sample]] = {}
    for sample in samples:
        by_question.setdefault(sample.question, []).append(sample)
    reciprocal: dict[str, tuple[str, float]] = {}
    for question, hits in by_question.items():
        coefficients = coefficients_of(hits[0].project)
        order = final_order([probability(h.features, coefficients) for h in hits])
        rank = next((r for r, i in enumerate(order, start=1) if hits[i].answers), None)
        reciprocal[question] = (hits[0].kind, 1 / rank if rank else 0.0)
    table = {kind: [v for k, v in reciprocal.values() if k == kind] for kind in KINDS}
    table["all"] = [v for _, v in reciprocal.values()]
    return {kind: round(sum(values) / max(len(values), 1), 4) for kind, values in table.items()}


def calibration(probabilities: list[float], labels: list[bool], bins: int = 10) -> dict[str, Any]:
    """Expected calibration error (the gap between mean probability and answer rate, weighted by how
    many hits fall in each tenth), Brier score, and the table behind the error."""
    table = []
    error = 0.0
    for b in range(bins):
        inside = [
            (p, y)
            for p, y in zip(probabilities, labels, strict=True)
            if b / bins <= p < (b + 1) / bins or p == b == bins - 1
        ]
        if not inside:
            continue
        mean_p = sum(p for p, _ in inside) / len(inside)
        rate = sum(y for _, y in inside) / len(inside)
        error += len(inside) / len(labels) * abs(mean_p - rate)
        table.append(
            {
                "bin": f"{b / bins:.1f}-{(b + 1) / bins:.1f}",
                "hits": len(inside),
                "mean_relevance": round(mean_p, 3),
                "answer_rate": round(rate, 3),
            }
        )
    brier = sum((p - y) ** 2 for p, y in zip(probabilities, labels, strict=True)) / max(len(labels), 1)
    return {
        "hits": len(labels),
        "answers": sum(labels),
        "ece": round(error, 4),
        "brier": round(brier, 4),
        "bins": table,
    }


def fit_logistic(samples: list[Sample], l2: float = 1.0, steps: int = 50) -> list[float]:
    """Coefficients maximising the log-likelihood less `l2` times their squares (the bias unpenalised),
    by Newton's method."""
    import numpy as np

    x = np.array([s.features for s in samples], dtype=np.float64)
    y = np.array([s.answers for s in samples], dtype=np.float64)
    penalty = np.full(x.shape[1], l2)
    penalty[0] = 0.0
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        gradient = x.T @ (p - y) + penalty * w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + np.diag(penalty)
        w -= np.linalg.solve(hessian, gradient)
    return [round(float(v), 3) for v in w]


def relevance_report(samples: list[Sample], *, fit: bool) -> dict[str, Any]:
    labels = [s.answers for s in samples]
    report: dict[str, Any] = {
        "features": list(FEATURES),
        "coefficients": list(COEFFICIENTS),
        "all_questions": calibration([probability(s.features) for s in samples], labels),
    }
    if fit:
        report["fitted_on_all"] = fit_logistic(samples)
        held_out: dict[str, Any] = {}
        without = {
            p: fit_logistic([s for s in samples if s.project != p]) for p in sorted({s.project for s in samples})
        }
        for project, coefficients in without.items():
            left = [s for s in samples if s.project == project]
            held_out[project] = {
                "coefficients": coefficients,
                **calibration([probability(s.features, coefficients) for s in left], [s.answers for s in left]),
            }
        report["fitted_without_each_project"] = held_out
        # The honest MRR: each question ordered with coefficients fitted without its project.
        report["mrr@10_rules_order"] = reordered_mrr(samples, lambda _p: [0.0] * len(FEATURES))
        report["mrr@10_final_order_held_out"] = reordered_mrr(samples, without.__getitem__)
    return report


def run_natural(args: argparse.Namespace) -> dict[str, Any]:
    questions = load_questions()
    methods = ("bm25_windows", "rlide_keyword", "rlide_dense", "rlide_hybrid")
    ranks: dict[str, dict[str, int | None]] = {m: {} for m in methods}
    top1: dict[str, dict[str, str | None]] = {m: {} for m in methods}
    seconds: dict[str, float] = {}
    index: dict[str, dict[str, int]] = {}
    samples: list[Sample] = []
    model = "none"
    for project in sorted({q.project for q in questions}):
        folder = NATURAL_PROJECTS / project
        asked = [q for q in questions if q.project == project]
        started = time.monotonic()
        bm25 = WindowBM25(folder)
        runs: dict[str, Callable[[str], list[Span]]] = {"bm25_windows": bm25.search}
        with tempfile.TemporaryDirectory() as tmp:
            config = MemoryConfig(
                workspace=folder,
                data_dir=Path(tmp),
                embedding_cache_path=args.cache,
                embedder="onnx-minilm",
                max_tokens=args.max_tokens,
                minilm_variant=args.variant,
            )
            with MemoryService(config) as service:
                status = service.index_workspace()
                model = service.embedder.model_id if service.embedder is not None else "none"
                index[project] = {
                    "files": status.files_indexed,
                    "chunks": status.chunks_indexed,
                    "bm25_windows": len(bm25.windows),
                }

                def rlide(mode: str) -> Callable[[str], list[Span]]:
                    def run(query: str) -> list[Span]:
                        hits = service.search_code(query, k=10, mode=mode).results
                        return [(h.path, h.start_line, h.end_line) for h in hits]

                    return run

                runs |= {f"rlide_{m}": rlide(m) for m in ("keyword", "dense", "hybrid")}
                for q in asked:
                    for method in methods:
                        results = runs[method](q.question)
                        ranks[method][q.id] = first_hit(results, q.answers)
                        top1[method][q.id] = f"{results[0][0]}:{results[0][1]}-{results[0][2]}" if results else None
                    judged, _ = search(service.store, service.embedder, q.question, 10, Filters(), final=False)
                    for hit in judged:
                        label = first_hit([(hit.path, hit.start_line, hit.end_line)], q.answers) is not None
                        samples.append(Sample(project, q.id, q.kind, hit.features, label))
        seconds[project] = round(time.monotonic() - started, 1)

    by_id = {q.id: q for q in questions}
    summary: dict[str, Any] = {}
    for method in methods:
        table = {kind: _rank_scores([r for i, r in ranks[method].items() if by_id[i].kind == kind]) for kind in KINDS}
        table["all"] = _rank_scores(list(ranks[method].values()))
        firsts = Counter(
            "answer" if ranks[method][i] == 1 else (top1_kind(t.split(":")[0]) if t else "nothing")
            for i, t in top1[method].items()
        )
        summary[method] = {
            **table,
            "by_project": {
                p: _rank_scores([r for i, r in ranks[method].items() if by_id[i].project == p]) for p in sorted(index)
            },
            "top1_tests_docs_changelog_share": round(
                (firsts["tests"] + firsts["docs"] + firsts["changelog"]) / len(questions), 4
            ),
            "top1_kinds": dict(sorted(firsts.items())),
        }
    return {
        "model": model,
        "questions": len(questions),
        "by_kind": dict(sorted(Counter(q.kind for q in questions).items())),
        "by_project": dict(sorted(Counter(q.project for q in questions).items())),
        "index": index,
        "seconds": seconds,
        "hit_rule": "result path equals an answer's path and its lines overlap the answer symbol's definition",
        "summary": summary,
        "relevance": relevance_report(samples, fit=args.fit_relevance),
        "ranks": ranks,
        "top1": top1,
    }


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
    parser.add_argument(
        "--natural", action="store_true", help="only the natural questions over tests/data/search_projects"
    )
    parser.add_argument("--no-natural", action="store_true", help="leave the natural questions out of a full run")
    parser.add_argument(
        "--fit-relevance", action="store_true", help="fit memory/relevance.py's coefficients on the natural questions"
    )
    args = parser.parse_args()
    if args.natural:
        started = time.monotonic()
        natural = run_natural(args)
        wall = round(time.monotonic() - started, 1)
        print(json.dumps({"benchmark": "search_quality", "natural": natural, "wall_seconds": wall}, indent=2))
        return
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
    extra: dict[str, Any] = {} if args.quick or args.no_natural else {"natural": run_natural(args)}
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
                **extra,
                "wall_seconds": round(time.monotonic() - started, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
