"""What the policy endpoint says and records about the episode log: /v1/models names the log it serves,
and an episode ended through it gets the outcome reward MCP's `end_episode` gives one.

The engine is `CannedEngine` (a real PolicyEngine without torch); the MCP side is the real server in
memory, on the same log."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from starlette.testclient import TestClient

from episodes.records import EpisodeSource, EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from mcp_server.server import build_server
from mcp_server.settings import load_settings
from tests.logdata import CannedEngine
from tests.mcp_calls import call_ok
from training.gateway.app import Gateway

openai = pytest.importorskip("openai")


def test_the_models_list_names_the_episode_log_and_the_openai_client_still_reads_it(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(), store).app)
    raw = http.get("/v1/models").json()
    assert raw["object"] == "list" and {m["episode_log"] for m in raw["data"]} == {store.url}
    assert store.url.startswith("sqlite:///") and store.url.endswith("episodes.db")
    episode_base = http.post("/episodes", json={"task": "Write a number."}).json()["base_url"]
    assert episode_base.startswith("http://testserver/episodes/") and episode_base.endswith("/v1")
    for base in ("http://testserver/v1", episode_base):
        client = openai.OpenAI(base_url=base, api_key="unused", http_client=http, max_retries=0)
        models = client.models.list().data
        assert [(m.id, m.object, m.owned_by) for m in models] == [
            ("student", "model", "rlide"),
            ("student@0", "model", "rlide"),
        ]
        assert [(m.model_extra or {}).get("episode_log") for m in models] == [store.url, store.url]
        assert [(m.model_extra or {}).get("max_model_len") for m in models] == [32768, 32768]
    unknown = TestClient(Gateway(CannedEngine(context_length=None), store).app).get("/v1/models").json()["data"]
    assert all("max_model_len" not in m for m in unknown)  # not known: not stated, never 0


def test_a_password_in_the_log_url_is_not_shown(store: EpisodeStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PostgreSQL log's URL carries its password; /v1/models shows it masked, as `rlide doctor` does."""
    monkeypatch.setattr(store.db, "url", "postgresql://rlide:s3cret-pw@db.internal:5432/episodes")
    listed = TestClient(Gateway(CannedEngine(), store).app).get("/v1/models").json()["data"]
    assert {m["episode_log"] for m in listed} == {"postgresql://rlide:***@db.internal:5432/episodes"}


def _rewards(store: EpisodeStore, episode_id: str) -> list[tuple[RewardSource, float, str | None]]:
    return [(r.source, r.value, r.comment) for r in store.detail(episode_id).rewards]


@pytest.mark.anyio
@pytest.mark.parametrize(("outcome", "value"), [("success", 1.0), ("failure", -1.0), ("aborted", 0.0)])
async def test_an_episode_ended_through_the_endpoint_gets_mcps_outcome_reward(
    tmp_path: Path, outcome: str, value: float
) -> None:
    """The same outcome ends one episode through MCP's end_episode and one through the endpoint, on one
    log: both record the same outcome reward (success +1, failure -1, aborted 0) and end with the same
    reward. Before, a policy episode ended as a failure through the endpoint had no reward at all."""
    settings = load_settings(home=tmp_path)
    async with Client(build_server(settings), mode="legacy") as mcp:
        started = await call_ok(mcp, "start_episode", {"task": "write a number"})
        ended = await call_ok(mcp, "end_episode", {"outcome": outcome, "episode_id": started["episode_id"]})
    assert ended["outcome_reward"] == value
    store = EpisodeStore.open(settings.episode_db_url)
    try:
        http = TestClient(Gateway(CannedEngine(), store).app)
        episode_id = http.post("/episodes", json={"task": "write a number"}).json()["episode_id"]
        done = http.post(f"/episodes/{episode_id}/end", json={"outcome": outcome})
        assert done.status_code == 200, done.text
        assert done.json()["status"] == outcome and done.json()["reward_total"] == value
        by_mcp, by_endpoint = started["episode_id"], episode_id
        assert (
            _rewards(store, by_endpoint)
            == _rewards(store, by_mcp)
            == [(RewardSource.outcome, value, f"outcome: {outcome}")]
        )
        policy = store.get_episode(by_endpoint)
        assert (policy.source, policy.status) == (EpisodeSource.policy, EpisodeStatus(outcome))
        assert policy.reward_total == store.get_episode(by_mcp).reward_total == value

        # With the caller's own reward: the outcome, then that reward as a claim (an unverified rating,
        # as an agent's own give_feedback is stored), never evidence; ending twice is refused.
        second = http.post("/episodes", json={"task": "write a number"}).json()["episode_id"]
        judged = http.post(f"/episodes/{second}/end", json={"outcome": outcome, "reward": 0.5})
        assert judged.status_code == 200, judged.text
        assert _rewards(store, second) == [
            (RewardSource.outcome, value, f"outcome: {outcome}"),
            (RewardSource.feedback, 0.5, "gateway: the caller's reward"),
        ]
        assert not any(r.verified for r in store.detail(second).rewards)
        again = http.post(f"/episodes/{second}/end", json={"outcome": "success"})
        assert again.status_code == 409 and len(_rewards(store, second)) == 2
    finally:
        store.close()
