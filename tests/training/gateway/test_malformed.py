"""Every route of the policy endpoint against the shared table of malformed input
(`tests/common/malformed.py`): each answer is a clean 4xx in OpenAI's error shape, never a 5xx or a
traceback, nothing is sampled, and the episode log is unchanged. Before, a form or text/plain post was
read as JSON, and a bad episode id on /episodes/{id}/v1/models was ignored."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from episodes.records import EpisodeSource
from episodes.store import EpisodeStore
from tests.common.malformed import RouteSpec, db_snapshot, throw
from tests.logdata import CannedEngine
from training.gateway.app import MAX_REQUEST_BYTES, Gateway

CHAT = {"messages": [{"role": "user", "content": "Write a number."}], "max_tokens": 2}
ROUTES = [
    RouteSpec("POST", "/v1/chat/completions", CHAT),
    RouteSpec("POST", "/episodes", {"task": "answer"}),
    RouteSpec("GET", "/episodes/{id}/v1/models"),
    RouteSpec("POST", "/episodes/{id}/v1/chat/completions", CHAT),
    RouteSpec("POST", "/episodes/{id}/end", {"outcome": "success", "reward": 1}),
]


def test_every_route_answers_malformed_input_with_a_clean_4xx(store: EpisodeStore, tmp_path: Path) -> None:
    engine = CannedEngine()
    gateway = Gateway(engine, store, bind_host="127.0.0.1")
    served = {route.path for route in gateway.routes.routes}  # type: ignore[attr-defined]
    assert served - {"/v1/models"} == {r.path.replace("{id}", "{episode_id}") for r in ROUTES}, "a route is untested"
    episode_id = store.start_episode("answer", source=EpisodeSource.policy).id
    before = db_snapshot(tmp_path / "episodes.db")
    with TestClient(gateway.app, base_url="http://127.0.0.1:8766", raise_server_exceptions=False) as http:
        answers = throw(http, ROUTES, episode_id, {}, MAX_REQUEST_BYTES)
    print("\n" + answers.summary("policy endpoint"))
    assert answers.bad == [], "\n".join(answers.bad)
    assert engine.calls == []
    assert db_snapshot(tmp_path / "episodes.db") == before
