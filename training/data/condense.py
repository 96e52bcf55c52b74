"""Condensing an episode to the student's context: the tool results and user messages are cut to
what matters, the assistant's own turns are never touched (they are what is trained on).

Levels, tried one message at a time (largest first, the oldest of equal size first), the count
taken again after each cut, stopping as soon as the conversation fits:

1. by kind: test output keeps its failing test ids, tracebacks and summary line, not the progress
   dots, the passing tests or the session header; search results keep the hits the agent then
   opened (their path appears in a later call or in the final diff); a long file read keeps the
   regions a later turn edited or cited (a line of it appears in a later call, answer or diff),
   with a few lines around them. Each cut leaves a marker saying what was cut.
2. a head and a tail of what is left, of every message in turn, at two sizes.

Deterministic: the same conversation and limit give the same messages. A result that is a JSON
object (rlide's `run_tests`, `run_code`) is condensed inside its string fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from training.data.fit import StudentFit

CONTEXT_LINES = 3
"""Lines kept around a cited line of a file read."""
READ_MIN_LINES = 40
"""A tool result shorter than this is not cut as a file read (little to gain, much to lose)."""
CITE_MIN_CHARS = 8
"""A line shorter than this (`}`, `return x`) proves nothing by appearing later."""
GENERIC_CHARS = (3_000, 600)
"""The sizes a message is cut to (head and tail) once cutting by kind was not enough."""

PYTEST_SUMMARY = re.compile(r"^=+ .*\b(passed|failed|errors?|skipped|no tests ran|deselected)\b.*=+\s*$", re.M)
PYTEST_MARKERS = re.compile(r"^=+ (test session starts|FAILURES|ERRORS|short test summary info) =+\s*$", re.M)
PROGRESS = re.compile(r"^(\S+\.py\s*)?[.sxXFEp]+\s*(\[\s*\d+%\])?\s*$")
PASSING = re.compile(r"^\S.*\s(PASSED|SKIPPED|XFAIL|XPASS)(\s+\[\s*\d+%\])?\s*$")
"""A verbose run's passing test (also the tail of one whose head a tool's own truncation cut)."""
SESSION_HEADER = re.compile(
    r"^(platform |cachedir: |rootdir: |configfile: |testpaths: |plugins: |collect(ed|ing) |-- Docs: "
    r"|hypothesis profile |benchmark: |Using --randomly-seed)"
)
SEARCH_HEAD = re.compile(r"^\d+ results? for ")
SEARCH_HIT = re.compile(r"^\d+\. (?P<path>\S+?):\d+-\d+")
GREP_HIT = re.compile(r"^(?P<path>[^\s:]+\.[A-Za-z0-9]+):\d+[:-]")
LINE_NUMBER = re.compile(r"^\s*\d+[\t:|]\s?")


@dataclass(frozen=True)
class Fitted:
    """A conversation as it trains on the student, or why it cannot."""

    messages: list[dict[str, Any]] | None
    """The messages, condensed where they had to be (None: set aside)."""
    tokens: int
    """Its length in tokens (condensed; the shortest reached when set aside)."""
    original_tokens: int
    condensed: int = 0
    """How many messages were cut."""
    reason: str | None = None
    """Why it was set aside."""


def fit_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, fit: StudentFit, *, frozen: int = 0
) -> Fitted:
    """`messages` condensed until they fit `fit` (see the module's levels). The first `frozen`
    messages are never cut (a DPO prompt both sides share); nor are assistant turns."""
    original = fit.count(messages, tools)
    if original <= fit.max_tokens:
        return Fitted(messages, original, original)
    current = [dict(m) for m in messages]
    cut: set[int] = set()
    tokens = original
    later = _later_texts(current)
    candidates = [
        i for i, m in enumerate(current) if i >= frozen and m.get("role") in ("tool", "user")
        and isinstance(m.get("content"), str)
    ]  # fmt: skip
    levels: list[Callable[[int, str], str]] = [
        lambda i, text: _by_kind(text, later[i]) if current[i].get("role") == "tool" else text,
        *[(lambda i, text, size=size: _head_tail(text, size)) for size in GENERIC_CHARS],
    ]
    for level in levels:
        for i in sorted(candidates, key=lambda i: (-len(current[i]["content"]), i)):
            text = current[i]["content"]
            shorter = _in_json(text, lambda s, i=i, level=level: level(i, s))  # type: ignore[misc]
            if len(shorter) >= len(text):
                continue
            current[i]["content"] = shorter
            cut.add(i)
            tokens = fit.count(current, tools)
            if tokens <= fit.max_tokens:
                return Fitted(current, tokens, original, len(cut))
    reason = (
        f"{original} tokens, longer than max_seq_len={fit.max_tokens} of {fit.model} even condensed ({tokens}"
        " with its tool results and user messages cut): raise max_seq_len or split the episode"
    )
    return Fitted(None, tokens, original, len(cut), reason)


def _later_texts(messages: list[dict[str, Any]]) -> list[str]:
    """For each message, what the assistant wrote after it (answers, tool-call arguments, the
    final diff): where a path opened or a line edited or cited shows up."""
    out = [""] * len(messages)
    acc: list[str] = []
    for i in range(len(messages) - 1, -1, -1):
        out[i] = "\n".join(reversed(acc))
        message = messages[i]
        if message.get("role") == "assistant":
            acc.append(str(message.get("content") or ""))
            for call in message.get("tool_calls") or []:
                arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
                acc.append(arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False))
    return out


def _in_json(text: str, cut: Callable[[str], str]) -> str:
    """`cut` applied to `text`, or, when it is a JSON object, to each multi-line string inside it."""
    if not text.lstrip().startswith("{"):
        return cut(text)
    try:
        data = json.loads(text)
    except ValueError:
        return cut(text)

    def walk(value: Any) -> Any:
        if isinstance(value, str) and "\n" in value:
            return cut(value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    condensed = walk(data)
    return text if condensed == data else json.dumps(condensed, ensure_ascii=False, indent=2)


def _by_kind(text: str, later: str) -> str:
    if PYTEST_SUMMARY.search(text) or PYTEST_MARKERS.search(text):
        return condense_test_output(text)
    lines = text.split("\n")
    if SEARCH_HEAD.match(text) or sum(1 for line in lines if GREP_HIT.match(line)) >= len(lines) // 2 > 0:
        return condense_search(text, later)
    return condense_file_read(text, later)


def condense_test_output(text: str) -> str:
    """pytest's output without its progress lines, passing tests and session header: the failing
    test ids, their tracebacks, the short summary and the summary line stay."""
    kept: list[str] = []
    dropped = 0
    for line in text.split("\n"):
        if line.strip() and (PROGRESS.match(line) or PASSING.match(line) or SESSION_HEADER.match(line)):
            dropped += 1
        else:
            kept.append(line)
    if not dropped:
        return text
    return f"[... {dropped} progress, passing-test and header lines cut]\n" + "\n".join(kept)


def condense_search(text: str, later: str) -> str:
    """Search results with only the hits whose file the agent opened later (rlide's `search_code`
    blocks, or grep's `path:line:` lines)."""
    if SEARCH_HEAD.match(text):
        head, *blocks = text.split("\n\n")
        hits = [(m.group("path") if (m := SEARCH_HIT.match(b)) else None, b) for b in blocks]
        joiner = "\n\n"
    else:
        head, joiner = "", "\n"
        hits = [(m.group("path") if (m := GREP_HIT.match(line)) else None, line) for line in text.split("\n")]
    kept = [block for path, block in hits if path is None or path in later]
    dropped = len(hits) - len(kept)
    if not dropped:
        return text
    marker = f"[... {dropped} hits cut: their files were not opened later]"
    return joiner.join(part for part in (head, *kept, marker) if part)


def condense_file_read(text: str, later: str) -> str:
    """A long read cut to the lines a later turn edited or cited, with CONTEXT_LINES around each."""
    lines = text.split("\n")
    if len(lines) < READ_MIN_LINES:
        return text
    keep = [False] * len(lines)
    for n, line in enumerate(lines):
        code = LINE_NUMBER.sub("", line, count=1).strip()
        if len(code) >= CITE_MIN_CHARS and code in later:
            for k in range(max(0, n - CONTEXT_LINES), min(len(lines), n + CONTEXT_LINES + 1)):
                keep[k] = True
    out: list[str] = []
    n = 0
    while n < len(lines):
        if keep[n]:
            out.append(lines[n])
            n += 1
            continue
        start = n
        while n < len(lines) and not keep[n]:
            n += 1
        out.append(f"[... lines {start + 1}-{n} cut: not edited or cited later]")
    return "\n".join(out)


def _head_tail(text: str, size: int) -> str:
    if len(text) <= size:
        return text
    half = size // 2
    head, tail = text[:half], text[-half:]
    head = head[: head.rfind("\n") + 1] or head  # whole lines where there are any
    tail = tail[tail.find("\n") + 1 :] or tail
    cut = text.count("\n", len(head), len(text) - len(tail))
    return f"{head}[... {len(text) - len(head) - len(tail)} characters ({cut} lines) cut to fit the student]\n{tail}"
