"""Exact storage of conversations that mix chat messages with OpenAI `Choice` objects.

ART's RL path needs assistant turns as `openai.types.chat.chat_completion.Choice` objects carrying
per-token logprobs; a plain dict turn is silently treated as a prompt message and never trained
on. A pydantic JSON round-trip (`Trajectory.model_dump_json` then `model_validate_json`) turns
every `Choice` into a dict, so this module tags them explicitly:

    message  -> {"role": ..., ...}                   (unchanged)
    Choice   -> {"__choice__": Choice.model_dump()}

`decode_item(encode_item(c)) == c` for every `Choice`, logprobs included (JSON floats round-trip
exactly in Python). Encoding never needs `openai`; decoding a choice does (it ships with ART).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

CHOICE_TAG = "__choice__"


class CodecError(ValueError):
    """A stored conversation item is neither a chat message nor a tagged choice."""


def _is_choice(item: Any) -> bool:
    return type(item).__name__ == "Choice" and hasattr(item, "model_dump") and hasattr(item, "finish_reason")


def encode_choice(choice: Any) -> dict[str, Any]:
    """A `Choice` (or an already-dumped choice dict) as a tagged, JSON-ready dict."""
    if _is_choice(choice):
        data = choice.model_dump(mode="json", exclude_unset=False)
    elif isinstance(choice, dict) and CHOICE_TAG in choice:
        return choice
    elif isinstance(choice, dict) and "message" in choice and "finish_reason" in choice:
        data = choice
    else:
        raise CodecError(f"not a chat completion choice: {type(choice).__name__}")
    return {CHOICE_TAG: data}


def decode_choice(data: dict[str, Any]) -> Any:
    """The `openai` `Choice` a tagged dict encodes."""
    if CHOICE_TAG not in data:
        raise CodecError("not a tagged choice: missing " + CHOICE_TAG)
    from openai.types.chat.chat_completion import Choice

    return Choice.model_validate(data[CHOICE_TAG])


def encode_item(item: Any) -> dict[str, Any]:
    if _is_choice(item):
        return encode_choice(item)
    if isinstance(item, dict):
        if CHOICE_TAG in item or "role" in item:
            return dict(item)
        raise CodecError(f"a chat message needs a 'role': {sorted(item)}")
    if hasattr(item, "model_dump"):  # e.g. ChatCompletionMessage
        dumped: dict[str, Any] = item.model_dump(mode="json", exclude_none=True)
        return dumped
    raise CodecError(f"cannot store a {type(item).__name__} in a conversation")


def decode_item(data: dict[str, Any]) -> Any:
    return decode_choice(data) if CHOICE_TAG in data else data


def encode_conversation(items: Iterable[Any]) -> list[dict[str, Any]]:
    return [encode_item(i) for i in items]


def decode_conversation(items: Iterable[dict[str, Any]]) -> list[Any]:
    return [decode_item(i) for i in items]


def dumps(items: Iterable[Any]) -> str:
    return json.dumps(encode_conversation(items), ensure_ascii=False)


def loads(text: str) -> list[Any]:
    data = json.loads(text)
    if not isinstance(data, list):
        raise CodecError("a stored conversation is a JSON list")
    return decode_conversation(data)


def as_message(item: dict[str, Any]) -> dict[str, Any]:
    """The chat message of an encoded item: a choice's assistant message, or the message itself."""
    if CHOICE_TAG in item:
        msg = dict(item[CHOICE_TAG].get("message") or {})
        out: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
        if msg.get("tool_calls"):
            out["tool_calls"] = msg["tool_calls"]
        return out
    return item


def choice_logprobs(item: dict[str, Any]) -> list[float]:
    """Per-token logprobs of an encoded choice (empty when it has none)."""
    lp = (item.get(CHOICE_TAG) or {}).get("logprobs") or {}
    return [float(t["logprob"]) for t in lp.get("content") or []]
