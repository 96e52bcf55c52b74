"""Conversations rebuilt from episodes, as chat items the exports and the GRPO groups share.

An `external` episode (the IDE's model acted) becomes: the task as the user turn, each recorded tool
call as an assistant tool call (its arguments as the agent sent them) followed by its whole result as
a tool turn, and the final assistant turn: the summary, then the agent's work as a diff (the served
workspace from its first state to its end state, `training.recording.capture`), since the IDE's own edits
are no tool call of ours. A `policy` episode (our student acted through the gateway) is rebuilt from its
recorded turns, so its assistant turns are exactly what was sampled.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any, Literal

from envpool.verifiers.patches import holds_a_diff
from episodes.records import RECORDER_NOTES, EpisodeDetail
from episodes.run_records import PolicyTurn

BOOKKEEPING_TOOLS = frozenset({"start_episode", "end_episode", "give_feedback", "list_episodes", "training_status"})
"""rlide's own episode tools: the log's scaffolding, not part of the work being learned."""
TOOL_SCHEMAS = Path(__file__).with_name("tool_schemas.json")
"""rlide's tools as its MCP server publishes them (descriptions, types, required fields), written by
`scripts/gen_reference.py`, which a test runs to keep it current."""


@functools.cache
def _published() -> dict[str, dict[str, Any]]:
    return {tool["function"]["name"]: tool for tool in json.loads(TOOL_SCHEMAS.read_text(encoding="utf-8"))}


def tool_schema(name: str, used: dict[str, Any]) -> dict[str, Any]:
    """The tool as a chat template takes it: rlide's published schema, without `episode_id` (the
    log's bookkeeping), or, for another server's tool, the types of the arguments it was called with."""
    published = _published().get(name)
    if published is None:
        return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": used}}}
    tool = copy.deepcopy(published)
    parameters = tool["function"]["parameters"]
    parameters.get("properties", {}).pop("episode_id", None)
    if "required" in parameters:
        parameters["required"] = [field for field in parameters["required"] if field != "episode_id"]
    return tool


def policy_conversation(turns: list[PolicyTurn]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, list[int]]:
    """(items, tools, checkpoint steps) of a policy episode: the request messages of each turn
    interleaved with the exact choices. A turn whose request does not continue the previous one
    starts the conversation afresh (only the last coherent chain is kept)."""
    items: list[dict[str, Any]] = []
    prev: list[dict[str, Any]] = []
    steps: list[int] = []
    tools = None
    for turn in turns:
        msgs = list(turn.request.get("messages") or [])
        continues = bool(items) and msgs[: len(prev)] == prev and len(msgs) > len(prev)
        if continues:
            items.extend(msgs[len(prev) + 1 :])  # skip the assistant message echoing our last choice
        else:
            items, steps = list(msgs), []
        items.append(turn.choice)
        if turn.checkpoint_step is not None:
            steps.append(turn.checkpoint_step)
        prev = msgs
        tools = turn.request.get("tools") or tools
    return items, tools, steps


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def external_conversation(
    detail: EpisodeDetail, *, arguments_as: Literal["dict", "json"]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(prompt, completion, tools) of an episode the IDE's own model acted in."""
    prompt = [{"role": "user", "content": detail.episode.task}]
    completion: list[dict[str, Any]] = []
    schemas: dict[str, dict[str, Any]] = {}
    for step in detail.steps:
        if step.tool in BOOKKEEPING_TOOLS:
            continue
        args = {k: v for k, v in step.arguments.items() if k != "episode_id" and k not in RECORDER_NOTES}
        call_id = f"call_{step.id}"
        arguments: Any = args if arguments_as == "dict" else json.dumps(args, ensure_ascii=False)
        completion.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": step.tool, "arguments": arguments}}
                ],
            }
        )
        result = f"Error: {step.error}" if step.error else (step.result or step.result_summary or "")
        completion.append({"role": "tool", "tool_call_id": call_id, "name": step.tool, "content": result})
        props = schemas.setdefault(step.tool, {})
        for key, value in args.items():
            props.setdefault(key, {"type": _json_type(value)})
    final = [detail.episode.summary or ""]
    if detail.solution and not _states_a_change(final[0]):
        final.append(f"```diff\n{detail.solution}```")
    if any(final):
        completion.append({"role": "assistant", "content": "\n\n".join(part for part in final if part)})
    return prompt, completion, [tool_schema(name, props) for name, props in schemas.items()]


def _states_a_change(summary: str) -> bool:
    """Whether the agent's closing message already writes its change as an edit (SEARCH/REPLACE
    blocks or a unified diff): then the recorded diff would say it twice, and a student imitating
    the answer would learn to write every fix twice."""
    return "<<<<<<< SEARCH" in summary or holds_a_diff(summary)
