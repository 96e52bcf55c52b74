"""`json_text` (the episode log's JSON columns) takes orjson's fast path only where its text
decodes to what the standard library's encoder would write."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from episodes.codec import decode_choice, encode_choice
from episodes.rows import json_text

STDLIB = json.JSONEncoder(ensure_ascii=True, default=str)

json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(codec=None, exclude_categories=()), max_size=12),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=6), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(json_like)
def test_it_decodes_to_what_the_standard_encoder_writes(value: Any) -> None:
    """Whichever path it takes: NaN and ±Infinity (orjson writes null), lone surrogates and big
    integers (orjson refuses them) come back as the standard library would give them."""
    assert STDLIB.encode(json.loads(json_text(value))) == STDLIB.encode(value)


def test_a_non_finite_logprob_survives_and_a_plain_turn_takes_the_fast_path() -> None:
    entry = {"token": "token_id:7", "logprob": -math.inf, "bytes": None, "top_logprobs": []}
    choice = encode_choice(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "é", "refusal": None},
            "logprobs": {"content": [entry, {**entry, "logprob": -0.1 + 1e-17}], "refusal": None},
        }
    )
    stored = json_text(choice)
    assert "-Infinity" in stored  # orjson alone would have written null
    decoded = decode_choice(json.loads(stored))
    assert [t.logprob for t in decoded.logprobs.content] == [-math.inf, -0.1 + 1e-17]
    finite = json_text({**choice, "__choice__": {**choice["__choice__"], "logprobs": None}})
    assert '"é"' in finite  # orjson's UTF-8: the standard encoder would have escaped it
    assert json.loads(finite)["__choice__"]["message"]["content"] == "é"
    assert json_text(list(range(5))) == "[0,1,2,3,4]"
