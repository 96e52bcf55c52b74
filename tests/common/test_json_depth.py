"""The bracket scan every reader of hostile JSON asks first (common.json_depth)."""

from __future__ import annotations

import json

import pytest

from common.json_depth import nests_deeper_than


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('["[[[[[[", "{{{{"]', 1),  # brackets inside strings do not nest
        ('["\\"[[[", [[]]]', 3),  # nor after an escaped quote inside a string
        ("[[]] [[[]]]", 3),  # the deepest of several, not their sum
    ],
)
def test_the_scan_finds_the_deepest_nesting(text: str, depth: int) -> None:
    assert not nests_deeper_than(text, depth)
    assert nests_deeper_than(text, depth - 1) is (depth > 0)
    assert nests_deeper_than(text.encode(), depth - 1) is (depth > 0)


def test_a_text_too_deep_for_json_is_found_without_parsing_it() -> None:
    text = "[" * 200_000 + "]" * 200_000
    with pytest.raises(RecursionError):
        json.loads(text)
    assert nests_deeper_than(text, 100)
    assert not nests_deeper_than("[" * 100 + "]" * 100, 100)


def test_a_lone_surrogate_is_scanned_not_refused_by_the_encoder() -> None:
    assert not nests_deeper_than('["\ud800"]', 1)
