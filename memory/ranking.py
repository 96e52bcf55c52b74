"""Rank fusion, top-k selection and path-glob matching, shared by the stores and by memory.search."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from memory.errors import QueryError
from memory.stores.base import Hit

RRF_K = 60


def rrf(
    lists: Sequence[Sequence[Hit]], k: int, *, weights: Sequence[float] | None = None, rank_constant: int = RRF_K
) -> list[Hit]:
    """Reciprocal rank fusion: score = sum_i w_i / (rank_constant + rank_i)."""
    weights = weights or [1.0] * len(lists)
    scores: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for hits, weight in zip(lists, weights, strict=True):
        for rank, hit in enumerate(hits, start=1):
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + weight / (rank_constant + rank)
            first.setdefault(hit.chunk_id, hit)
    best = sorted(scores, key=lambda cid: -scores[cid])[:k]
    return [replace(first[cid], score=scores[cid]) for cid in best]


def top_k(scores: npt.NDArray[np.number[Any]], k: int) -> npt.NDArray[np.intp]:
    """Indices of the `k` largest `scores`, best first, equal scores in index order. Exact."""
    candidates = top_k_candidates(scores, k)
    order = np.lexsort((candidates, -scores[candidates]))[:k]
    return cast(npt.NDArray[np.intp], candidates[order])


def top_k_candidates(scores: npt.NDArray[np.number[Any]], k: int) -> npt.NDArray[np.intp]:
    """Indices, ascending, of a few more than the `k` largest `scores`: every score at least as
    high as the `k`-th largest is among them.

    np.argpartition over 58k scores took 1.3 ms here, a third of a dense query. The `k`-th
    largest of a strided sample is a lower bound on the `k`-th largest overall (the sample's `k`
    values are scores too), so every top-`k` score is at least that bound: one comparison pass
    finds them and a few hundred others (0.06 ms for k=10)."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, np.intp)
    if k == len(scores):
        return np.arange(len(scores))
    stride = len(scores) // (64 * k)
    sample = scores[::stride] if stride >= 2 else scores
    bound = np.partition(sample, len(sample) - k)[len(sample) - k]
    return np.flatnonzero(scores >= bound)


MAX_GLOB_ALTERNATIVES = 64


def _class_end(pattern: str, start: int) -> int:
    """Index of the `]` closing the class opened at `start` (a `]` first in it is a member), or -1."""
    i = start + 1
    i += pattern[i : i + 1] in ("!", "^")
    i += pattern[i : i + 1] == "]"
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
        elif pattern[i] == "]":
            return i
        else:
            i += 1
    return -1


def _unescaped(text: str) -> Iterator[tuple[int, str, int]]:
    """(index, character, brace depth after it) of each character of `text` that no backslash escapes."""
    depth, i = 0, 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        depth += (c == "{") - (c == "}")
        yield i, c, depth
        i += 1


def _brace_end(pattern: str, start: int) -> int:
    """Index of the `}` closing the group opened at `start`, past nested groups and escapes, or -1."""
    for i, c, depth in _unescaped(pattern[start:]):
        if c == "}" and depth == 0:
            return start + i
    return -1


def expand_braces(pattern: str) -> list[str]:
    """`src/{api,core}/*.{py,ts}` -> its four brace-free patterns (nested braces too), in order.
    Raises `QueryError` for an unclosed brace or more than MAX_GLOB_ALTERNATIVES patterns
    (`glob_regex` says which pattern)."""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a class is literal text here: `[{]` is a brace character, not a group
            end = _class_end(pattern, i)
            i = end + 1 if end >= 0 else i + 1
            continue
        if c == "{":
            end = _brace_end(pattern, i)
            if end < 0:
                raise QueryError("a '{' is never closed (write \\{ for a literal brace)")
            head, rests = pattern[:i], expand_braces(pattern[end + 1 :])
            out = [
                head + choice + rest
                for alternative in _split_commas(pattern[i + 1 : end])
                for choice in expand_braces(alternative)
                for rest in rests
            ]
            if len(out) > MAX_GLOB_ALTERNATIVES:
                raise QueryError(f"it expands to over {MAX_GLOB_ALTERNATIVES} patterns: narrow it")
            return out
        i += 1
    return [pattern]


def _split_commas(group: str) -> list[str]:
    """The alternatives of a brace group's inside, split at commas outside nested braces."""
    parts, start = [], 0
    for i, c, depth in _unescaped(group):
        if c == "," and depth == 0:
            parts.append(group[start:i])
            start = i + 1
    return [*parts, group[start:]]


def _class_regex(pattern: str, start: int, end: int) -> str:
    """The regex of the class `pattern[start:end + 1]` (`[abc]`, `[a-z]`, `[!abc]`/`[^abc]`): one
    character, never a slash."""
    body = pattern[start + 1 : end]
    negated = body[:1] in ("!", "^")
    if negated:
        body = body[1:]
    chars: list[tuple[str, bool]] = []  # (character, written with a backslash)
    i = 0
    while i < len(body):
        escaped = body[i] == "\\" and i + 1 < len(body)
        chars.append((body[i + escaped], escaped))
        i += 1 + escaped
    members, i = [], 0
    while i < len(chars):  # an unescaped `-` between two members is a range; anything else is itself
        if i + 2 < len(chars) and chars[i + 1] == ("-", False):
            members.append(f"{re.escape(chars[i][0])}-{re.escape(chars[i + 2][0])}")
            i += 3
        else:
            members.append(re.escape(chars[i][0]))
            i += 1
    joined = "".join(members)
    return f"[^/{joined}]" if negated else f"(?!/)[{joined}]"


def _brace_free_regex(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
        elif pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "[":
            end = _class_end(pattern, i)
            if end < 0:
                raise QueryError("a '[' is never closed (write \\[ for a literal bracket)")
            out.append(_class_regex(pattern, i, end))
            i = end + 1
        else:
            out.append({"*": "[^/]*", "?": "[^/]"}.get(c) or re.escape(c))
            i += 1
    return "".join(out)


def rooted_glob(pattern: str) -> str:
    """A pattern without a slash matches the file name anywhere (`*.py` is `**/*.py`)."""
    return pattern if "/" in pattern else "**/" + pattern


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Glob as git and editor users expect: `*` and `?` stay inside one path segment, `**/` spans
    directories, `[a-z]`/`[!a]` is one character of a class, `{a,b}` either alternative, a
    backslash escapes the next character, and a pattern without a slash matches the file name
    anywhere (`*.py`). A malformed pattern is a `QueryError` saying what to fix."""
    try:
        alternatives = [_brace_free_regex(p) for p in expand_braces(rooted_glob(pattern))]
        return re.compile("(?:" + "|".join(alternatives) + r")\Z")
    except QueryError as exc:
        raise QueryError(f"path_glob {pattern!r}: {exc}") from None
    except re.error as exc:  # a class the regex engine refuses, e.g. the range [z-a]
        raise QueryError(f"path_glob {pattern!r}: {exc.msg}") from None


def glob_match(pattern: str, path: str) -> bool:
    return glob_regex(pattern).match(path) is not None
