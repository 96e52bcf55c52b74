"""Long strings in a step's arguments, stored once per content in table `blobs`.

An agent calls `run_tests` and `run_code` again and again with the same workspace files (up to
16 MB a call); stored inline, every call wrote them all again. `split` takes each string of at
least `BLOB_MIN_CHARS` out of the (already redacted) arguments, leaving its sha256 in its place
and its path in `refs`; the step row keeps the refs, the text goes into `blobs` keyed by its hash
(an `INSERT` that does nothing when the text is there already). `join` puts the texts back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

BLOB_MIN_CHARS = 1024
"""Shorter strings stay inline: a ref (its path and a 64-character hash) would be most of their size."""

Path = list[str | int]
"""Where a string sits in the arguments: dict keys and list indices from the top."""


@dataclass
class SplitArguments:
    arguments: Any
    """The arguments with each long string replaced by its sha256."""
    refs: list[tuple[Path, str]] = field(default_factory=list)
    blobs: dict[str, str] = field(default_factory=dict)
    """sha256 -> text, for the `blobs` table."""


def split(arguments: Any) -> SplitArguments:
    out = SplitArguments(None)
    out.arguments = _take(arguments, [], out)
    return out


def _take(value: Any, path: Path, out: SplitArguments) -> Any:
    if isinstance(value, str) and len(value) >= BLOB_MIN_CHARS:
        # surrogatepass: a lone surrogate (valid in JSON) still hashes; the text column keeps it escaped.
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
        out.refs.append((path, digest))
        out.blobs[digest] = value
        return digest
    if isinstance(value, dict):
        return {key: _take(item, [*path, key], out) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_take(item, [*path, i], out) for i, item in enumerate(value)]
    return value


def join(arguments: Any, refs: Iterable[Sequence[Any]], blobs: Mapping[str, str]) -> Any:
    """`arguments` as they were before `split`, given `split`'s refs (as pairs or, read back from
    JSON, two-item lists) and the texts they name; a `KeyError` when a text is missing. Changes
    `arguments` in place (a value freshly decoded from its row) and returns it."""
    for path, digest in refs:
        if not path:
            return blobs[digest]
        container = arguments
        for key in path[:-1]:
            container = container[key]
        container[path[-1]] = blobs[digest]
    return arguments
