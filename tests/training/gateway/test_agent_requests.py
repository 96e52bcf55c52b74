"""What coding agents send the policy endpoint: stream=true through the real OpenAI client (the
same completion framed as chunks, recorded the same way; Aider streams by default), their own
model's max_tokens, stop strings, and content as a list of parts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from episodes.codec import decode_choice
from episodes.store import EpisodeStore
from tests.logdata import CannedEngine
from training.gateway.app import MAX_TOKENS_LIMIT, Gateway

openai = pytest.importorskip("openai")

TOOL_CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "run_tests", "arguments": '{"test_command": "pytest"}'}},
    {"id": "call_2", "type": "function", "function": {"name": "search_code", "arguments": '{"query": "reward"}'}},
]


def client(http: TestClient, base: str) -> Any:
    return openai.OpenAI(base_url=f"http://testserver{base}", api_key="unused", http_client=http, max_retries=0)


def test_a_streamed_turn_is_the_completion_in_chunks_and_is_recorded_alike(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(["The", " answer", " is", " 42"]), store).app)
    episode_id = http.post("/episodes", json={"task": "answer"}).json()["episode_id"]
    messages = [{"role": "user", "content": "What is it?"}]
    plain = client(http, "/v1").chat.completions.create(model="student", messages=messages, logprobs=True)
    chunks = list(
        client(http, f"/episodes/{episode_id}/v1").chat.completions.create(
            model="student", messages=messages, logprobs=True, stream=True, stream_options={"include_usage": True}
        )
    )
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert "".join(d.delta.content or "" for d in deltas) == plain.choices[0].message.content == "The answer is 42"
    streamed = [entry for d in deltas if d.logprobs for entry in d.logprobs.content or []]
    assert streamed == plain.choices[0].logprobs.content
    assert deltas[0].delta.role == "assistant" and deltas[-1].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage == plain.usage
    assert all(c.usage is None for c in chunks[:-1]) and len({c.id for c in chunks}) == 1
    [turn] = store.turns.policy_turns(episode_id)
    assert decode_choice(turn.choice).logprobs.content == plain.choices[0].logprobs.content


def test_streamed_tool_calls_reassemble_and_n_choices_each_finish(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(["ok"], tool_calls=TOOL_CALLS), store).app)
    stream = client(http, "/v1").chat.completions.create(
        model="student", messages=[{"role": "user", "content": "go"}], n=2, stream=True
    )
    calls: dict[tuple[int, int], dict[str, str]] = {}
    finished = {}
    for chunk in stream:
        assert chunk.usage is None  # not asked for
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                got = calls.setdefault((choice.index, call.index), {"id": "", "name": "", "arguments": ""})
                got["id"] += call.id or ""
                got["name"] += call.function.name or ""
                got["arguments"] += call.function.arguments or ""
            if choice.finish_reason:
                finished[choice.index] = choice.finish_reason
    expected = [{"id": c["id"], **{k: c["function"][k] for k in ("name", "arguments")}} for c in TOOL_CALLS]
    for index in (0, 1):
        assert [calls[(index, i)] for i in range(2)] == expected
    assert finished == {0: "tool_calls", 1: "tool_calls"}


def test_stream_must_be_a_boolean(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(), store).app)
    body = {"model": "student", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}
    refused = http.post("/v1/chat/completions", json=body)
    assert refused.status_code == 400 and "stream must be true or false" in json.dumps(refused.json())


def test_options_sent_as_null_mean_their_defaults(store: EpisodeStore) -> None:
    """Clients that write every field of the request send `null` for the options they leave alone;
    OpenAI's schema makes them nullable, so that is the default, not a bad request."""
    engine = CannedEngine()
    http = TestClient(Gateway(engine, store).app)
    episode_id = http.post("/episodes", json={"task": "answer"}).json()["episode_id"]
    nulls = ("n", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop", "tools", "stream")
    body = {"model": "student", "messages": [{"role": "user", "content": "x"}], **dict.fromkeys(nulls)}
    answered = http.post(f"/episodes/{episode_id}/v1/chat/completions", json={**body, "stream_options": None})
    assert answered.status_code == 200, answered.text
    assert len(answered.json()["choices"]) == 1 and answered.json()["choices"][0]["message"]["content"] == "42"
    assert (engine.max_tokens, engine.stops, engine.options) == ([256], [None], [{"top_p": 1.0}])
    [turn] = store.turns.policy_turns(episode_id)
    assert turn.request["params"] == {"max_tokens": 256, "temperature": 1.0, "top_p": 1.0, "seed": None}


def test_max_tokens_past_the_limit_is_capped_not_refused(store: EpisodeStore) -> None:
    """Agents send their own model's output limit (16k, 32k); a refusal would lose the episode."""
    engine = CannedEngine()
    http = TestClient(Gateway(engine, store).app)
    oai = client(http, "/v1")
    oai.chat.completions.create(model="student", messages=[{"role": "user", "content": "x"}], max_tokens=32_000)
    oai.chat.completions.create(model="student", messages=[{"role": "user", "content": "x"}], max_tokens=7)
    assert engine.max_tokens == [MAX_TOKENS_LIMIT, 7]
    for bad in (0, -5, "many", True):
        body = {"model": "student", "messages": [{"role": "user", "content": "x"}], "max_tokens": bad}
        refused = http.post("/v1/chat/completions", json=body)
        assert refused.status_code == 400 and "max_tokens must be a positive integer" in refused.text, bad


def test_content_parts_are_joined_into_the_text_the_model_reads(store: EpisodeStore) -> None:
    """Newer OpenAI clients send content as a list of parts; the chat template would render the list
    as its Python repr, and the policy would be sampled and trained on that."""
    engine = CannedEngine()
    http = TestClient(Gateway(engine, store).app)
    episode_id = http.post("/episodes", json={"task": "parts"}).json()["episode_id"]
    parts = [{"type": "text", "text": "Fix the parser."}, {"type": "text", "text": "It drops the last line."}]
    client(http, f"/episodes/{episode_id}/v1").chat.completions.create(
        model="student", messages=[{"role": "user", "content": parts}]
    )
    fed = [{"role": "user", "content": "Fix the parser.\nIt drops the last line."}]
    assert engine.calls[-1][0] == fed
    assert store.turns.policy_turns(episode_id)[0].request["messages"] == fed  # what ART will rebuild
    image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    body = {"model": "student", "messages": [{"role": "user", "content": image}]}
    refused = http.post("/v1/chat/completions", json=body)
    assert refused.status_code == 400 and "'image_url': this endpoint serves a text model" in refused.text


def test_stop_is_passed_as_a_list_and_checked(store: EpisodeStore) -> None:
    engine = CannedEngine()
    http = TestClient(Gateway(engine, store).app)
    oai = client(http, "/v1")
    for stop, passed in (("\nObservation:", ["\nObservation:"]), (["a", "b"], ["a", "b"]), (None, None), ([], None)):
        oai.chat.completions.create(model="student", messages=[{"role": "user", "content": "x"}], stop=stop)
        assert engine.stops[-1] == passed, stop
    for bad in (["a", ""], ["1", "2", "3", "4", "5"], 7, [3]):
        body = {"model": "student", "messages": [{"role": "user", "content": "x"}], "stop": bad}
        refused = http.post("/v1/chat/completions", json=body)
        assert refused.status_code == 400 and "stop must be a string or a list" in refused.text, bad


def test_top_p_and_other_options_reach_the_engine_and_the_log(store: EpisodeStore) -> None:
    """top_p is the engine's to honor; options such as tool_choice go to the engine as sent (a proxy
    passes them to vLLM); the recorded turn says which top_p it was sampled with."""
    engine = CannedEngine()
    http = TestClient(Gateway(engine, store).app)
    episode_id = http.post("/episodes", json={"task": "options"}).json()["episode_id"]
    fmt = {"type": "json_object"}
    client(http, f"/episodes/{episode_id}/v1").chat.completions.create(
        model="student",
        messages=[{"role": "user", "content": "x"}],
        top_p=0.5,
        tool_choice="none",
        response_format=fmt,
        presence_penalty=0.25,
        extra_body={"top_k": 20, "unknown_option": 1},
    )
    assert engine.options[-1] == {
        "top_p": 0.5,
        "tool_choice": "none",
        "response_format": fmt,
        "presence_penalty": 0.25,
        "top_k": 20,
    }
    assert store.turns.policy_turns(episode_id)[0].request["params"]["top_p"] == 0.5
    client(http, "/v1").chat.completions.create(model="student", messages=[{"role": "user", "content": "x"}])
    assert engine.options[-1] == {"top_p": 1.0}
    for bad in (0, 1.5, -0.1, "half", True):
        body = {"model": "student", "messages": [{"role": "user", "content": "x"}], "top_p": bad}
        refused = http.post("/v1/chat/completions", json=body)
        assert refused.status_code == 400 and "top_p must be a number above 0 and at most 1" in refused.text, bad
