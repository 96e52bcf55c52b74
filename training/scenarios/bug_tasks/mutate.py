"""Small mutations of a Python function, SWE-smith style, each a text edit of its source file.

Kinds: `off_by_one` (an integer literal in a comparison, a slice, a `range` or an index moved by one),
`swap_compare` (`<`/`<=`, `>`/`>=`, `==`/`!=`), `swap_operator` (`+`/`-`, `*`/`//`... binary
operators), `negate_condition` (an `if`/`while` test wrapped in `not (...)`), `drop_return_branch`
(an `if` whose body is a single `return` removed), `wrong_default` (a parameter's integer or bool
default changed). A mutation that does not parse is never offered.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

_COMPARE_SWAP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
_BINOP_SWAP = {ast.Add: "-", ast.Sub: "+", ast.Mult: "//", ast.FloorDiv: "*", ast.Mod: "//", ast.BitAnd: "|"}


@dataclass(frozen=True)
class Mutation:
    kind: str
    start: int
    """Character offsets in the file's text."""
    end: int
    replacement: str

    def apply(self, text: str) -> str:
        return text[: self.start] + self.replacement + text[self.end :]


class _Offsets:
    """ast positions (line, UTF-8 byte column) to character offsets of the text."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def at(self, line: int, col: int) -> int:
        return self.starts[line - 1] + len(self.lines[line - 1].encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.at(node.lineno, node.col_offset), self.at(node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]


def mutations(text: str, func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[Mutation]:
    """Every mutation of `func` (a node of `text`'s tree) whose result still parses, in source order."""
    pos = _Offsets(text)
    found: list[Mutation] = []
    for default in [*func.args.defaults, *(d for d in func.args.kw_defaults if d is not None)]:
        if isinstance(default, ast.Constant) and isinstance(default.value, bool):
            found.append(Mutation("wrong_default", *pos.span(default), repr(not default.value)))
        elif isinstance(default, ast.Constant) and isinstance(default.value, int):
            found.append(Mutation("wrong_default", *pos.span(default), repr(default.value + 1)))
    for node in ast.walk(func):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left_end = pos.at(node.left.end_lineno or 0, node.left.end_col_offset or 0)
            right_start = pos.span(node.comparators[0])[0]
            op = text[left_end:right_start].strip()
            if op in _COMPARE_SWAP:
                inner = text[left_end:right_start]
                found.append(Mutation("swap_compare", left_end, right_start, inner.replace(op, _COMPARE_SWAP[op], 1)))
        if (
            isinstance(node, ast.BinOp)
            and type(node.op) in _BINOP_SWAP
            and not isinstance(node.left, ast.Constant | ast.JoinedStr)
        ):
            left_end = pos.at(node.left.end_lineno or 0, node.left.end_col_offset or 0)
            right_start = pos.span(node.right)[0]
            inner = text[left_end:right_start]
            op = inner.strip().strip("()").strip()
            if op and len(op) <= 2:
                found.append(
                    Mutation("swap_operator", left_end, right_start, inner.replace(op, _BINOP_SWAP[type(node.op)], 1))
                )
        if isinstance(node, ast.Compare | ast.Slice | ast.Subscript | ast.Call):
            found += _off_by_one(node, pos)
        if isinstance(node, ast.If | ast.While) and not isinstance(node.test, ast.Constant):
            start, end = pos.span(node.test)
            found.append(Mutation("negate_condition", start, end, f"not ({text[start:end]})"))
        if (
            isinstance(node, ast.If)
            and not node.orelse
            and len(node.body) == 1
            and isinstance(node.body[0], ast.Return)
        ):
            found += _drop(node, func, pos)
    kept = []
    seen: set[tuple[int, int, str]] = set()
    for m in sorted(found, key=lambda m: (m.start, m.end, m.kind, m.replacement)):
        key = (m.start, m.end, m.replacement)
        if key in seen or text[m.start : m.end] == m.replacement:
            continue
        seen.add(key)
        try:
            ast.parse(m.apply(text))
        except SyntaxError:
            continue
        kept.append(m)
    return kept


def _off_by_one(node: ast.AST, pos: _Offsets) -> list[Mutation]:
    if isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and node.func.id == "range"):
            return []
        targets: list[ast.AST] = list(node.args)
    elif isinstance(node, ast.Compare):
        targets = [node.left, *node.comparators]
    elif isinstance(node, ast.Slice):
        targets = [part for part in (node.lower, node.upper) if part is not None]
    else:
        assert isinstance(node, ast.Subscript)
        targets = [node.slice]
    out = []
    for target in targets:
        if isinstance(target, ast.Constant) and type(target.value) is int:
            out.append(Mutation("off_by_one", *pos.span(target), repr(target.value + 1)))
        elif (
            isinstance(target, ast.UnaryOp)
            and isinstance(target.op, ast.USub)
            and isinstance(target.operand, ast.Constant)
        ):
            value = target.operand.value
            if type(value) is int:
                out.append(Mutation("off_by_one", *pos.span(target), repr(-value + 1)))
    return out


def _drop(node: ast.If, func: ast.AST, pos: _Offsets) -> list[Mutation]:
    """Remove the `if` statement's lines, when its block keeps another statement."""
    for parent in ast.walk(func):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if (
                isinstance(block, list)
                and node in block
                and len(block) > 1
                and node.lineno != getattr(parent, "lineno", 0)
            ):
                start = pos.starts[node.lineno - 1]
                end = pos.starts[node.end_lineno or node.lineno]
                return [Mutation("drop_return_branch", start, end, "")]
    return []


__all__ = ["Mutation", "mutations"]
