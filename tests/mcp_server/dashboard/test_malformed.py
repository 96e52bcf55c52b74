"""Every route of the dashboard against the shared table of malformed input (`tests/common/malformed.py`):
each answer is a clean 4xx, never a 5xx or a traceback, and the episode log is unchanged. Before, a
body nested 100,000 deep made every action a 500 (Python's json raised RecursionError)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from mcp_server.dashboard.api import MAX_BODY_BYTES
from mcp_server.dashboard.app import guarded_app
from mcp_server.settings import load_settings
from tests.common.malformed import RouteSpec, db_snapshot, throw
from tests.mcp_server.dashboard.seed import Seeded, seed

TOKEN = "s3cret-token-for-the-tests"
SIGNED_IN = {"X-Rlide-Request": "1", "Authorization": f"Bearer {TOKEN}"}
ROUTES = [
    RouteSpec("GET", "/api/episodes", takes_query=True),
    RouteSpec("GET", "/api/episodes/count", takes_query=True),
    RouteSpec("GET", "/api/episodes/{id}"),
    RouteSpec("DELETE", "/api/episodes/{id}", {"confirm": "{id}"}),
    RouteSpec("GET", "/api/episodes/{id}/steps/1"),
    RouteSpec("GET", "/api/episodes/{id}/comparable"),
    RouteSpec("POST", "/api/episodes/{id}/rate", {"value": 1, "author": "a"}),
    RouteSpec("POST", "/api/episodes/{id}/relabel", {"status": "success"}),
    RouteSpec("POST", "/api/episodes/{id}/exclude", {"excluded": True}),
    RouteSpec("POST", "/api/episodes/{id}/clear-flags", {"author": "a"}),
    RouteSpec("GET", "/api/preferences", takes_query=True),
    RouteSpec("POST", "/api/preferences", {"a": "x", "b": "y", "verdict": "a", "author": "a"}),
    RouteSpec("GET", "/api/training/{id}"),
    RouteSpec("POST", "/login", {}),
]
UNREAD = {"/", "/static", "/api/whoami", "/api/training", "/api/index"}
"""Routes that read no input: nothing malformed to send them."""


@pytest.fixture
def ids(rlide_home: Path) -> Iterator[Seeded]:
    from episodes.store import EpisodeStore

    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    yield seed(store)
    store.close()


def test_every_route_answers_malformed_input_with_a_clean_4xx(ids: Seeded, rlide_home: Path) -> None:
    app = guarded_app(load_settings(http_host="127.0.0.1", http_token=TOKEN))
    served = {
        route.path.replace("{episode_id}", "{id}").replace("{run}", "{id}").replace("{step_id:int}", "1")
        for route in app.app.routes  # type: ignore[attr-defined]
    }
    assert served - UNREAD == {r.path for r in ROUTES}, "a route is untested"
    before = db_snapshot(rlide_home / "episodes.db")
    with TestClient(app, base_url="http://127.0.0.1:8765", raise_server_exceptions=False) as http:
        answers = throw(http, ROUTES, ids.good, SIGNED_IN, MAX_BODY_BYTES)
    print("\n" + answers.summary("dashboard"))
    assert answers.bad == [], "\n".join(answers.bad)
    assert db_snapshot(rlide_home / "episodes.db") == before
