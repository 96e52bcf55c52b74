"""JSON Schema clean-up for published tool schemas, and argument errors a model can act on.

Pydantic emits `$defs` + `$ref` for nested models; several IDE hosts' validators do not resolve
references, so every published schema is inlined. rlide's models are not recursive.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

MAX_DEPTH = 32


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    defs: dict[str, Any] = schema.get("$defs", {})

    def resolve(node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ValueError("schema nests too deeply (recursive model?); rlide publishes inlined schemas only")
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = resolve(defs[ref.removeprefix("#/$defs/")], depth + 1)
                siblings = {k: resolve(v, depth + 1) for k, v in node.items() if k != "$ref"}
                return {**target, **siblings}
            return {k: resolve(v, depth + 1) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(item, depth + 1) for item in node]
        return node

    result: dict[str, Any] = resolve(schema, 0)
    return result


GIVEN_CHARS = 80
"""How much of a refused value an argument error quotes: enough to recognise it, never a page."""


def argument_problems(exc: ValidationError, heading: str) -> str:
    """`heading`, then `exc` as one line per bad argument: which argument, what was expected, and
    what was given, cut to `GIVEN_CHARS` (pydantic's own text is a page of nested union branches
    and documentation links)."""
    lines: dict[str, str] = {}
    for error in exc.errors(include_url=False):
        name = ".".join(str(part) for part in error["loc"]) or "(the arguments)"
        if name in lines:
            continue  # a union argument fails once per branch: the first says enough
        if error["type"] in ("missing", "missing_argument"):
            lines[name] = f"{name}: required, but not given"
        elif error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            lines[name] = f"{name}: unexpected, not an argument this takes"
        else:
            lines[name] = f"{name}: {error['msg'][:200]}; got {_given(error.get('input'))}"
    return f"{heading}:\n" + "\n".join(lines.values())


def _given(value: Any) -> str:
    text = repr(value)
    if len(text) <= GIVEN_CHARS:
        return text
    return f"{text[:GIVEN_CHARS]}... ({len(text)} characters)"
