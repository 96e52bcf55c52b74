"""Calls that name no episode: each conversation an episode of its own (`training/gateway/conversations.py`).

An agent given only `/v1` resends its conversation with every call; the endpoint records each call
into the episode whose last turn it continues, and opens an implicit policy episode for a call that
continues none. Driven with the official OpenAI client against a real uvicorn on loopback, and
starlette's TestClient; the engine is `CannedEngine` (a real PolicyEngine without torch, always
answering "42"): what is under test is which episode each call lands in.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from starlette.testclient import TestClient

from episodes.records import EpisodeStatus
from episodes.store import EpisodeStore
from tests.logdata import CannedEngine
from tests.training.gateway.test_policy_auth import uvicorn_on_loopback
from training.gateway.app import Gateway

ANSWER = {"role": "assistant", "content": "42"}


def _chat(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "student", "messages": messages, "max_tokens": 4, **extra}


def _conversations(store: EpisodeStore) -> dict[str, list[list[dict[str, Any]]]]:
    """Each implicit episode's task -> the messages of its turns, in order."""
    return {
        e.task: [t.request["messages"] for t in store.turns.policy_turns(e.id)]
        for e in store.list_episodes()
        if e.implicit
    }


def test_each_conversation_lands_in_an_episode_of_its_own_with_every_turn_in_order(store: EpisodeStore) -> None:
    openai = pytest.importorskip("openai")
    with uvicorn_on_loopback(Gateway(CannedEngine(), store).app) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-unused", max_retries=0)
        talks = {
            "fix the parser": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "fix the parser"},
            ],
            "write tests": [{"role": "user", "content": "write tests"}],
        }
        for turn in range(3):  # interleaved, as two agents would be
            for name, messages in talks.items():
                reply = client.chat.completions.create(**_chat(messages))
                assert reply.choices[0].message.content == "42"
                messages += [{"role": "assistant", "content": reply.choices[0].message.content}]
                messages += [{"role": "user", "content": f"{name}: go on ({turn})"}]
        # The same opening again, without the history: a new conversation, not the old one's fourth turn.
        client.chat.completions.create(**_chat([{"role": "user", "content": "write tests"}]))
        # n=2 is two paths, no one episode: answered, not recorded.
        assert len(client.chat.completions.create(**_chat([{"role": "user", "content": "pick"}], n=2)).choices) == 2
    episodes = [e for e in store.list_episodes() if e.implicit]
    assert sorted(e.task for e in episodes) == ["fix the parser", "write tests", "write tests"]
    assert all(e.source.value == "policy" and "no episode key" in (e.client or "") for e in episodes)
    turns = sorted(len(store.turns.policy_turns(e.id)) for e in episodes)
    assert turns == [1, 3, 3]
    parser = next(e for e in episodes if e.task == "fix the parser")
    recorded = [t.request["messages"] for t in store.turns.policy_turns(parser.id)]
    assert [len(m) for m in recorded] == [2, 4, 6] and recorded[2][-1]["content"] == "fix the parser: go on (1)"


def test_identical_conversations_keep_episodes_of_their_own(store: EpisodeStore) -> None:
    """Two agents with the same prompt and the same (greedy) answers: every turn of each continues
    the other's just as well, and still each gets an episode of its own, whatever the order."""
    http = TestClient(Gateway(CannedEngine(), store).app)
    first = [{"role": "user", "content": "same task"}]
    agents = [list(first), list(first)]
    for turn in range(3):
        for messages in agents:
            assert http.post("/v1/chat/completions", json=_chat(messages)).status_code == 200
            messages += [ANSWER, {"role": "user", "content": f"next {turn}"}]
    episodes = [e for e in store.list_episodes() if e.implicit]
    assert len(episodes) == 2 and [len(store.turns.policy_turns(e.id)) for e in episodes] == [3, 3]


def test_concurrent_first_calls_open_one_episode_each(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(), store).app)
    results: list[int] = []

    def call(i: int) -> None:
        results.append(
            http.post("/v1/chat/completions", json=_chat([{"role": "user", "content": f"t{i % 2}"}])).status_code
        )

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [200] * 8
    episodes = [e for e in store.list_episodes() if e.implicit]
    assert len(episodes) == 8 and all(len(store.turns.policy_turns(e.id)) == 1 for e in episodes)


def test_a_conversation_whose_episode_ended_goes_on_in_a_new_one(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(), store).app)
    messages = [{"role": "user", "content": "long job"}]
    assert http.post("/v1/chat/completions", json=_chat(messages)).status_code == 200
    [first] = store.list_episodes()
    store.end_with_outcome(first.id, EpisodeStatus.timeout)  # as the idle sweep ends it
    messages += [ANSWER, {"role": "user", "content": "still there?"}]
    answer = http.post("/v1/chat/completions", json=_chat(messages))
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "42"
    [ended, again] = sorted(store.list_episodes(), key=lambda e: e.created_at)
    assert (ended.id, ended.status, again.status) == (first.id, EpisodeStatus.timeout, EpisodeStatus.open)
    assert [len(store.turns.policy_turns(e.id)) for e in (ended, again)] == [1, 1]
    assert len(store.turns.policy_turns(again.id)[0].request["messages"]) == 3  # the whole conversation, as sent


def test_a_conversation_stays_in_one_episode_when_no_prompt_token_ids_are_recorded(store: EpisodeStore) -> None:
    """An engine that forwards to a server which returns no prompt token ids records none
    (`ProxyEngine`), so matching a conversation cannot lean on them."""
    engine = CannedEngine()
    engine.prompt_token_ids = []  # what such an upstream reports
    http = TestClient(Gateway(engine, store).app)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "no ids"}]
    for turn in range(3):
        assert http.post("/v1/chat/completions", json=_chat(messages)).status_code == 200
        messages += [ANSWER, {"role": "user", "content": f"more {turn}"}]
    [episode] = store.list_episodes()
    turns = store.turns.policy_turns(episode.id)
    assert episode.implicit and len(turns) == 3 and all(t.prompt_token_ids is None for t in turns)
