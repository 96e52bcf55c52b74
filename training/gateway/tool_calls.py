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

Torch-free and pure, so the gateway and the tests use it without a model.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

TOOL_CALL_START = "<tool_call>"
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


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
        calls.append(
            {
                "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
                "type": "function",
                "function": {"name": call["name"], "arguments": arguments},
            }
        )
    content = text[: text.find(TOOL_CALL_START)]
    return ParsedToolCalls(content or None, calls)


def with_tool_calls(choice: dict[str, Any]) -> dict[str, Any]:
    """A completion choice (`Choice.model_dump()`) with the tool calls of its text parsed out of its
    content into `message.tool_calls`, finish reason `tool_calls`; the choice itself when its text
    makes none. Token ids and logprobs are untouched: they are what was sampled, tags included."""
    message = choice["message"]
    parsed = parse_tool_calls(message.get("content") or "")
    if parsed is None:
        return choice
    return {
        **choice,
        "message": {**message, "content": parsed.content, "tool_calls": parsed.tool_calls},
        "finish_reason": "tool_calls",
    }


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


__all__ = ["ParsedToolCalls", "parse_tool_calls", "same_tool_calls", "with_tool_calls"]
