"""Plain values across the sandbox's wall: a strict, tagged JSON codec.

A verifier that judges a candidate by what it returns must receive values, not objects that
decide how they compare: an object whose `__eq__` is always true, a subclass of `int` with its own
`__eq__`, a list that lies about its length. `encode` accepts only the exact built-in types below,
recursively (a subclass is refused, however plain it looks), and `decode` rebuilds them on the
trusted side, where they compare as their types say.

    None, bool, int, str           as JSON
    float                          {"float": repr}        (nan, inf and -0.0 survive)
    list / tuple / set / frozenset {"list": [...]} ...    (sets sorted by their encoding)
    dict                           {"dict": [[k, v], ...]}
    bytes                          {"bytes": hex}

The same code encodes inside the sandbox: `SOURCE`, this module's text up to the marker below, is
run by the programs the verifiers build (standard library only).
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64


class NotPlain(ValueError):
    """A value that is not a plain built-in value (or nests too deep)."""


def _encode(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return {"float": repr(value)}
    if kind in (list, tuple, set, frozenset):
        items = [_encode(item, depth + 1) for item in value]
        if kind in (set, frozenset):
            items.sort(key=lambda item: json.dumps(item, sort_keys=True))
        return {kind.__name__: items}
    if kind is dict:
        return {"dict": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    raise NotPlain(f"a {kind.__module__}.{kind.__qualname__} is not a plain value")


def encode(value: Any) -> Any:
    """`value` as tagged JSON data; raises NotPlain for anything but the exact built-in types."""
    return _encode(value, 0)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        raise NotPlain("a list cannot be a set member or dict key")
    return value


def decode(data: Any, depth: int = 0) -> Any:
    """The value `encode` made `data` from; raises NotPlain for anything it could not have made."""
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    if data is None or type(data) in (bool, int, str):
        return data
    if type(data) is dict and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "float" and type(body) is str:
            try:
                return float(body)
            except ValueError:
                pass
        elif tag in ("list", "tuple") and type(body) is list:
            items = [decode(item, depth + 1) for item in body]
            return items if tag == "list" else tuple(items)
        elif tag in ("set", "frozenset") and type(body) is list:
            members = [_hashable(decode(item, depth + 1)) for item in body]
            try:
                return set(members) if tag == "set" else frozenset(members)
            except TypeError as exc:
                raise NotPlain(str(exc)) from None
        elif tag == "dict" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
            try:
                return {_hashable(decode(k, depth + 1)): decode(v, depth + 1) for k, v in body}
            except TypeError as exc:
                raise NotPlain(str(exc)) from None
        elif tag == "bytes" and type(body) is str:
            try:
                return bytes.fromhex(body)
            except ValueError:
                pass
    raise NotPlain(f"not an encoded plain value: {str(data)[:80]}")


# -- end of what runs in the sandbox --

# Host side only, below the sandbox's part: the sandbox has no `common`, and `pathlib` would cost every
# sandboxed program that runs the codec ~6 ms of imports (the fork-server preloads neither).
from pathlib import Path  # noqa: E402

from common.json_depth import nests_deeper_than  # noqa: E402

SOURCE = Path(__file__).read_text(encoding="utf-8").split("# -- end of what runs in the sandbox --")[0]
"""The codec's text, for programs that encode values inside the sandbox."""

MAX_JSON_DEPTH = 2 * MAX_DEPTH + 8
"""Brackets a line from the sandbox may nest: an encoded value takes two per level (a tag's object
and its list), and the frames around it (a results list, a result's object, a call's lists) a few."""


def parse_json(text: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON from a line a sandboxed program printed, which may be anything: raises NotPlain (a
    ValueError) for a malformed line or one nested deeper than `max_depth`, and nothing else.
    `json.loads` recurses once per bracket: a line of 200,000 of them raised RecursionError out of
    the verifier. So the nesting is measured first, without parsing."""
    if nests_deeper_than(text, max_depth):
        raise NotPlain(f"JSON nested deeper than {max_depth}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError, MemoryError) as exc:  # ValueError: also too many digits
        raise NotPlain(f"not well-formed JSON: {type(exc).__name__}") from None
