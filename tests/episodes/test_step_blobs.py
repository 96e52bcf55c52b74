"""`codec.split_blobs` and `join_blobs` are inverses through the JSON the log stores."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import hypothesis
from hypothesis import strategies as st

from episodes.codec import BLOB_MIN_CHARS
from episodes.codec import join_blobs as join
from episodes.codec import split_blobs as split

_long_texts = st.builds(lambda piece, n: piece * n, st.text(min_size=1, max_size=4), st.integers(BLOB_MIN_CHARS, 1300))
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6) | _long_texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [s for item in items for s in _strings(item)]


@hypothesis.given(_values)
def test_join_undoes_split_through_json(value: Any) -> None:
    parts = split(value)
    stored = json.loads(json.dumps(parts.arguments))
    refs = json.loads(json.dumps(parts.refs))
    assert join(stored, refs, parts.blobs) == value
    assert all(len(s) < BLOB_MIN_CHARS for s in _strings(parts.arguments))  # only digests are left
    for digest, text in parts.blobs.items():
        assert hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest() == digest
    assert len(parts.refs) == sum(len(s) >= BLOB_MIN_CHARS for s in _strings(value))
