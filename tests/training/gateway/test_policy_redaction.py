"""Policy turns are redacted before they are stored, with their token ids and logprobs kept exact.

Through the real gateway (TestClient) into a real SQLite log, read back both through the store and
as raw rows, so a secret hiding in any column (or in the per-token bytes) is caught.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st
from starlette.testclient import TestClient

from episodes.codec import CHOICE_TAG, decode_choice, encode_choice
from episodes.policy_turns import EncodedTurn, RedactedRequest, common_prefix_length, redact_choice
from episodes.redaction import redact
from episodes.store import EpisodeStore
from tests.logdata import CannedEngine, make_choice
from training.gateway.app import Gateway

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_" + "A1b2" * 9
TOOL_SECRET = "s3cr3t-value-123"
SECRETS = (AWS_KEY, GITHUB_TOKEN, TOOL_SECRET)

PIECES = ["Use ", "AKIA", "IOSFODNN", "7EXAMPLE", " to deploy."]
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "deploy", "arguments": json.dumps({"api_key": TOOL_SECRET, "region": "eu"})},
}


def _raw_rows(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return repr(conn.execute("SELECT * FROM policy_turns").fetchall())


def _spelled_by_bytes(choice: dict[str, Any]) -> str:
    entries = (choice[CHOICE_TAG].get("logprobs") or {}).get("content") or []
    return bytes(b for e in entries for b in (e.get("bytes") or [])).decode()


def test_secrets_in_prompt_and_completion_never_reach_the_log(tmp_path: Path) -> None:
    db = tmp_path / "ep.db"
    store = EpisodeStore.open(str(db))
    engine = CannedEngine(PIECES, token_ids=[501, 502, 503, 504, 505], tool_calls=[TOOL_CALL])
    http = TestClient(Gateway(engine, store).app)
    episode_id = http.post("/episodes", json={"task": "deploy the service"}).json()["episode_id"]
    url = f"/episodes/{episode_id}/v1/chat/completions"
    messages = [{"role": "user", "content": f"Deploy. The repo token is {GITHUB_TOKEN}."}]
    answer = http.post(url, json={"model": "student", "messages": messages, "logprobs": True}).json()
    sent = answer["choices"][0]
    assert sent["message"]["content"] == "".join(PIECES)  # the client gets what was sampled

    [turn] = store.turns.policy_turns(episode_id)
    raw = _raw_rows(db)
    for secret in SECRETS:
        assert secret not in raw, secret
    assert GITHUB_TOKEN not in json.dumps(turn.request)
    stored = turn.choice[CHOICE_TAG]
    assert stored["message"]["content"] == "Use [REDACTED:aws_access_key] to deploy."
    assert TOOL_SECRET not in stored["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(stored["message"]["tool_calls"][0]["function"]["arguments"])["region"] == "eu"
    assert AWS_KEY not in _spelled_by_bytes(turn.choice)  # per-token bytes would spell it: dropped

    # What GRPO trains on is exact: token ids, logprob tokens and floats (bit for bit).
    assert turn.prompt_token_ids == engine.prompt_token_ids
    assert turn.completion_token_ids == [501, 502, 503, 504, 505]
    assert [(e["token"], e["logprob"]) for e in stored["logprobs"]["content"]] == [
        (e["token"], e["logprob"]) for e in sent["logprobs"]["content"]
    ]
    assert stored["finish_reason"] == sent["finish_reason"] and stored["index"] == sent["index"]

    # The client echoes the unredacted answer, its tool call included; the engine is handed the exact
    # earlier tokens to splice (token in, token out; `test_gateway.py` checks the tiny engine's splice
    # against redacted text).
    echoed = {"role": "assistant", "content": sent["message"]["content"], "tool_calls": sent["message"]["tool_calls"]}
    follow = [*messages, echoed, {"role": "user", "content": "ok"}]
    assert http.post(url, json={"model": "student", "messages": follow}).status_code == 200
    prior = engine.calls[-1][1]
    assert prior is not None and prior.completion_token_ids == [501, 502, 503, 504, 505]
    assert prior.prompt_token_ids == engine.prompt_token_ids
    # An answer the policy did not give is no continuation: nothing to splice.
    other = [*follow, {"role": "assistant", "content": "something else"}, {"role": "user", "content": "ok"}]
    assert http.post(url, json={"model": "student", "messages": other}).status_code == 200
    assert engine.calls[-1][1] is None
    for secret in SECRETS:
        assert secret not in _raw_rows(db), secret
    store.close()


def test_a_request_redacted_by_the_caller_is_stored_as_the_store_would_redact_it(store: EpisodeStore) -> None:
    request = {"messages": [{"role": "user", "content": f"The repo token is {GITHUB_TOKEN}."}], "tools": None}
    choice = {CHOICE_TAG: {"message": {"role": "assistant", "content": "ok"}}}
    episode = store.start_episode("t")
    for given in (request, RedactedRequest.of(request)):
        store.turns.add_policy_turn(episode.id, EncodedTurn.of(model="student", request=given, choice=choice))
    by_store, by_caller = store.turns.policy_turns(episode.id)
    assert by_caller.request == by_store.request and GITHUB_TOKEN not in json.dumps(by_caller.request)


def test_a_turn_without_secrets_is_stored_exactly(store: EpisodeStore) -> None:
    openai = pytest.importorskip("openai")

    choice = make_choice("The answer is 42.", [7, 8, 9], [-0.5, -0.25, -1e-7])
    episode = store.start_episode("t")
    request = {"messages": [{"role": "user", "content": "q"}]}
    store.turns.add_policy_turn(
        episode.id, EncodedTurn.of(model="student", request=request, choice=encode_choice(choice))
    )
    [turn] = store.turns.policy_turns(episode.id)
    assert turn.choice == encode_choice(choice)
    restored = decode_choice(turn.choice)
    assert isinstance(restored, openai.types.chat.chat_completion.Choice) and restored == choice


def test_the_codec_round_trip_keeps_everything_but_the_secret(store: EpisodeStore) -> None:
    pytest.importorskip("openai")

    arguments = json.dumps({"password": TOOL_SECRET, "region": "eu"})
    secret_call = {"id": "c", "type": "function", "function": {"name": "deploy", "arguments": arguments}}
    choice = make_choice(f"key {AWS_KEY}", [1, 2, 3], [-0.125, -2.0, -1e-9], tool_call=secret_call)
    episode = store.start_episode("t")
    store.turns.add_policy_turn(
        episode.id, EncodedTurn.of(model="student", request={"messages": []}, choice=encode_choice(choice))
    )
    restored = decode_choice(store.turns.policy_turns(episode.id)[0].choice)
    assert restored.message.content == "key [REDACTED:aws_access_key]"
    assert restored.finish_reason == choice.finish_reason and restored.index == choice.index
    assert [(t.token, t.logprob) for t in restored.logprobs.content] == [
        (t.token, t.logprob) for t in choice.logprobs.content
    ]
    assert all(t.bytes is None for t in restored.logprobs.content)
    restored_call, original_call = restored.message.tool_calls[0], choice.message.tool_calls[0]
    assert json.loads(restored_call.function.arguments) == {"password": "[REDACTED:assignment]", "region": "eu"}
    assert (restored_call.id, restored_call.function.name) == (original_call.id, original_call.function.name)


def test_text_logprob_tokens_would_spell_the_secret_so_they_are_dropped() -> None:
    """An upstream that returns text tokens (no `token_id:N`): the tokens themselves spell the key."""
    choice = {
        CHOICE_TAG: {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": AWS_KEY},
            "logprobs": {"content": [{"token": t, "logprob": -0.1, "bytes": None} for t in ("AKIA", "IOSFODNN")]},
        }
    }
    clean = redact_choice(choice)
    assert AWS_KEY not in json.dumps(clean) and clean[CHOICE_TAG]["logprobs"] is None
    assert redact_choice(clean) == clean  # idempotent


_texts = st.sampled_from(["plain", f"key {AWS_KEY}", f"token {GITHUB_TOKEN} here", "api_key=abc123def456ghi"])
_messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]), "content": _texts}), max_size=5
)
_requests = st.fixed_dictionaries(
    {"messages": _messages, "tools": st.sampled_from([None, [{"name": "deploy", "api_key": TOOL_SECRET}]])},
    optional={"params": st.fixed_dictionaries({"seed": st.integers(0, 3)}), "password": _texts},
)


@hypothesis.given(before=_requests, kept=st.integers(0, 5), added=_messages, tools_changed=st.booleans())
def test_redacting_after_a_turn_reuses_its_redaction_and_equals_redacting_it_all(
    before: dict[str, Any], kept: int, added: list[dict[str, Any]], tools_changed: bool
) -> None:
    """The policy endpoint redacts only what a request adds to the last turn it recorded; the
    result must be exactly `redact(request)`, whether the conversation continues, is cut short,
    or changes under it."""
    last = EncodedTurn.of(
        model="m", request=before, choice={CHOICE_TAG: {}}, prompt_token_ids=[1], completion_token_ids=[2]
    )
    context = last.context(1)
    request = {**before, "messages": [*before["messages"][:kept], *added]}
    if tools_changed:
        request["tools"] = [{"name": "other"}]
    redacted = RedactedRequest.of(request, after=context).data
    assert redacted == redact(request)
    shared = common_prefix_length(request["messages"], before["messages"])
    assert all(a is b for a, b in zip(redacted["messages"][:shared], context.last_request["messages"], strict=False))
