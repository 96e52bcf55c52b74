"""The student's Hermes tool calls read as vLLM's `hermes` parser reads them, calls written as JSON in
a code fence read as well, and a client's echo of them recognised as the same turn (torch-free: the
parser, `PriorTurn`, and a proxied endpoint over real HTTP with a scripted engine; the cpu engine's
round trip is in test_gateway.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from episodes.store import EpisodeStore
from tests.logdata import CannedEngine
from tests.training.gateway.test_policy_auth import uvicorn_on_loopback
from training.gateway.app import Gateway
from training.gateway.engines import PriorTurn, ProxyEngine
from training.gateway.tool_calls import parse_tool_calls, same_tool_calls, with_tool_calls


def calls_of(text: str) -> tuple[str | None, list[tuple[str, str]]] | None:
    parsed = parse_tool_calls(text)
    if parsed is None:
        return None
    for call in parsed.tool_calls:
        assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    return parsed.content, [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls]


def test_one_call_as_qwen_writes_it_and_as_the_tiny_template_renders_it() -> None:
    qwen = '<tool_call>\n{"name": "run_tests", "arguments": {"test_command": "pytest -q"}}\n</tool_call>'
    tiny = '<tool_call>{"name":"run_tests","arguments":{"test_command":"pytest -q"}}</tool_call>'
    for text in (qwen, tiny):
        assert calls_of(text) == (None, [("run_tests", '{"test_command": "pytest -q"}')])


def test_several_calls_each_get_their_own_id() -> None:
    text = (
        '<tool_call>\n{"name": "search_code", "arguments": {"query": "naïve"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>'
    )
    assert calls_of(text) == (None, [("search_code", '{"query": "naïve"}'), ("run_tests", "{}")])
    parsed = parse_tool_calls(text)
    assert parsed is not None and len({c["id"] for c in parsed.tool_calls}) == 2


def test_text_before_the_first_call_is_the_content_as_written() -> None:
    # vLLM keeps it unstripped: the text up to the tag, newline included.
    text = 'I will run them.\n<tool_call>\n{"name": "run_tests", "arguments": {"k": 1}}\n</tool_call>'
    assert calls_of(text) == ("I will run them.\n", [("run_tests", '{"k": 1}')])


def test_a_call_left_open_at_the_end_still_counts() -> None:
    assert calls_of('<tool_call>\n{"name": "f", "arguments": {"x": [1, 2]}}\n') == (None, [("f", '{"x": [1, 2]}')])


def test_malformed_calls_leave_the_whole_text_as_content() -> None:
    good = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    for bad in (
        '<tool_call>{"name": "f", "arguments": {</tool_call>',  # not JSON
        '<tool_call>{"arguments": {}}</tool_call>',  # no name
        '<tool_call>{"name": 3, "arguments": {}}</tool_call>',  # a name that is not text
        '<tool_call>{"name": "f"}</tool_call>',  # no arguments
        '<tool_call>["f", {}]</tool_call>',  # not an object
        "<tool_call></tool_call>",
        '<tool_call>{"name": "f", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}</tool_call>",  # too deep
        good + '<tool_call>{"name": "g", "arguments": }</tool_call>',  # one bad call spoils all
    ):
        assert parse_tool_calls(bad) is None, bad
        choice = {"index": 0, "message": {"role": "assistant", "content": bad}, "finish_reason": "stop"}
        assert with_tool_calls(choice) is choice


def test_arguments_that_are_not_an_object_are_serialized_as_they_are() -> None:
    """vLLM `json.dumps` whatever `arguments` holds: a string comes back as JSON text of a string,
    not unwrapped (a template that renders OpenAI's argument text as a string makes students write it
    that way)."""
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>'
    assert calls_of(text) == (None, [("f", json.dumps('{"a": 1}'))])
    assert calls_of('<tool_call>{"name": "f", "arguments": null}</tool_call>') == (None, [("f", "null")])
    assert calls_of('<tool_call>{"name": "f", "arguments": [1, "é"]}</tool_call>') == (None, [("f", '[1, "é"]')])


def test_text_without_a_call_is_untouched() -> None:
    for text in ("The answer is 4.", "", "a </tool_call> alone", "<tool_cal"):
        assert parse_tool_calls(text) is None
    choice = {"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "length"}
    assert with_tool_calls(choice) is choice


def test_a_choice_with_calls_finishes_with_tool_calls_and_keeps_its_tokens() -> None:
    logprobs = {"content": [{"token": "token_id:7", "logprob": -0.1, "bytes": None, "top_logprobs": []}]}
    text = 'ok<tool_call>{"name": "f", "arguments": {"a": 1}}'  # cut by max_tokens after the JSON
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": "length",
        "logprobs": logprobs,
    }
    parsed = with_tool_calls(choice)
    assert parsed["finish_reason"] == "tool_calls" and parsed["logprobs"] is logprobs
    assert parsed["message"]["content"] == "ok" and parsed["message"]["tool_calls"][0]["function"]["name"] == "f"
    assert choice["message"]["content"] == text  # the input is not changed


def call(name: str, arguments: Any, call_id: str = "chatcmpl-tool-1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_an_echo_with_re_serialized_arguments_is_the_same_call() -> None:
    recorded = [call("run_tests", '{"test_command": "pytest", "k": [1, 2]}')]
    assert same_tool_calls([call("run_tests", '{"k":[1,2],"test_command":"pytest"}', "other-id")], recorded)
    assert same_tool_calls([call("run_tests", {"k": [1, 2], "test_command": "pytest"})], recorded)
    assert not same_tool_calls([call("run_tests", '{"test_command": "pytest", "k": [2, 1]}')], recorded)
    assert not same_tool_calls([call("search_code", '{"test_command": "pytest", "k": [1, 2]}')], recorded)
    assert not same_tool_calls([], recorded) and not same_tool_calls(None, recorded)
    assert not same_tool_calls([*recorded, *recorded], recorded)
    assert same_tool_calls(None, None) and same_tool_calls([], None)
    assert same_tool_calls([call("f", "not json")], [call("f", "not json")])


def test_a_conversation_echoing_the_calls_continues_the_turn_that_made_them() -> None:
    first = [{"role": "user", "content": "run the tests"}]
    prior = PriorTurn(
        messages=first,
        content=None,
        prompt_token_ids=[1, 2],
        completion_token_ids=[3, 4],
        tool_calls=[call("run_tests", '{"test_command": "pytest"}')],
    )
    result = {"role": "tool", "tool_call_id": "chatcmpl-tool-1", "content": "1 passed"}

    def echo(content: str | None, calls: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        assistant: dict[str, Any] = {"role": "assistant", "content": content}
        if calls is not None:
            assistant["tool_calls"] = calls
        return [*first, assistant, result]

    assert prior.continued_by(echo(None, [call("run_tests", '{"test_command":"pytest"}')]))
    assert prior.continued_by(echo("", [call("run_tests", {"test_command": "pytest"})]))
    assert not prior.continued_by(echo(None, [call("run_tests", '{"test_command": "make"}')]))
    assert not prior.continued_by(echo(None, None))  # the calls were dropped: not what was sampled
    assert not prior.continued_by(echo("ran them", [call("run_tests", '{"test_command": "pytest"}')]))
    plain = PriorTurn(messages=first, content="4", prompt_token_ids=[1], completion_token_ids=[2])
    assert plain.continued_by([*first, {"role": "assistant", "content": "4"}, result])
    assert not plain.continued_by(
        [*first, {"role": "assistant", "content": "4", "tool_calls": [call("f", "{}")]}, result]
    )


OFFERED = ("run_tests", "search_code")


def fenced(text: str) -> tuple[str | None, list[tuple[str, str]]] | None:
    parsed = with_tool_calls({"index": 0, "message": {"role": "assistant", "content": text}}, OFFERED)
    if "tool_calls" not in parsed["message"]:
        return None
    assert parsed["finish_reason"] == "tool_calls"
    calls = parsed["message"]["tool_calls"]
    return parsed["message"]["content"], [(c["function"]["name"], c["function"]["arguments"]) for c in calls]


def test_a_call_small_models_write_as_json_in_a_code_fence_is_a_call() -> None:
    """Qwen2.5-0.5B behind aider wrote its calls this way; vLLM's hermes parser leaves them as text."""
    text = 'I will run the tests.\n```json\n{"name": "run_tests", "arguments": {"test_command": "pytest -q"}}\n```\n'
    assert fenced(text) == ("I will run the tests.\n", [("run_tests", '{"test_command": "pytest -q"}')])
    untagged = '```\n{"name": "search_code", "parameters": {"query": "naïve"}}\n```'  # Llama's key
    assert fenced(untagged) == (None, [("search_code", '{"query": "naïve"}')])
    both = (
        '```json\n[{"name": "search_code", "arguments": {"query": "x"}}, {"name": "run_tests", "arguments": {}}]\n```'
    )
    assert fenced(both) == (None, [("search_code", '{"query": "x"}'), ("run_tests", "{}")])


def test_json_in_a_fence_that_is_no_call_of_an_offered_tool_stays_text() -> None:
    for text in [
        '```json\n{"name": "rm_rf", "arguments": {"path": "/"}}\n```',  # a tool nobody offered
        '```json\n{"name": "run_tests", "arguments": "pytest"}\n```',  # arguments not an object
        '```json\n{"name": "run_tests"}\n```',  # no arguments
        '```python\n{"name": "run_tests", "arguments": {}}\n```',  # code, not a call
        '```json\n{"name": "run_tests", "arguments": {}\n```',  # not JSON
        '```json\n[{"name": "run_tests", "arguments": {}}, {"user": "ann"}]\n```',  # one item is no call
        'The config is {"name": "run_tests", "arguments": {}} inline.',  # not in a fence
    ]:
        assert fenced(text) is None, text
    # A call among examples: only the call's fence is a call; the text before it is the content.
    mixed = 'Example:\n```json\n{"user": "ann"}\n```\nNow:\n```json\n{"name": "run_tests", "arguments": {}}\n```'
    assert fenced(mixed) == ('Example:\n```json\n{"user": "ann"}\n```\nNow:\n', [("run_tests", "{}")])
    # With no tool offered, nothing is read from fences; Hermes tags are read first and alone.
    assert with_tool_calls({"message": {"content": '```json\n{"name": "run_tests", "arguments": {}}\n```'}}) == {
        "message": {"content": '```json\n{"name": "run_tests", "arguments": {}}\n```'}
    }
    tagged = '<tool_call>{"name": "search_code", "arguments": {}}</tool_call>\n'
    tagged += '```json\n{"name": "run_tests", "arguments": {}}\n```'
    assert fenced(tagged) == (None, [("search_code", "{}")])


def test_a_proxied_upstream_that_leaves_a_fenced_call_as_text_answers_it_as_tool_calls(tmp_path: Path) -> None:
    """vLLM's hermes parser leaves a fenced call as text; the gateway in front of it (`ProxyEngine`,
    the GPU path) reads it as the cpu engine does, and keeps the upstream's tokens as sampled. The
    upstream here is a second rlide endpoint over real HTTP whose engine writes the fenced call."""
    pieces = ["ok\n", "```json\n", '{"name": "run_tests", ', '"arguments": {"test_command": "pytest"}}', "\n```"]
    store = EpisodeStore.open(str(tmp_path / "up.db"))
    front_log = EpisodeStore.open(str(tmp_path / "front.db"))
    tools = [{"type": "function", "function": {"name": "run_tests"}}]
    ask = {"model": "student", "messages": [{"role": "user", "content": "test it"}], "max_tokens": 8, "tools": tools}
    try:
        with uvicorn_on_loopback(Gateway(CannedEngine(pieces), store).app) as upstream:
            front = TestClient(Gateway(ProxyEngine(f"{upstream}/v1", "student"), front_log).app)
            episode = front.post("/episodes", json={"task": "test it"}).json()
            answer = front.post(
                "/v1/chat/completions", json=ask, headers={"Authorization": f"Bearer {episode['api_key']}"}
            )
            as_text = front.post("/v1/chat/completions", json={**ask, "tool_choice": "none"}).json()
    finally:
        store.close()
    choice = answer.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "ok\n"
    [made] = choice["message"]["tool_calls"]
    assert (made["function"]["name"], json.loads(made["function"]["arguments"])) == (
        "run_tests",
        {"test_command": "pytest"},
    )
    assert as_text["choices"][0]["message"]["content"] == "".join(pieces)
    assert not as_text["choices"][0]["message"].get("tool_calls")
    [turn] = front_log.turns.policy_turns(episode["episode_id"])
    assert turn.completion_token_ids == [100, 101, 102, 103, 104]  # the upstream's sampled tokens, untouched
    front_log.close()
