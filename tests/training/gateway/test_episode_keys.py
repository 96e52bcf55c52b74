"""One base URL for every agent: `/v1` with an episode's API key records into that episode
(`training/gateway/episode_keys.py`), and a key is no more than a capability for its own episode.

Driven over real HTTP: starlette's TestClient, and the official OpenAI client against a real uvicorn
on loopback. The engine is `CannedEngine` (a real PolicyEngine without torch): what is under test is
which episode a call lands in and who may make it, not sampling.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from episodes.store import EpisodeStore
from tests.logdata import CannedEngine
from tests.training.gateway.test_policy_auth import uvicorn_on_loopback
from training.gateway.app import Gateway
from training.gateway.episode_keys import episode_of, mint

TOKEN = "policy-token-5f2c9a1e"
CHAT = {"model": "student", "messages": [{"role": "user", "content": "Write a number."}], "max_tokens": 4}


def _turns(store: EpisodeStore, episode_id: str) -> int:
    return len(store.turns.policy_turns(episode_id))


def _recorded(store: EpisodeStore) -> int:
    return sum(_turns(store, e.id) for e in store.list_episodes())


def test_a_key_names_its_episode_and_nothing_else_passes_for_one() -> None:
    for token in (None, TOKEN):
        key = mint("ep_0123456789abcdef0123", token)
        assert episode_of(key, token) == "ep_0123456789abcdef0123"
    signed = mint("ep_a", TOKEN)
    assert episode_of(signed, "another-token") is None  # minted under another token
    assert episode_of(mint("ep_a", None), TOKEN) is None  # unsigned, where the endpoint has a token
    assert episode_of(signed.replace("ep_a", "ep_b"), TOKEN) is None  # another episode, the same signature
    assert episode_of(signed[:-1] + ("0" if signed[-1] != "0" else "1"), TOKEN) is None
    assert episode_of(signed, None) is None  # a signature the endpoint cannot check is not let through
    for bad in ("", "sk-abc", "rk-", "rk-../x", "rk-" + "a" * 65):
        assert episode_of(bad, TOKEN) is None and episode_of(bad, None) is None
    with pytest.raises(ValueError, match="not an episode id"):
        mint("../ep", TOKEN)


def test_the_openai_client_records_through_the_shared_base_url_with_the_episodes_key(store: EpisodeStore) -> None:
    openai = pytest.importorskip("openai")
    with uvicorn_on_loopback(Gateway(CannedEngine(), store).app) as base:
        started = httpx.post(f"{base}/episodes", json={"task": "Write a number."}).json()
        other = httpx.post(f"{base}/episodes", json={"task": "Write another."}).json()
        assert started["shared_base_url"] == f"{base}/v1" and started["api_key"] == f"rk-{started['episode_id']}"
        agent = openai.OpenAI(base_url=started["shared_base_url"], api_key=started["api_key"], max_retries=0)
        assert [m.id for m in agent.models.list().data] == ["student", "student@0"]
        for _ in range(2):
            assert agent.chat.completions.create(**CHAT).choices[0].message.content == "42"
        streamed = agent.chat.completions.create(**CHAT, stream=True)
        assert "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices) == "42"
        anonymous = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-anything", max_retries=0)
        assert anonymous.chat.completions.create(**CHAT).choices[0].message.content == "42"
    assert _turns(store, started["episode_id"]) == 3 and _turns(store, other["episode_id"]) == 0
    # A call with no episode's key went to a conversation of its own (tests/.../test_conversations.py).
    [own] = [e for e in store.list_episodes() if e.implicit]
    assert _turns(store, own.id) == 1 and _recorded(store) == 4


def test_with_a_token_a_key_reaches_its_own_episodes_v1_routes_only(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(), store, token=TOKEN).app)
    admin = {"Authorization": f"Bearer {TOKEN}"}
    mine = http.post("/episodes", json={"task": "t"}, headers=admin).json()
    theirs = http.post("/episodes", json={"task": "u"}, headers=admin).json()
    key = {"Authorization": f"Bearer {mine['api_key']}"}
    assert episode_of(mine["api_key"], TOKEN) == mine["episode_id"] and "." in mine["api_key"]

    assert http.post("/v1/chat/completions", json=CHAT, headers=key).status_code == 200
    assert http.get("/v1/models", headers=key).status_code == 200
    refused: list[tuple[str, str, Any]] = [
        ("POST", "/episodes", {"task": "mine now"}),
        ("POST", f"/episodes/{mine['episode_id']}/end", {"outcome": "success"}),
        ("POST", f"/episodes/{theirs['episode_id']}/end", {"outcome": "failure"}),
        ("POST", f"/episodes/{theirs['episode_id']}/v1/chat/completions", CHAT),
        ("GET", f"/episodes/{theirs['episode_id']}/v1/models", None),
    ]
    for method, path, body in refused:
        answer = http.request(method, path, json=body, headers=key)
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "episode_key_scope", (path, answer.text)
    switched = http.post("/v1/chat/completions", json=CHAT, headers={**key, "X-Rlide-Episode": theirs["episode_id"]})
    assert switched.status_code == 403 and "another" in switched.json()["error"]["message"]

    forged = [
        f"rk-{theirs['episode_id']}",  # no signature
        mine["api_key"].replace(mine["episode_id"], theirs["episode_id"]),  # my signature on their episode
        mint(theirs["episode_id"], "a-guessed-token"),
    ]
    for bad in forged:
        answer = http.post("/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {bad}"})
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key", bad
        assert TOKEN not in answer.text
    # The token's holder may name the episode in a header instead.
    named = http.post("/v1/chat/completions", json=CHAT, headers={**admin, "X-Rlide-Episode": theirs["episode_id"]})
    assert named.status_code == 200
    assert (_turns(store, mine["episode_id"]), _turns(store, theirs["episode_id"])) == (1, 1)
    assert all(e.status.value == "open" for e in store.list_episodes())  # no key ended anything


def test_a_key_for_an_episode_that_is_gone_or_ended_records_nothing(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(), store).app)
    ended = http.post("/episodes", json={"task": "t"}).json()
    assert http.post(f"/episodes/{ended['episode_id']}/end", json={"outcome": "success"}).status_code == 200
    late = http.post("/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {ended['api_key']}"})
    assert late.status_code == 409 and "has ended" in late.json()["error"]["message"]
    unknown = {"Authorization": f"Bearer {mint('ep_00000000000000000000', None)}"}
    assert http.post("/v1/chat/completions", json=CHAT, headers=unknown).status_code == 404
    assert http.get("/v1/models", headers=unknown).status_code == 404
    assert _recorded(store) == 0
