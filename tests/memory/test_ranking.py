"""top_k selects by a sampled bound: it must agree with a full sort on every kind of score array."""

from __future__ import annotations

import re

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from memory.errors import QueryError
from memory.ranking import MAX_GLOB_ALTERNATIVES, expand_braces, glob_match, top_k


def _by_full_sort(scores: np.ndarray, k: int) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


@pytest.mark.parametrize("n", [0, 1, 9, 640, 641, 5000, 60_000])
@pytest.mark.parametrize("k", [1, 10, 100])
def test_top_k_equals_a_full_sort(n: int, k: int) -> None:
    rng = np.random.default_rng(n * 1000 + k)
    for scores in (
        rng.standard_normal(n).astype(np.float32),
        np.sort(rng.standard_normal(n))[::-1].copy(),  # best scores all at the front: the sample misses most
        rng.integers(0, 3, n).astype(np.float64),  # ties everywhere, the boundary inside a tie
        np.where(rng.random(n) < 0.99, -np.inf, rng.random(n)),  # filtered out: few finite scores
    ):
        assert top_k(scores, k).tolist() == _by_full_sort(scores, k)


def test_top_k_of_nothing_is_empty() -> None:
    assert top_k(np.zeros(5), 0).tolist() == []


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a/b.py", True),  # no slash: the name, anywhere
        ("src/*.py", "src/a/b.py", False),  # `*` stays in one directory
        ("src/**", "src/a/b.py", True),
        ("src/**/test_*.py", "src/test_a.py", True),
        ("src/{api,core}/*.py", "src/core/x.py", True),
        ("src/{api,core}/*.py", "src/web/x.py", False),
        ("*.{ts,tsx}", "web/app.tsx", True),
        ("{src/{a,b},lib}/x", "src/b/x", True),  # nested
        ("{src/{a,b},lib}/x", "lib/x", True),
        ("test_[a-m]*.py", "t/test_fetch.py", True),
        ("test_[a-m]*.py", "t/test_zip.py", False),
        ("[!_]*.py", "pkg/_private.py", False),
        ("[^_]*.py", "pkg/public.py", True),
        ("[]x]", "d/]", True),  # a leading ] is a member
        ("x[/]y", "x/y", False),  # a class never matches the separator
        ("[\\]a]", "d/]", True),  # an escaped ] is a member, the backslash is not
        ("[\\]a]", "d/\\", False),
        ("[a\\-c]", "d/b", False),  # an escaped - is no range
        ("[+--]", "d/,", True),  # a range ending in -, from + to - (no regex set operation)
        ("pages/[id].tsx", "pages/i.tsx", True),  # a class, as in git and editors
        ("pages/\\[id\\].tsx", "pages/[id].tsx", True),  # escaped: literal brackets
        ("pages/\\[id\\].tsx", "pages/i.tsx", False),
        ("\\{a,b\\}.txt", "d/{a,b}.txt", True),
        ("a+b(c).py", "a+b(c).py", True),  # regex characters are literal
    ],
)
@pytest.mark.filterwarnings("error::FutureWarning")  # re warns of `--`, `&&`, `~~`, `||` in a class
def test_glob_semantics(pattern: str, path: str, matches: bool) -> None:
    assert glob_match(pattern, path) is matches


def test_braces_expand_in_order_and_malformed_globs_say_what_to_fix() -> None:
    expanded = ["src/api/*.py", "src/api/*.ts", "src/core/*.py", "src/core/*.ts"]
    assert expand_braces("src/{api,core}/*.{py,ts}") == expanded
    assert expand_braces("[{]x") == ["[{]x"]  # a brace inside a class is a character
    for pattern, problem in [
        ("src/{a,b", "'{' is never closed"),
        ("x[ab", "'[' is never closed"),
        ("[z-a].py", "bad character range z-a"),
    ]:
        with pytest.raises(QueryError, match=re.escape(problem)):
            glob_match(pattern, "x")
    with pytest.raises(QueryError, match=f"over {MAX_GLOB_ALTERNATIVES} patterns"):
        glob_match("{a,b}" * 7, "x")


@pytest.mark.filterwarnings("error::FutureWarning")
@hypothesis.given(st.text(alphabet="ab/*?[]{},!^-\\.&~|", max_size=24))
def test_any_glob_is_a_pattern_or_a_query_error(pattern: str) -> None:
    """Whatever an agent writes: a pattern that matches, or an error it can act on, never a crash."""
    try:
        glob_match(pattern, "a/b.ab")
    except QueryError as exc:
        assert str(exc).startswith(f"path_glob {pattern!r}: ")
