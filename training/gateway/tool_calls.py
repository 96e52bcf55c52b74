"""The student's tool calls, read from its text as vLLM's `hermes` tool parser reads them.

Qwen2.5 and SmolLM2 students (and the tiny model's template) write a tool call as text:

    Let me run them.<tool_call>
    {"name": "run_tests", "arguments": {"test_command": "pytest"}}
    </tool_call>

vLLM served with `--enable-auto-tool-choice --tool-call-parser hermes` answers that completion with
OpenAI `tool_calls`; the cpu engine answers it the same way (`with_tool_calls`), so an agent gets
the same message whichever engine serves the student. The rules are vLLM's
(`Hermes2ProToolParser.extract_tool_calls`), byte for byte where they decide the answer:

- Each `<tool_call>...</tool_call>` region, or a last one left open at the end of the text, holds
  one JSON object with a string `name` and an `arguments` value of any JSON type; `arguments` is
  re-serialized (`json.dumps(..., ensure_ascii=False)`) into the call's JSON text, so an object
  comes back as `{"a": 1}` and a string as `"..."` (JSON text of a string: vLLM does not unwrap it).
- The content is the text before the first `<tool_call>`, unstripped, or None when there is none.
- If any region is not such an object (malformed JSON, no `name`, no `arguments`), nothing is
  parsed: the whole text stays the content, as vLLM logs and answers.
- Parsed calls make the finish reason `tool_calls`; each call gets a fresh id, `chatcmpl-tool-<hex>`.

Small students often write a call as JSON in a code fence instead, which vLLM's parser leaves as
text. When a completion has no `<tool_call>` tag, `parse_fenced_calls` reads those: a fence
(untagged, `json`, `tool_call` or `tool_code`) whose whole body is one object, or a list of objects,
each `{"name": <a tool the request offered>, "arguments": {...}}` (`parameters` is read as
`arguments`: Llama's spelling). Only offered tools count, and only object arguments, so a JSON
example in an answer is not taken for a call. Other fences stay content; the content is the text
before the first call's fence.

Torch-free and pure, so the gateway and the tests use it without a model.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

TOOL_CALL_START = "<tool_call>"
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_FENCE = re.compile(r"^[ \t]*```[ \t]*(?:json|tool_call|tool_code)?[ \t]*\n(.*?)\n[ \t]*```", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class ParsedToolCalls:
    content: str | None
    """The text before the first call, or None when the text starts with one."""
    tool_calls: list[dict[str, Any]]
    """OpenAI's shape: {"id", "type": "function", "function": {"name", "arguments": JSON text}}."""


def parse_tool_calls(text: str) -> ParsedToolCalls | None:
    """The tool calls `text` makes, or None when it makes none that parse (its text is then its content)."""
    if TOOL_CALL_START not in text:
        return None
    calls = []
    for closed, open_at_end in _TOOL_CALL.findall(text):
        try:
            call = json.loads(closed or open_at_end)
            if not isinstance(call, dict) or not isinstance(call.get("name"), str) or "arguments" not in call:
                return None
            arguments = json.dumps(call["arguments"], ensure_ascii=False)
        except (ValueError, RecursionError):  # not JSON, or nested past what json reads back
            return None
        calls.append(_call(call["name"], arguments))
    content = text[: text.find(TOOL_CALL_START)]
    return ParsedToolCalls(content or None, calls)


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def parse_fenced_calls(text: str, offered: Collection[str]) -> ParsedToolCalls | None:
    """The calls of `offered` tools `text` writes as JSON in code fences, or None when it writes none."""
    calls: list[dict[str, Any]] = []
    first: int | None = None
    for fence in _FENCE.finditer(text):
        try:
            value = json.loads(fence.group(1))
        except (ValueError, RecursionError):
            continue
        items = value if isinstance(value, list) else [value]
        found = [_fenced_call(item, offered) for item in items]
        if not items or any(call is None for call in found):
            continue
        first = fence.start() if first is None else first
        calls += [call for call in found if call is not None]
    if first is None:
        return None
    return ParsedToolCalls(text[:first] or None, calls)


def _fenced_call(item: Any, offered: Collection[str]) -> dict[str, Any] | None:
    if not isinstance(item, dict) or item.get("name") not in offered:
        return None
    arguments = item.get("arguments", item.get("parameters"))
    if not isinstance(arguments, dict):
        return None
    return _call(item["name"], json.dumps(arguments, ensure_ascii=False))


def with_tool_calls(choice: dict[str, Any], offered: Collection[str] = ()) -> dict[str, Any]:
    """A completion choice (`Choice.model_dump()`) with the tool calls of its text parsed out of its
    content into `message.tool_calls`, finish reason `tool_calls`; the choice itself when its text
    makes none. `offered`: the request's tool names, for calls written in code fences. Token ids and
    logprobs are untouched: they are what was sampled, tags included."""
    message = choice["message"]
    text = message.get("content") or ""
    parsed = parse_tool_calls(text) if TOOL_CALL_START in text else parse_fenced_calls(text, offered)
    if parsed is None:
        return choice
    return {
        **choice,
        "message": {**message, "content": parsed.content, "tool_calls": parsed.tool_calls},
        "finish_reason": "tool_calls",
    }


def answered_with_tool_calls(
    choices: list[dict[str, Any]], tools: list[dict[str, Any]] | None, options: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """`choices` as an agent gets them (`with_tool_calls`), as vLLM with `--enable-auto-tool-choice`
    answers: a request that offers tools gets the calls its completions write, unless it said
    tool_choice "none". A forced choice ("required", a named function) is read the same way: no
    engine here constrains decoding. A choice that already has calls (an upstream's parser read
    them) is left as it is."""
    if not tools or (options or {}).get("tool_choice") == "none":
        return choices
    offered = [str((tool.get("function") or {}).get("name")) for tool in tools]
    return [c if c["message"].get("tool_calls") else with_tool_calls(c, offered) for c in choices]


def same_tool_calls(echoed: list[dict[str, Any]] | None, recorded: list[dict[str, Any]] | None) -> bool:
    """Whether an assistant message a client sends back makes the calls a completion made: the same
    functions in order, with arguments equal as JSON values. Clients re-serialize arguments (other
    spacing, key order, an object instead of its text), which changes no token the policy sampled.
    Ids are not compared: the gateway made them up, the policy never wrote them."""
    echoed, recorded = echoed or [], recorded or []
    return len(echoed) == len(recorded) and all(
        _call_value(a) == _call_value(b) for a, b in zip(echoed, recorded, strict=True)
    )


def _call_value(call: dict[str, Any]) -> tuple[Any, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # not JSON: compared as the text it is
            arguments = json.loads(arguments)
    return function.get("name"), arguments


__all__ = [
    "ParsedToolCalls",
    "answered_with_tool_calls",
    "parse_fenced_calls",
    "parse_tool_calls",
    "same_tool_calls",
    "with_tool_calls",
]
