"""How the log encodes what it stores: conversations that mix chat messages with OpenAI `Choice`
objects, exactly, and the long strings of a step's arguments, once per content.

## Conversations

ART's RL path needs assistant turns as `openai.types.chat.chat_completion.Choice` objects carrying
per-token logprobs; a plain dict turn is silently treated as a prompt message and never trained
on. A pydantic JSON round-trip (`Trajectory.model_dump_json` then `model_validate_json`) turns
every `Choice` into a dict, so this module tags them explicitly:

    message  -> {"role": ..., ...}                   (unchanged)
    Choice   -> {"__choice__": Choice.model_dump()}

`decode_item(encode_item(c)) == c` for every `Choice`, logprobs included (JSON floats round-trip
exactly in Python). Encoding never needs `openai`; decoding a choice does (it ships with ART).

## Step arguments

Long strings in a step's arguments, stored once per content in table `blobs`.

An agent calls `run_tests` and `run_code` again and again with the same workspace files (up to
16 MB a call); stored inline, every call wrote them all again. `split_blobs` takes each string of at
least `BLOB_MIN_CHARS` out of the (already redacted) arguments, leaving its sha256 in its place
and its path in `refs`; the step row keeps the refs, the text goes into `blobs` keyed by its hash
(an `INSERT` that does nothing when the text is there already). `join_blobs` puts the texts back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


# -- step arguments: long strings stored once per content ------------------------------------------

BLOB_MIN_CHARS = 1024
"""Shorter strings stay inline: a ref (its path and a 64-character hash) would be most of their size."""

ArgPath = list[str | int]
"""Where a string sits in the arguments: dict keys and list indices from the top."""


@dataclass
class SplitArguments:
    arguments: Any
    """The arguments with each long string replaced by its sha256."""
    refs: list[tuple[ArgPath, str]] = field(default_factory=list)
    blobs: dict[str, str] = field(default_factory=dict)
    """sha256 -> text, for the `blobs` table."""


def split_blobs(arguments: Any) -> SplitArguments:
    out = SplitArguments(None)
    out.arguments = _take(arguments, [], out)
    return out


def _take(value: Any, path: ArgPath, out: SplitArguments) -> Any:
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


def join_blobs(arguments: Any, refs: Iterable[Sequence[Any]], blobs: Mapping[str, str]) -> Any:
    """`arguments` as they were before `split_blobs`, given its refs (as pairs or, read back from
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
