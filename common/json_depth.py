"""How deeply a JSON text nests, measured without parsing it.

Python's `json` recurses once per bracket, so a hostile text of 100,000 brackets raises
RecursionError out of whatever parses it (a verifier reading a sandbox's output, a server reading a
request). Every reader of text from an untrusted side asks `nests_deeper_than` first; the scan is
one regular-expression pass that drops strings (brackets inside them do not nest) and one over the
brackets left.
"""

from __future__ import annotations

import re

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nests_deeper_than(text: bytes | str, limit: int) -> bool:
    """Whether the JSON text opens more than `limit` arrays/objects inside each other."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if brackets.count(b"[") + brackets.count(b"{") <= limit:
        return False  # the common case: too few brackets to nest that deep, whatever their order
    depth = 0
    for byte in brackets:
        depth += 1 if byte in b"[{" else -1
        if depth > limit:
            return True
    return False
