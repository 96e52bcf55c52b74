"""What a developer's question asks for, and the ranking rules that follow from it.

Fusion (memory.search) finds candidates; these rules order them the way a person fixing a bug
expects:

- A pasted error message, a quoted string or a traceback line leads to where the text is raised or
  logged: a chunk whose string literals (f-string and %-format pieces included) appear in the query
  and that raises, logs or warns outranks one that only mentions the words (the exception class, a
  test asserting the message, a changelog entry quoting it).
- Tests, docs, examples and changelogs stay searchable but rank below the implementation unless the
  query asks for them ("the test for X", "docs", "changelog"); `kind=` filters them outright.
- A name written as code in the query (`stop_before_delay`, `TTLCache`) is matched as a name: the
  chunk of that symbol (or of its class) is preferred to one that only mentions it.
- One slot per symbol: the other chunks of a symbol already listed are dropped from the ranking.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import StrEnum

from memory.stores.base import Hit


class ChunkKind(StrEnum):
    code = "code"
    test = "test"
    doc = "doc"


_TEST_PATH = re.compile(r"(^|/)(tests?|testing|spec|__tests__)/|(^|/)(test_[^/]*|[^/]*_test\.\w+|conftest\.py)$")
_DOC_PATH = re.compile(
    r"(^|/)(docs?|documentation|examples?|samples?|releasenotes|changelog\.d|news)/"
    r"|\.(md|rst|txt|adoc|ipynb)$|(^|/)(changes|changelog|history|news|authors|contributing)(\.\w+)?$",
    re.IGNORECASE,
)


def path_kind(path: str) -> ChunkKind:
    """What a file is, from its path: a test, documentation (docs, examples, changelogs), or code."""
    if _TEST_PATH.search(path):
        return ChunkKind.test
    if _DOC_PATH.search(path):
        return ChunkKind.doc
    return ChunkKind.code


# Asking for tests ("the test for X", "which tests cover", "where is X tested"), not describing where
# a thing is used ("how do I freeze time in my tests").
_WANTS_TESTS = re.compile(
    r"\b(tests?|test cases?|unit tests?)\s+(for|of|that|which|covering|cover|checking|asserting)\b"
    r"|\b(which|what|any|is there a|are there)\s+(unit\s+)?tests?\b|\btested\b|\bfixtures?\b|\bconftest\b",
    re.IGNORECASE,
)
_WANTS_DOCS = re.compile(
    r"\b(docs?|documentation|documented|readme|changelog|release notes?|tutorial|guide|examples?\s+(of|for))\b",
    re.IGNORECASE,
)
_QUOTED = re.compile(r"\"([^\"\n]{4,})\"|'([^'\n]{4,})'|`([^`\n]{4,})`")
# A class-like name: a capital, another capital later, a lower-case letter somewhere (TTLCache,
# SignatureExpired; not HTTP, not Note).
_CAMEL_CASE = r"(?=[A-Za-z0-9]*[a-z])[A-Z][A-Za-z0-9]*[A-Z][A-Za-z0-9]*"
# "KeyError: 'x'", "itsdangerous.exc.BadData: Invalid base64-encoded data", "SignatureExpired: ...":
# an exception's name (dotted, or CamelCase, or a usual suffix), a colon, a message.
_ERROR_LINE = re.compile(
    rf"^\s*((?:[\w]+\.)+[A-Z]\w*|{_CAMEL_CASE}|[A-Z]\w*(?:Error|Exception|Warning|Exit|Timeout))\s*:\s*(\S.*)$",
    re.MULTILINE,
)
_TRACEBACK_LINE = re.compile(r'File "([^"]+)", line \d+, in (\w+)')
_LOG_LINE = re.compile(r"^\s*(?:ERROR|WARNING|WARN|CRITICAL|FATAL)\b[:\s]", re.MULTILINE)


# snake_case (one underscore at least), camelCase, CamelCase: a name, not a word.
_IDENTIFIER = re.compile(rf"\b(?:[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]*|{_CAMEL_CASE})\b")


@dataclass(frozen=True)
class QueryIntent:
    literals: tuple[str, ...]
    """Texts the answer should contain verbatim: quoted strings, error messages."""
    error_names: tuple[str, ...]
    """Exception names quoted from an error line."""
    traceback_functions: tuple[str, ...]
    wants_tests: bool
    wants_docs: bool
    identifiers: tuple[str, ...] = ()
    """Names written as code (snake_case, camelCase, CamelCase): a symbol of that name answers."""

    @property
    def is_error(self) -> bool:
        return bool(self.error_names or self.traceback_functions or self.literals)


def read_query(query: str) -> QueryIntent:
    literals = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(query)]
    errors = [(m[1], m[2]) for m in _ERROR_LINE.finditer(query)]
    literals += [message for _, message in errors]
    if _LOG_LINE.search(query):
        literals.append(_LOG_LINE.sub("", query).strip())
    return QueryIntent(
        literals=tuple(dict.fromkeys(lit.strip() for lit in literals if lit.strip())),
        error_names=tuple(dict.fromkeys(name for name, _ in errors)),
        traceback_functions=tuple(dict.fromkeys(m[2] for m in _TRACEBACK_LINE.finditer(query))),
        wants_tests=bool(_WANTS_TESTS.search(query)),
        wants_docs=bool(_WANTS_DOCS.search(query)),
        identifiers=tuple(dict.fromkeys(m[0] for m in _IDENTIFIER.finditer(query))),
    )


# A string literal of code, with an optional prefix (f, r, b...), in either quote.
_STRING = re.compile(r"""(?<![\w])([rRbBuUfF]{0,2})("([^"\\\n]|\\.){3,}"|'([^'\\\n]|\\.){3,}')""")
_PLACEHOLDER = re.compile(r"\{[^{}]*\}|%[-#0 +]*\d*(?:\.\d+)?[sdrifgxeEcoa%]")
_RAISES = re.compile(
    r"\braise\b|\bwarnings\.warn\(|\b(log|logger|logging|_log|_logger|LOG|LOGGER)\.\w+\(|\bprint\(|\babort\(|\bpanic!?\("
)
MIN_FRAGMENT = 5


def literal_overlap(text: str, literals: tuple[str, ...]) -> int:
    """Characters of `text`'s string literals, cut at their placeholders (`{age}`, `%s`), that
    appear in one of `literals` (case-insensitive): how much of a pasted message this code writes."""
    if not literals:
        return 0
    wanted = [lit.lower() for lit in literals]
    matched = 0
    for m in _STRING.finditer(text):
        body = m[2][1:-1]
        for piece in _PLACEHOLDER.split(body):
            piece = piece.strip().lower()
            if len(piece) >= MIN_FRAGMENT and any(piece in lit for lit in wanted):
                matched += len(piece)
    return matched


NON_CODE_FACTOR = 0.35
"""A test's or doc's fused score is scaled by this unless the query asks for tests or docs."""
NAMED_SYMBOL_FACTOR = 2.0
"""A chunk whose symbol (or its class) the query names as code: its score doubles."""
MATCH_SCALE = 24.0
"""Within a tier, characters of matched message per unit of bonus: 24 matched characters double a score."""
MIN_MESSAGE_MATCH = 12
"""Characters of a pasted message a chunk must write to be a raise site (or half the message, if shorter)."""


@dataclass(frozen=True)
class RuleMatch:
    """What the rules found in one hit for one query."""

    tier: int
    """2: code that raises or logs the pasted text; 1: code that writes part of it, or a function the
    traceback names; 0: neither."""
    factor: float
    """What the rules multiply the fused score by (kind, named symbol, matched message)."""
    unasked_kind: bool
    """A test or doc for a query that did not ask for one."""


def match_rules(intent: QueryIntent, hit: Hit, chunk_kind: ChunkKind) -> RuleMatch:
    needed = min(MIN_MESSAGE_MATCH, max((len(lit) for lit in intent.literals), default=0) // 2)
    factor = 1.0
    wanted = {ChunkKind.test: intent.wants_tests, ChunkKind.doc: intent.wants_docs}.get(chunk_kind, True)
    if not wanted:
        factor *= NON_CODE_FACTOR
    tier = 0
    if intent.identifiers and chunk_kind is ChunkKind.code and _names(hit.symbol) & set(intent.identifiers):
        factor *= NAMED_SYMBOL_FACTOR
    if intent.is_error and chunk_kind is ChunkKind.code:
        overlap = literal_overlap(hit.text, intent.literals)
        if overlap and overlap >= needed:
            tier = 2 if _RAISES.search(hit.text) else 1
            factor *= 1.0 + overlap / MATCH_SCALE
        elif intent.traceback_functions and hit.symbol.rsplit(".", 1)[-1] in intent.traceback_functions:
            tier = 1
    return RuleMatch(tier=tier, factor=factor, unasked_kind=not wanted)


def rerank(
    intent: QueryIntent, hits: list[Hit], k: int, *, kind: ChunkKind | None = None
) -> list[tuple[Hit, RuleMatch]]:
    """`hits` (fused, best first) ordered by the rules above for the query `intent` reads; the top `k`,
    each with what the rules found in it.

    For an error query, code that raises or logs the pasted text forms the first tier, code that
    writes part of it (or is a function the traceback names) the second, ordered within by how much
    of the message they write; everything else follows by score."""
    scored: list[tuple[int, float, int, Hit, RuleMatch]] = []
    for position, hit in enumerate(hits):
        chunk_kind = path_kind(hit.path)
        if kind is not None and chunk_kind is not kind:
            continue
        rules = match_rules(intent, hit, chunk_kind)
        scored.append((rules.tier, hit.score * rules.factor, position, hit, rules))
    scored.sort(key=lambda item: (-item[0], -item[1], item[2]))
    out: list[tuple[Hit, RuleMatch]] = []
    seen_symbols: set[tuple[str, str]] = set()
    for _, score, _, hit, rules in scored:
        key = (hit.path, hit.symbol)
        if hit.symbol and key in seen_symbols:
            continue
        seen_symbols.add(key)
        out.append((replace(hit, score=score), rules))
        if len(out) == k:
            break
    return out


def _names(symbol: str) -> set[str]:
    """`Class.method` -> {"Class", "method"}."""
    return set(symbol.split(".")) if symbol else set()
