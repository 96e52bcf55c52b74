"""A model's answer as a change to files: search/replace blocks, whole-function rewrites, or a diff.

A 0.5B model cannot reliably count the `@@` lines of a unified diff; it can copy a few lines and
write new ones, or write a whole function again. Three forms are read, in this order:

1. **Search/replace blocks** (aider's form)::

       path/to/file.py
       <<<<<<< SEARCH
       lines copied exactly from the file
       =======
       the lines that replace them
       >>>>>>> REPLACE

   The path line is optional when the search text occurs in exactly one of the files shown. The
   search text must occur exactly once in its file (trailing spaces aside); blocks apply in order.
2. **Whole-function rewrites**: ```python blocks holding one or more `def` (or `async def`) at
   their top level, each named like a function of the code shown; each replaces that function
   (decorators and all), indented as the original was (a method written at column 0 is fine).
3. **A unified diff** in a ```diff block (`envpool.verifiers.patches`, the one diff reader).

Anything else, or an edit that does not apply, is `EditError` with a line saying why: the answer
changes nothing (a verifier scores it as the start state).
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envpool.verifiers.patches import PatchError, apply_patch, holds_a_diff

_BLOCK = re.compile(  # [a path line (no spaces)] [a fence line] SEARCH ... ======= ... REPLACE
    r"(?:^[`*]*([^\s<>=`*]+)[`*]*[ \t]*\n)?(?:```[^\n]*\n)?"
    r"<<<<<<< ?SEARCH[ \t]*\n(.*?)^=======[ \t]*\n(.*?)^>>>>>>> ?REPLACE[ \t]*$",
    re.DOTALL | re.MULTILINE,
)
_PYTHON = re.compile(r"```(?:python|py)[ \t]*\n(.*?)```", re.DOTALL)
ANSWER_FORMAT = """Answer with the fix only, in one of these forms:

1. One or more SEARCH/REPLACE blocks: the file's path on its own line, then
<<<<<<< SEARCH
(the lines to change, copied exactly from the file: only as many as make them unique)
=======
(the lines that replace them)
>>>>>>> REPLACE

2. The whole corrected function in a ```python block (same name; one function per `def`)."""
"""What a prompt that shows functions (a bug instance, a replay) says about the answer."""


class EditError(ValueError):
    """The answer holds no change that applies; the message says why."""


@dataclass(frozen=True)
class FunctionSite:
    """Where a function shown to the model lives: its file and its qualified name (Class.method)."""

    path: str
    qualname: str


def extract_patch(completion: str) -> str | None:
    """The unified diff of a completion: a fenced diff block, or the text if it is a diff; else None."""
    match = re.search(r"```(?:diff|patch)?\n(.*?)```", completion, re.DOTALL)
    text = match.group(1) if match else completion
    return text if holds_a_diff(text) else None


def apply_answer(
    files: Mapping[str, str],
    answer: str,
    shown: Mapping[str, FunctionSite],
    excerpts: Sequence[str] = (),
) -> dict[str, str]:
    """`files` with the answer's edits applied (a new dict). `shown` maps the names of the functions
    the prompt showed (bare and qualified) to where they are; their files and the files shown as
    `excerpts` are those a path-less search/replace block may edit."""
    if "<<<<<<<" in answer:
        return _search_replace(files, answer, sorted({site.path for site in shown.values()} | set(excerpts)))
    patch = extract_patch(answer)
    if patch is not None:
        try:
            return apply_patch(files, patch).files
        except PatchError as exc:
            raise EditError(f"the diff does not apply: {exc}") from exc
    blocks = _PYTHON.findall(answer) or ([answer] if re.match(r"\s*(async\s+)?def ", answer) else [])
    if not blocks:
        raise EditError(
            "no edit found: answer with SEARCH/REPLACE blocks, a ```python block rewriting a whole function,"
            " or a ```diff block"
        )
    out = dict(files)
    for block in blocks:
        out = _rewrite_functions(out, block, shown)
    return out


def _search_replace(files: Mapping[str, str], answer: str, shown_paths: list[str]) -> dict[str, str]:
    out = dict(files)
    blocks = list(_BLOCK.finditer(answer))
    if not blocks:
        raise EditError("a SEARCH/REPLACE block is not closed: write <<<<<<< SEARCH, =======, >>>>>>> REPLACE lines")
    for number, match in enumerate(blocks, start=1):
        path, search, replace = match.group(1), match.group(2), match.group(3)
        if not search.strip():
            raise EditError(f"block {number}: the SEARCH part is empty: copy the lines to replace from the file")
        candidates = [path] if path else [p for p in shown_paths if find_lines(out.get(p, ""), search) is not None]
        if path and path not in out:
            raise EditError(f"block {number}: there is no file {path!r}")
        if len(candidates) != 1:
            where = "none of the files shown" if not candidates else ", ".join(candidates)
            raise EditError(f"block {number}: the SEARCH text is in {where}: put the file's path on the line before it")
        target = candidates[0]
        span = find_lines(out[target], search)
        if span is None:
            raise EditError(f"block {number}: the SEARCH text is not in {target} exactly once: copy it exactly")
        start, end = span
        out[target] = out[target][:start] + replace + out[target][end:]
    return out


def find_lines(text: str, search: str) -> tuple[int, int] | None:
    """Where `search` (whole lines) occurs exactly once in `text`, trailing spaces aside, or None."""
    lines = text.splitlines(keepends=True)
    wanted = [line.rstrip() for line in search.splitlines()]
    found = [
        i for i in range(len(lines) - len(wanted) + 1)
        if all(lines[i + k].rstrip() == wanted[k] for k in range(len(wanted)))
    ]  # fmt: skip
    if len(found) != 1:
        return None
    start = sum(len(line) for line in lines[: found[0]])
    return start, start + sum(len(line) for line in lines[found[0] : found[0] + len(wanted)])


def _rewrite_functions(files: dict[str, str], block: str, shown: Mapping[str, FunctionSite]) -> dict[str, str]:
    code = textwrap.dedent(block)
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise EditError(f"the ```python block does not parse: {exc.msg} (line {exc.lineno})") from exc
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not defs:
        raise EditError("the ```python block defines no function at its top level")
    lines = code.splitlines(keepends=True)
    out = dict(files)
    for node in defs:
        site = shown.get(node.name)
        if site is None:
            names = ", ".join(sorted({s.qualname for s in shown.values()})) or "none"
            raise EditError(f"{node.name}() is not a function shown in the prompt (shown: {names})")
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        assert node.end_lineno is not None
        out[site.path] = _replace_function(out[site.path], site, "".join(lines[first - 1 : node.end_lineno]))
    return out


def _replace_function(source: str, site: FunctionSite, new: str) -> str:
    node = find_function(source, site.qualname)
    if node is None:
        raise EditError(f"{site.qualname} is no longer in {site.path}")
    assert node.end_lineno is not None
    lines = source.splitlines(keepends=True)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    indent = lines[node.lineno - 1][: node.col_offset]
    body = textwrap.indent(textwrap.dedent(new), indent, lambda line: bool(line.strip()))
    if not body.endswith("\n"):
        body += "\n"
    return "".join(lines[: first - 1]) + body + "".join(lines[node.end_lineno :])


def functions_of(source: str) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The functions of `source` a rewrite can replace, by qualified name: top-level functions and
    the methods of top-level classes, in source order; none when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((node.name, node))
        elif isinstance(node, ast.ClassDef):
            found += [
                (f"{node.name}.{item.name}", item)
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
    return found


def shown_sites(sites: Sequence[FunctionSite]) -> dict[str, FunctionSite]:
    """The names a rewrite may use for `sites`: each qualified name, and its bare name when no other
    site shares it."""
    out = {site.qualname: site for site in sites}
    bare: dict[str, list[FunctionSite]] = {}
    for site in sites:
        bare.setdefault(site.qualname.rsplit(".", 1)[-1], []).append(site)
    out.update({name: found[0] for name, found in bare.items() if len(found) == 1 and name not in out})
    return out


def find_function(source: str, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function `qualname` (a top-level name, or Class.method) of `source`, or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    body: list[ast.stmt] = tree.body
    *outer, name = qualname.split(".")
    for part in outer:
        owner = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if owner is None:
            return None
        body = owner.body
    return next((n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name), None)


__all__ = [
    "ANSWER_FORMAT",
    "EditError",
    "FunctionSite",
    "apply_answer",
    "extract_patch",
    "find_function",
    "find_lines",
    "functions_of",
    "shown_sites",
]
