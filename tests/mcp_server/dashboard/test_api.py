"""The dashboard's API over a real episode log: listing and filtering in SQL, one episode, each action
(and the same action's record in the curation history), and bad input to every action: a clear 400
that changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from episodes.records import RewardSource, Verdict
from episodes.store import EpisodeStore
from mcp_server.dashboard.app import guarded_app
from mcp_server.settings import load_settings
from tests.mcp_server.dashboard.seed import Seeded, seed

PAGE = {"X-Rlide-Request": "1"}


@pytest.fixture
def log(rlide_home: Path) -> Iterator[tuple[EpisodeStore, Seeded]]:
    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    yield store, seed(store)
    store.close()


@pytest.fixture
def client(log: Any) -> Iterator[TestClient]:
    with TestClient(guarded_app(load_settings()), base_url="http://127.0.0.1:8765") as http:
        yield http


def _snapshot(store: EpisodeStore) -> tuple[Any, ...]:
    """Everything an action could change."""
    episodes = store.list_episodes(limit=1000)
    rewards = [(r.episode_id, r.source, r.value) for e in episodes for r in store.detail(e.id).rewards]
    return (
        [(e.id, e.status, e.excluded) for e in episodes],
        rewards,
        store.preferences.list(),
        [c.id for c in store.curation_log()],
    )


def test_list_filters_and_pages_in_sql(client: TestClient, log: Any) -> None:
    store, ids = log
    everything = client.get("/api/episodes").json()
    assert [e["id"] for e in everything["episodes"]] == [e.id for e in store.list_episodes(limit=50)]
    assert everything["has_more"] is False and client.get("/api/episodes/count").json() == {"count": 5}

    first = client.get("/api/episodes", params={"limit": 2}).json()
    second = client.get("/api/episodes", params={"limit": 2, "offset": 2}).json()
    assert first["has_more"] and len(first["episodes"]) == len(second["episodes"]) == 2
    assert {e["id"] for e in first["episodes"]}.isdisjoint(e["id"] for e in second["episodes"])

    def ids_for(**params: Any) -> set[str]:
        return {e["id"] for e in client.get("/api/episodes", params=params).json()["episodes"]}

    assert ids_for(q="CALC.PY") == {ids.good, ids.bad}  # case-insensitive substring of the task
    assert ids_for(q="100%_") == set()  # LIKE wildcards are text, not patterns
    assert ids_for(min_reward=0.5) == {ids.good, ids.policy}
    assert ids_for(max_reward=-0.5) == {ids.bad}
    assert ids_for(status="aborted") == {ids.hostile}
    assert ids_for(source="policy") == {ids.policy}
    assert ids_for(since="2000-01-01", until="2999-01-01") == {ids.good, ids.bad, ids.hostile, ids.policy, ids.long}
    assert ids_for(since="2999-01-01") == set()
    store.exclude_episode(ids.bad)
    assert ids_for(excluded="true") == {ids.bad}
    assert ids.bad not in ids_for(excluded="false")
    assert client.get("/api/episodes/count", params={"q": "calc", "excluded": "false"}).json() == {"count": 1}


def test_one_episode_with_its_diff_turns_and_folded_results(client: TestClient, log: Any) -> None:
    store, ids = log
    detail = client.get(f"/api/episodes/{ids.good}").json()
    assert detail["episode"]["id"] == ids.good and detail["solution"].endswith("+    return a + b\n")
    assert [s["kind"] for s in detail["states"]] == ["start", "end"]
    run = detail["steps"][1]
    assert run["result"]["folded"] and run["result"]["chars"] == 5009 and len(run["result"]["text"]) == 2000
    whole = client.get(f"/api/episodes/{ids.good}/steps/{run['id']}").json()
    assert len(whole["result"]) == 5009
    turns = client.get(f"/api/episodes/{ids.policy}").json()["turns"]
    assert [t["tokens_total"] for t in turns] == [3, 2] and turns[0]["tokens"][0]["logprob"] == -0.5
    assert [e["id"] for e in client.get(f"/api/episodes/{ids.good}/comparable").json()["episodes"]] == [ids.bad]
    assert client.get("/api/episodes/ep_nothere00000000000000").status_code == 404
    assert client.get(f"/api/episodes/{ids.good}/steps/999999").status_code == 400


def test_each_action_changes_the_log_and_is_recorded(client: TestClient, log: Any) -> None:
    store, ids = log
    rated = client.post(
        f"/api/episodes/{ids.good}/rate", json={"value": -1, "comment": "meh", "author": "ana"}, headers=PAGE
    )
    assert rated.status_code == 200 and rated.json()["reward_components"]["feedback"] == -1.0
    assert [r.value for r in store.detail(ids.good).rewards if r.source is RewardSource.feedback] == [-1.0]

    relabelled = client.post(
        f"/api/episodes/{ids.bad}/relabel", json={"status": "success", "note": "flaky"}, headers=PAGE
    )
    assert relabelled.json()["status"] == "success"
    assert client.post(f"/api/episodes/{ids.bad}/exclude", json={"excluded": True}, headers=PAGE).json()["excluded"]
    assert client.get(f"/api/episodes/{ids.good}").json()["flags"][0]["kind"] == "touches_tests"
    cleared = client.post(f"/api/episodes/{ids.good}/clear-flags", json={"author": "ana"}, headers=PAGE)
    assert cleared.status_code == 200 and cleared.json()["flags"] == 0
    assert [f.cleared_by for f in store.flags(ids.good)] == ["ana"]
    assert client.post(f"/api/episodes/{ids.good}/clear-flags", json={}, headers=PAGE).status_code == 400

    preferred = client.post(
        "/api/preferences", json={"a": ids.good, "b": ids.bad, "verdict": "b", "author": "ana"}, headers=PAGE
    )
    assert preferred.status_code == 200
    assert [(p.episode_b, p.verdict, p.author) for p in store.preferences.list()] == [(ids.bad, Verdict.b, "ana")]
    assert client.get("/api/preferences", params={"episode": ids.bad}).json()["preferences"][0]["verdict"] == "b"

    deleted = client.request("DELETE", f"/api/episodes/{ids.hostile}", json={"confirm": ids.hostile}, headers=PAGE)
    assert deleted.json() == {"deleted": ids.hostile}
    actions = {(c.episode_id, c.action.value) for c in store.curation_log()}
    assert {(ids.good, "rate"), (ids.bad, "relabel"), (ids.bad, "exclude"), (ids.good, "prefer"), (ids.bad, "prefer"),
            (ids.hostile, "delete")} <= actions  # fmt: skip


BAD_INPUT = [
    ("POST", "rate", {"value": 2, "author": "a"}, "less than or equal to 1"),
    ("POST", "rate", {"value": 0.5}, "author"),
    ("POST", "rate", {"value": 0.5, "author": "   "}, "author"),
    ("POST", "rate", {"value": "good", "author": "a"}, "value"),
    ("POST", "rate", {"value": 0.5, "author": "a", "extra": 1}, "extra"),
    ("POST", "rate", [1, 2], "JSON object"),
    ("POST", "relabel", {"status": "open"}, "status"),
    ("POST", "relabel", {"status": "timeout"}, "status"),
    ("POST", "exclude", {"excluded": "maybe"}, "excluded"),
    ("POST", "exclude", {}, "excluded"),
    ("DELETE", "", {}, "confirm"),
    ("DELETE", "", {"confirm": "ep_other"}, "send its id again"),
]


@pytest.mark.parametrize(("method", "action", "body", "says"), BAD_INPUT)
def test_bad_input_to_each_action_is_a_clear_400_that_changes_nothing(
    client: TestClient, log: Any, method: str, action: str, body: Any, says: str
) -> None:
    store, ids = log
    before = _snapshot(store)
    path = f"/api/episodes/{ids.good}" + (f"/{action}" if action else "")
    response = client.request(method, path, json=body, headers=PAGE)
    assert response.status_code == 400, response.text
    assert says in response.json()["error"]
    assert _snapshot(store) == before


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"a": "SAME", "b": "SAME", "verdict": "a", "author": "x"}, 400, "two different episodes"),
        ({"a": "GOOD", "b": "HOSTILE", "verdict": "a", "author": "x"}, 400, "not of one situation"),
        ({"a": "GOOD", "b": "BAD", "verdict": "maybe", "author": "x"}, 400, "verdict"),
        ({"a": "GOOD", "b": "BAD", "verdict": "a", "author": ""}, 400, "author"),
        ({"a": "GOOD", "b": "ep_nothere00000000000000", "verdict": "a", "author": "x"}, 404, "no episode"),
        ({"a": "GOOD", "b": "../etc/passwd", "verdict": "a", "author": "x"}, 404, "no episode"),
    ],
)
def test_bad_preferences_change_nothing(
    client: TestClient, log: Any, body: dict[str, Any], status: int, says: str
) -> None:
    store, ids = log
    names = {"SAME": ids.good, "GOOD": ids.good, "BAD": ids.bad, "HOSTILE": ids.hostile}
    body = {k: names.get(v, v) if isinstance(v, str) else v for k, v in body.items()}
    before = _snapshot(store)
    response = client.post("/api/preferences", json=body, headers=PAGE)
    assert response.status_code == status, response.text
    assert says in response.json()["error"].lower()
    assert _snapshot(store) == before


def test_an_open_episode_cannot_be_compared_or_deleted(client: TestClient, log: Any) -> None:
    store, ids = log
    open_one = store.start_episode("Fix the failing test in calc.py: add() subtracts").id
    before = _snapshot(store)
    compared = client.post(
        "/api/preferences", json={"a": ids.good, "b": open_one, "verdict": "a", "author": "x"}, headers=PAGE
    )
    deleted = client.request("DELETE", f"/api/episodes/{open_one}", json={"confirm": open_one}, headers=PAGE)
    assert (compared.status_code, deleted.status_code) == (409, 409)
    assert "open" in compared.json()["error"] and "open" in deleted.json()["error"]
    assert _snapshot(store) == before


def test_bad_list_parameters(client: TestClient, log: Any) -> None:
    for params, says in [
        ({"limit": 0}, "limit"),
        ({"limit": 100000}, "limit"),
        ({"min_reward": 3}, "min_reward"),
        ({"min_reward": 0.5, "max_reward": 0}, "above max_reward"),
        ({"status": "done"}, "status"),
        ({"since": "yesterday"}, "since"),
        ({"q": "x" * 600}, "q"),
    ]:
        response = client.get("/api/episodes", params=params)
        assert response.status_code == 400 and says in response.json()["error"], (params, response.text)


def test_training_and_evals_and_index(client: TestClient, log: Any, rlide_home: Path) -> None:
    store, _ = log
    assert client.get("/api/training").json() == {"runs": [], "evals": []}
    assert client.get("/api/training/nothere").status_code == 409
    store.runs.ensure_run("r1", backend="cpu", base_model="tiny-qwen2")
    report = {"tasks": "humaneval", "split": "heldout", "model": "student@0", "checkpoint_step": 0, "n": 3,
              "passed": 1, "pass_at_1": 1 / 3, "ci95": {"low": 0.06, "high": 0.79}}  # fmt: skip
    store.runs.record_eval("r1", "humaneval-heldout", report)
    run = client.get("/api/training/r1").json()
    assert run["status"]["run"] == "r1" and run["steps"] == []
    assert [(e["tasks"], e["step"], e["passed"], e["ci95"]["high"]) for e in run["evals"]] == [
        ("humaneval-heldout", 0, 1, 0.79)
    ]
    assert client.get("/api/index").json() == {"workspaces": []}
