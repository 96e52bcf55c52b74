"""Malformed and hostile requests to the policy endpoint: each is refused with a 4xx in OpenAI's
error shape that names what is wrong, is never sampled, and leaves the episode log as it was. Before,
some of these reached the chat template or the tokenizer and came back as bare 500s."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from common.json_body import MAX_DEPTH
from episodes.records import EpisodeSource
from episodes.store import EpisodeStore
from tests.logdata import CannedEngine
from training.gateway.app import MAX_REQUEST_BYTES, Gateway

USER = {"role": "user", "content": "Write a number."}
TOOL = {"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}
NUMBER_ARGUMENTS = {**CALL, "function": {"name": "run_tests", "arguments": 5}}


def nested(depth: int) -> str:
    """JSON text of a tool whose parameters nest `depth` objects deep (too deep for `json.dumps`)."""
    parameters = '{"a": ' * depth + "{}" + "}" * depth
    return '{"type": "function", "function": {"name": "f", "parameters": ' + parameters + "}}"


BAD_BODIES: list[tuple[str, bytes, str]] = [
    ("role", json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), "messages[0] must be an object"),
    ("role type", json.dumps({"messages": [{"role": 5, "content": "x"}]}).encode(), "role is one of"),
    ("message type", json.dumps({"messages": [USER, "hi"]}).encode(), "messages[1] must be an object"),
    ("content object", json.dumps({"messages": [{"role": "user", "content": {"a": 1}}]}).encode(), ".content must be"),
    ("user content null", json.dumps({"messages": [{"role": "user", "content": None}]}).encode(), "null only for"),
    ("tool list item", json.dumps({"messages": [USER], "tools": [1]}).encode(), "tools must be a list of"),
    ("tool without name", json.dumps({"messages": [USER], "tools": [{"type": "function"}]}).encode(), "tools must be"),
    (
        "tool call item",
        json.dumps({"messages": [USER, {"role": "assistant", "content": None, "tool_calls": ["x"]}]}).encode(),
        "messages[1].tool_calls must be",
    ),
    (
        "tool call arguments",
        json.dumps({"messages": [USER, {"role": "assistant", "tool_calls": [NUMBER_ARGUMENTS]}]}).encode(),
        "messages[1].tool_calls must be",
    ),
    ("seed past 64 bits", json.dumps({"messages": [USER], "seed": 2**70}).encode(), "seed must be a 64-bit integer"),
    ("lone surrogate", b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "not valid JSON: no low surrogate"),
    ("NaN", b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', "not valid JSON"),
    ("invalid UTF-8", b'{"messages": [{"role": "user", "content": "\xff"}]}', "not valid JSON"),
    (
        "far past the depth",
        ('{"messages": [], "tools": [' + nested(1100) + "]}").encode(),
        f"more than {MAX_DEPTH} deep",
    ),
    (
        "just past the depth",
        ('{"messages": [{"role": "user", "content": "x"}], "tools": [' + nested(MAX_DEPTH) + "]}").encode(),
        f"more than {MAX_DEPTH} deep",
    ),
]


@pytest.fixture
def served(store: EpisodeStore) -> tuple[CannedEngine, TestClient, str]:
    engine = CannedEngine()
    http = TestClient(Gateway(engine, store).app)
    return engine, http, http.post("/episodes", json={"task": "answer"}).json()["episode_id"]


@pytest.mark.parametrize(("name", "body", "says"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_a_malformed_request_is_refused_unsampled_and_unrecorded(
    served: tuple[CannedEngine, TestClient, str], store: EpisodeStore, name: str, body: bytes, says: str
) -> None:
    engine, http, episode_id = served
    for path in ("/v1/chat/completions", f"/episodes/{episode_id}/v1/chat/completions"):
        refused = http.post(path, content=body, headers={"content-type": "application/json"})
        assert refused.status_code == 400, (name, path, refused.text)
        error: dict[str, Any] = refused.json()["error"]
        assert says in error["message"] and error["type"] == "invalid_request_error", (name, error)
    assert store.turns.policy_turns(episode_id) == []
    assert engine.calls == []
    # The episode still takes a well-formed turn.
    ok = http.post(f"/episodes/{episode_id}/v1/chat/completions", json={"messages": [USER], "tools": [TOOL]})
    assert ok.status_code == 200, ok.text
    assert len(store.turns.policy_turns(episode_id)) == 1


def test_what_agents_send_is_accepted(served: tuple[CannedEngine, TestClient, str], store: EpisodeStore) -> None:
    """Every role, an assistant turn with tool calls and null content, arguments as an object (which
    chat templates take), a tool result, content as text parts, a negative seed."""
    engine, http, episode_id = served
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "developer", "content": "Use the tools."},
        USER,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "assistant", "content": "", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "1 passed"}]},
    ]
    resp = http.post(
        f"/episodes/{episode_id}/v1/chat/completions", json={"messages": messages, "tools": [TOOL], "seed": -5}
    )
    assert resp.status_code == 200, resp.text
    assert engine.calls[-1][0][-1]["content"] == "1 passed"
    assert store.turns.policy_turns(episode_id)[0].request["messages"][3]["tool_calls"] == [CALL]


def test_a_body_past_the_limit_is_refused_before_it_is_read(served: tuple[CannedEngine, TestClient, str]) -> None:
    engine, http, episode_id = served
    big = b'{"messages": [{"role": "user", "content": "' + b"x" * MAX_REQUEST_BYTES + b'"}]}'
    for path in ("/v1/chat/completions", f"/episodes/{episode_id}/v1/chat/completions", "/episodes"):
        refused = http.post(path, content=big, headers={"content-type": "application/json"})
        assert refused.status_code == 413, (path, refused.text)
        assert f"at most {MAX_REQUEST_BYTES}" in refused.json()["error"]["message"]

    def chunks() -> Any:  # no content-length: the limit holds while the body streams in
        for _ in range(MAX_REQUEST_BYTES // 2**20 + 1):
            yield b" " * 2**20

    streamed = http.post("/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413 and engine.calls == []


def test_episode_bodies_of_the_wrong_type_change_nothing(
    served: tuple[CannedEngine, TestClient, str], store: EpisodeStore
) -> None:
    """A client name that is not text (it was stored as a dict's repr) and a reward of `true` (a
    bool is an int in Python: it was credited as 1.0) are refused; the episode stays open."""
    _, http, episode_id = served
    before = len(store.list_episodes(limit=100))
    refused = http.post("/episodes", json={"task": "t", "client": {"name": "aider"}})
    assert refused.status_code == 400 and '"client"' in refused.json()["error"]["message"]
    assert len(store.list_episodes(limit=100)) == before
    refused = http.post(f"/episodes/{episode_id}/end", json={"outcome": "success", "reward": True})
    assert refused.status_code == 400 and "reward: Input should be a valid number" in refused.text
    episode = store.get_episode(episode_id)
    assert episode.status.value == "open" and episode.reward_total is None
    assert http.post(f"/episodes/{episode_id}/end", json={"outcome": "success", "reward": 1}).status_code == 200
    assert store.get_episode(episode_id).reward_total == 1.0


def test_a_reward_sent_to_end_is_a_claim_and_never_verified(
    served: tuple[CannedEngine, TestClient, str], store: EpisodeStore
) -> None:
    """Whoever calls /end (a scaffold, or a web page) is no verifier: its reward is recorded as an
    unverified rating, like an agent's own, and the episode is not trained on by default. Before, it
    was a verified tests reward."""
    _, http, episode_id = served
    assert http.post(f"/episodes/{episode_id}/end", json={"outcome": "success", "reward": 1}).status_code == 200
    rewards = store.detail(episode_id).rewards
    assert [(r.source.value, r.value, r.verified) for r in rewards] == [
        ("outcome", 1.0, False),
        ("feedback", 1.0, False),
    ]
    assert episode_id not in [e.id for e in store.terminal_episodes(source=EpisodeSource.policy)]
