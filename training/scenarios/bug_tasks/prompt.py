"""What the model is given for a bug instance: the problem statement and the code involved.

The code involved is read from a run of FAIL_TO_PASS on the start state (`judge.failure_run`, short
tracebacks): every project function a traceback passes through (by file and line), then the
project functions the failing tests' own functions call by name (an assertion on a wrong value has
no frame inside the project). With the start state's spectrum (`spectrum.spectrum_run`: which
functions the failing tests ran and the passing ones did not), the functions are shown most
suspicious first, and the most suspicious ones no traceback named are added: the mutated helper
behind a decorator's wrapper frame, say. Each is shown whole, with its file, up to
`MAX_CODE_CHARS`; the answer format follows (`training.scenarios.edits`). The start state's run
costs one sandbox run per instance and doubles as a check that FAIL_TO_PASS really fails there; the
spectrum, one more.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from training.scenarios.bug_tasks.judge import PreparedInstance, is_source
from training.scenarios.bug_tasks.spectrum import Spectrum
from training.scenarios.edits import ANSWER_FORMAT, FunctionSite, functions_of, shown_sites

MAX_CODE_CHARS = 6_000
MAX_FUNCTIONS = 4
_FRAME = re.compile(r"^(\S+\.py):(\d+): in (\w+)", re.MULTILINE)


@dataclass(frozen=True)
class Shown:
    text: str
    """The prompt."""
    sites: dict[str, FunctionSite]
    """The functions shown, by qualified name and (when unique) bare name: what a rewrite may replace."""


@dataclass(frozen=True)
class _Def:
    path: str
    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef


def _definitions(prepared: PreparedInstance) -> list[_Def]:
    return [
        _Def(path, qualname, node)
        for path in sorted(p for p in prepared.start if is_source(prepared, p))
        for qualname, node in functions_of(prepared.start[path])
    ]


def _enclosing(defs: list[_Def], path: str, line: int) -> _Def | None:
    inside = [d for d in defs if d.path == path and d.node.lineno <= line <= (d.node.end_lineno or 0)]
    return inside[-1] if inside else None


def _called_names(source: str, line: int) -> list[str]:
    """The names a test function (the one holding `line`) uses, in order of first use."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    funcs = [
        n for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.lineno <= line <= (n.end_lineno or 0)
    ]  # fmt: skip
    if not funcs:
        return []
    names: list[str] = []
    for node in ast.walk(min(funcs, key=lambda n: (n.end_lineno or 0) - n.lineno)):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name and not name.startswith("__") and name not in names:
            names.append(name)
    return names


def _first_line(d: _Def) -> int:
    """Where the function's code object starts: its first decorator, else its `def`."""
    return min([d.node.lineno, *(x.lineno for x in d.node.decorator_list)])


def involved(prepared: PreparedInstance, output: str, spectrum: Spectrum | None = None) -> list[_Def]:
    """The project functions a FAIL_TO_PASS run's output involves, most direct first; with a
    `spectrum`, most suspicious first (ties keep that order), and the suspicious ones it missed added."""
    defs = _definitions(prepared)
    named = _named(prepared, defs, output)
    if spectrum is None or spectrum.total_failed == 0:
        return named[:MAX_FUNCTIONS]
    scores = {id(d): spectrum.score(d.path, _first_line(d)) for d in defs}
    suspects = [d for d in defs if scores[id(d)] > 0 and d not in named]
    ranked = sorted([*named, *suspects], key=lambda d: -scores[id(d)])  # stable: named ones first on ties
    return ranked[:MAX_FUNCTIONS]


def _named(prepared: PreparedInstance, defs: list[_Def], output: str) -> list[_Def]:
    """The functions a traceback passes through, then those the failing tests call by name."""
    chosen: list[_Def] = []
    frames = [(m.group(1), int(m.group(2))) for m in _FRAME.finditer(output)]
    for path, line in frames:
        if path in prepared.start and is_source(prepared, path):
            found = _enclosing(defs, path, line)
            if found is not None and found not in chosen:
                chosen.append(found)
    by_name: dict[str, list[_Def]] = {}
    for d in defs:
        by_name.setdefault(d.node.name, []).append(d)
    for path, line in frames:
        if path in prepared.start and not is_source(prepared, path):
            for name in _called_names(prepared.start[path], line):
                matches = by_name.get(name, [])
                if len(matches) == 1 and matches[0] not in chosen:
                    chosen.append(matches[0])
    return chosen


def bug_prompt(prepared: PreparedInstance, output: str, spectrum: Spectrum | None = None) -> Shown:
    """The prompt for `prepared`, from its start state's FAIL_TO_PASS `output` and `spectrum`."""
    parts = [f"Fix a bug in the repository {prepared.instance.repo}.", prepared.instance.problem_statement.strip()]
    sites: list[FunctionSite] = []
    budget = MAX_CODE_CHARS
    for d in involved(prepared, output, spectrum):
        lines = prepared.start[d.path].splitlines(keepends=True)
        code = "".join(lines[_first_line(d) - 1 : d.node.end_lineno])
        if len(code) > budget:
            continue
        budget -= len(code)
        parts.append(f"{d.path}, {d.qualname}:\n```python\n{code.rstrip()}\n```")
        sites.append(FunctionSite(d.path, d.qualname))
    parts.append(ANSWER_FORMAT)
    return Shown("\n\n".join(parts), shown_sites(sites))


__all__ = ["Shown", "bug_prompt", "involved"]
