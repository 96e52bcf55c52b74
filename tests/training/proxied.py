"""A recorded turn through a gateway that forwards to a policy server (`ProxyEngine`), checked the same
way wherever one is built (test_served_runs.py, backends/test_art_cpu.py)."""

from __future__ import annotations

import openai
from starlette.testclient import TestClient

from training.gateway.app import Gateway
from training.gateway.engines import ProxyEngine


def assert_proxied_turn_recorded(gateway: Gateway, step: int, recorded: str) -> None:
    """The gateway lists the alias and `student@{step}`; an episode's turn through it is recorded as
    that checkpoint of the run's model (`recorded`), with the upstream's prompt token ids and the
    sampled tokens' ids."""
    assert isinstance(gateway.engine, ProxyEngine)
    http = TestClient(gateway.app)
    assert [m["id"] for m in http.get("/v1/models").json()["data"]] == ["student", f"student@{step}"]
    episode_id = http.post("/episodes", json={"task": "Write a number."}).json()["episode_id"]
    client = openai.OpenAI(base_url=f"http://testserver/episodes/{episode_id}/v1", api_key="x", http_client=http)
    resp = client.chat.completions.create(
        model="student", messages=[{"role": "user", "content": "Write a number."}], max_tokens=4, logprobs=True
    )
    assert resp.choices[0].logprobs is not None and resp.choices[0].logprobs.content
    [turn] = gateway.store.turns.policy_turns(episode_id)
    assert turn.model == f"{recorded}@{step}" and turn.prompt_token_ids
    assert turn.completion_token_ids == [int(t.token.split(":")[1]) for t in resp.choices[0].logprobs.content]
