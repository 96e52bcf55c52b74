"""What a student re-solving an ended episode is shown: the functions the episode's own change touched.

Whole files are too much for a small model to read and to answer against (it cannot count a
diff's `@@` lines either). The code involved is what the agent's change touched: the functions
whose lines differ between the start state and the end state (`difflib` for the lines, `ast` for
the functions), each shown whole as it is at the start, with its file and qualified name, so an
answer can rewrite it whole or copy lines of it into a SEARCH/REPLACE block (`edits.apply_answer`,
the reader bug instances use too). A change outside any function (a constant, an import, a
non-Python file) and a function too large for the budget are shown as a bounded excerpt of the
start file around the changed lines. Test files the judge restores (the verifier's trusted files)
are never shown: an edit there counts for nothing.

A function the task's own text already shows whole (a bug instance's prompt does, and so does
an agent's task that pasted it) is not shown twice, and neither is the answer format: the replay
reads as the task did, with the failing tests and the files to change added.

The completion budget is sized from what is shown: rewriting every shown function must fit, with
headroom for fences and markers.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from training.scenarios.edits import ANSWER_FORMAT, FunctionSite, functions_of, shown_sites

PROMPT_CODE_CHARS = 6_000
"""Code shown in all (functions and excerpts), as a bug instance's prompt allows."""
PROMPT_TESTS = 10
EXCERPT_CONTEXT = 4
"""Lines shown on each side of a change outside any function."""
EXCERPT_CHARS = 2_000
CHARS_PER_TOKEN = 3
"""Code takes 3-4 characters a token under a BPE tokenizer; the lower figure sizes the budget up."""
HEADROOM_TOKENS = 96
"""Fences, path lines, SEARCH/REPLACE markers and a sentence around the code."""
MIN_TOKENS, MAX_TOKENS = 128, 4_096


@dataclass(frozen=True)
class ReplayPrompt:
    text: str
    sites: dict[str, FunctionSite]
    """The functions shown, by qualified name and (when unique) bare name: what a rewrite may replace."""
    excerpts: tuple[str, ...]
    """Files shown as excerpts: a path-less SEARCH/REPLACE block may edit them too."""
    max_tokens: int | None
    """A completion budget that fits a rewrite of everything shown; None when no code is shown."""


@dataclass
class _Function:
    qualname: str
    code: str
    """As at the start, decorators and all."""
    changed: list[tuple[int, int]]
    """Its changed line ranges ([first, last) indexes of the start file)."""


def _touched(before: str, after: str, python: bool) -> tuple[list[_Function], list[tuple[int, int]]]:
    """What of `before` the change to `after` touched: the functions, in file order, and the changed
    line ranges inside no function."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    spans = []
    for qualname, node in functions_of(before) if python else []:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        spans.append((qualname, first, node.end_lineno or node.lineno))
    functions: dict[str, _Function] = {}
    outside: list[tuple[int, int]] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag == "equal":
            continue
        changed = (i1, max(i2, i1 + 1))
        # An insertion right before or after a function may be a new function: outside.
        inside = [
            (name, s, e) for name, s, e in spans if (s < i1 < e if tag == "insert" else s <= i1 and i2 <= e)
        ]  # fmt: skip
        if not inside:
            outside.append(changed)
            continue
        name, s, e = inside[0]
        functions.setdefault(name, _Function(name, "".join(old[s:e]), [])).changed.append(changed)
    return list(functions.values()), outside


def _excerpt(text: str, ranges: list[tuple[int, int]], limit: int) -> tuple[str, int, int] | None:
    """The lines around `ranges` (merged, with context), cut to `limit` characters: (code, first
    line number, last line number), or None when nothing fits."""
    lines = text.splitlines(keepends=True)
    first = max(0, min(r[0] for r in ranges) - EXCERPT_CONTEXT)
    last = min(len(lines), max(r[1] for r in ranges) + EXCERPT_CONTEXT)
    code = ""
    for number in range(first, last):
        if len(code) + len(lines[number]) > limit:
            last = number
            break
        code += lines[number]
    return (code, first + 1, last) if code.strip() else None


def replay_prompt(
    task: str,
    failing: list[str],
    start: Mapping[str, str | None],
    end: Mapping[str, str | None],
    trusted: Collection[str],
) -> ReplayPrompt:
    """The prompt of a replay: the task, the tests that fail, and the code the episode's change
    touched. `start` and `end` hold each changed path's text at the start and at the end (None:
    absent, or not known); `trusted` are the files the judge restores."""
    parts = [task]
    more = f" and {len(failing) - PROMPT_TESTS} more" if len(failing) > PROMPT_TESTS else ""
    parts.append("These tests fail: " + ", ".join(failing[:PROMPT_TESTS]) + more)
    changed = sorted(path for path in start.keys() | end.keys() if path not in trusted)
    budget = PROMPT_CODE_CHARS
    sites: list[FunctionSite] = []
    excerpts: list[str] = []
    shown_chars = 0
    for path in changed:
        before, after = start.get(path), end.get(path)
        if before is None or after is None:
            continue
        functions, outside = _touched(before, after, path.endswith(".py"))
        for function in functions:
            if len(function.code) > budget:  # shown as an excerpt around its changed lines instead
                outside += function.changed
                continue
            shown_chars += len(function.code)
            sites.append(FunctionSite(path, function.qualname))
            if function.code.rstrip() in task:  # the task shows it already (a bug instance's prompt does)
                continue
            budget -= len(function.code)
            parts.append(f"{path}, {function.qualname}:\n```python\n{function.code.rstrip()}\n```")
        found = _excerpt(before, outside, min(budget, EXCERPT_CHARS)) if outside else None
        if found is not None:
            code, first, last = found
            budget -= len(code)
            shown_chars += len(code)
            parts.append(f"{path}, lines {first}-{last}:\n```\n{code.rstrip()}\n```")
            excerpts.append(path)
    if changed:
        parts.append("Files to change: " + ", ".join(changed))
    if ANSWER_FORMAT not in task:
        parts.append(ANSWER_FORMAT)
    if any(start.get(path) is None and end.get(path) is not None for path in changed):
        parts.append("To create a file, answer with a unified diff in a ```diff block instead.")
    max_tokens = None
    if shown_chars:
        max_tokens = min(MAX_TOKENS, max(MIN_TOKENS, math.ceil(shown_chars / CHARS_PER_TOKEN) + HEADROOM_TOKENS))
    return ReplayPrompt("\n\n".join(parts), shown_sites(sites), tuple(excerpts), max_tokens)


__all__ = ["ReplayPrompt", "replay_prompt"]
