"""One attempt, one episode: an agent run whose model is the student calls the policy endpoint for
its turns and rlide's MCP tools for its work; with `RLIDE_EPISODE` (the api_key the endpoint's
`POST /episodes` returned) the MCP server puts those tool calls into the same episode.

Real parts: the MCP server through the SDK's in-memory client, the policy endpoint's ASGI app over
starlette's TestClient, one SQLite episode log. The endpoint's engine is `CannedEngine` (a real
PolicyEngine without torch): what is under test is where each call lands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from episodes.records import EpisodeStatus
from episodes.store import EpisodeStore
from mcp_server.server import build_server
from mcp_server.settings import load_settings
from tests.logdata import CannedEngine
from tests.mcp_calls import call_error, call_ok
from training.gateway.app import Gateway

TOKEN = "policy-token-5f2c9a1e"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
CHAT = {"model": "student", "messages": [{"role": "user", "content": "Fix the bug."}], "max_tokens": 4}


def _endpoint(home: Path) -> tuple[EpisodeStore, TestClient]:
    store = EpisodeStore.open(load_settings(home=home).episode_db_url)
    return store, TestClient(Gateway(CannedEngine(), store, token=TOKEN).app)


@pytest.mark.anyio
@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_the_model_turns_and_tool_calls_of_one_run_are_one_episode(tmp_path: Path, era: Any) -> None:
    store, http = _endpoint(tmp_path)
    started = http.post("/episodes", json={"task": "fix the bug"}, headers=ADMIN).json()
    settings = load_settings(home=tmp_path, episode=started["api_key"], policy_token=TOKEN)
    async with Client(build_server(settings), mode=era) as client:
        turn = http.post("/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {started['api_key']}"})
        assert turn.status_code == 200
        rated = await call_ok(client, "give_feedback", {"rating": 0.5, "comment": "looks right"})
        assert rated["episode_id"] == started["episode_id"]
        await call_ok(client, "list_episodes", {})  # inside the episode: a step of it
    # The MCP session is gone; the episode is not its to end.
    detail = store.detail(started["episode_id"])
    assert detail.episode.status is EpisodeStatus.open and not detail.episode.implicit
    assert [s.tool for s in detail.steps] == ["give_feedback", "list_episodes"]
    assert detail.episode.turn_count == 1 and [e.id for e in store.list_episodes()] == [started["episode_id"]]
    store.close()


@pytest.mark.anyio
async def test_a_forged_or_ended_episode_is_not_adopted_and_the_log_says_why(tmp_path: Path) -> None:
    store, http = _endpoint(tmp_path)
    ended = http.post("/episodes", json={"task": "done already"}, headers=ADMIN).json()
    assert http.post(f"/episodes/{ended['episode_id']}/end", json={"outcome": "failure"}, headers=ADMIN).is_success
    victim = http.post("/episodes", json={"task": "someone else's"}, headers=ADMIN).json()
    for given, why in [
        (f"rk-{victim['episode_id']}", "not an api_key the policy endpoint minted"),  # unsigned, under a token
        (ended["api_key"], "has ended"),
        ("ep_00000000000000000000", "ep_00000000000000000000"),
    ]:
        settings = load_settings(home=tmp_path, episode=given, policy_token=TOKEN)
        with capture_logs() as logs:
            async with Client(build_server(settings), mode="legacy") as client:
                refusal = await call_error(client, "give_feedback", {"rating": -0.5})  # nothing of its own to rate
        assert "no open episode" in refusal
        [refused] = [e for e in logs if e["event"] == "episode_not_adopted"]
        signature = given.partition(".")[2]  # a key's secret part is never logged
        assert why in refused["reason"] and not (signature and signature in refused["reason"]), refused
    implicit = [e for e in store.list_episodes() if e.implicit]  # where each server's call went instead
    assert len(implicit) == 3 and all([s.tool for s in store.detail(e.id).steps] == ["give_feedback"] for e in implicit)
    assert store.detail(victim["episode_id"]).steps == [] and store.detail(ended["episode_id"]).steps == []
    store.close()
