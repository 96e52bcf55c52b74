"""The policy endpoint against web pages, in a real headless Chromium: a page on another origin (a
local dev server on another port) and a DNS-rebinding page try to create a policy episode, spend a
completion, read the models and end an open episode with a reward. Before, all of it worked, and
`/end {"outcome": "success", "reward": 1}` wrote a *verified* tests reward of +1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from episodes.records import EpisodeSource, EpisodeStatus
from episodes.store import EpisodeStore
from tests.common.malformed import db_snapshot
from tests.logdata import CannedEngine
from tests.mcp_server.dashboard.browser import attacker_site, headless_chromium, require_chromium, served, wait_for
from training.gateway.app import Gateway

pytestmark = pytest.mark.timeout(180)

CHAT = {"model": "student", "messages": [{"role": "user", "content": "spend my CPU"}], "max_tokens": 2}
ATTACKS = """
async function attack(base, episode, init) {
  const out = {};
  async function go(name, path, options) {
    try {
      const r = await fetch(base + path, options);
      out[name] = r.type === "opaque" ? "sent" : r.status + " " + (await r.text());
    } catch (e) { out[name] = "blocked: " + e; }
  }
  const post = (body) => ({method: "POST", body: JSON.stringify(body), ...init});
  await go("episode", "/episodes", post({task: "pwned by a page"}));
  await go("completion", "/v1/chat/completions", post(CHAT));
  await go("end", "/episodes/" + episode + "/end", post({outcome: "success", reward: 1}));
  await go("models", "/v1/models", {});
  return out;
}
""".replace("CHAT", json.dumps(CHAT))
CROSS_ORIGIN = "{mode: 'no-cors', headers: {'Content-Type': 'text/plain'}}"
"""A "simple request": no preflight, so the browser sends it to any origin (the page cannot read the answer)."""
SAME_ORIGIN = "{headers: {'Content-Type': 'application/json'}}"
"""What a rebound page sends: to the browser the endpoint is its own origin, so nothing stops it."""


@pytest.fixture
def gateway(store: EpisodeStore) -> Iterator[tuple[Gateway, int, str]]:
    """The endpoint served on loopback as `rlide policy serve` serves it, and an open policy episode."""
    gateway = Gateway(CannedEngine(), store, bind_host="127.0.0.1")
    episode = store.start_episode("the agent's real task", source=EpisodeSource.policy)
    with served(gateway.app) as port:
        yield gateway, port, episode.id


def _assert_untouched(gateway: Gateway, episode_id: str, before: Any, tmp_path: Path) -> None:
    store = gateway.store
    assert [e.task for e in store.list_episodes(limit=10)] == ["the agent's real task"]
    assert gateway.engine.calls == []  # type: ignore[attr-defined]
    episode = store.get_episode(episode_id)
    assert episode.status is EpisodeStatus.open and store.detail(episode_id).rewards == []
    assert db_snapshot(tmp_path / "episodes.db") == before


def test_a_page_on_another_origin_can_do_nothing(gateway: tuple[Gateway, int, str], tmp_path: Path) -> None:
    require_chromium()
    app, port, episode_id = gateway
    before = db_snapshot(tmp_path / "episodes.db")
    page = f"<script>{ATTACKS} attack('http://127.0.0.1:{port}', '{episode_id}', {CROSS_ORIGIN})"
    page += ".then(out => { window.out = out; document.title = 'done'; });</script>"
    with attacker_site({"/": page}) as site, headless_chromium() as chrome:
        chrome.get(site + "/")
        wait_for(lambda: chrome.title == "done", what="the page's attacks")
        out = chrome.execute_script("return window.out")
    assert out["models"].startswith("blocked"), out  # CORS: the page never reads an answer
    _assert_untouched(app, episode_id, before, tmp_path)


def test_a_dns_rebinding_page_can_do_nothing(gateway: tuple[Gateway, int, str], tmp_path: Path) -> None:
    """evil.test resolves to 127.0.0.1 (as after a rebinding): its page's requests are same-origin to the
    browser, and reach the endpoint with `Host: evil.test:port`."""
    require_chromium()
    app, port, episode_id = gateway
    before = db_snapshot(tmp_path / "episodes.db")
    with headless_chromium(1400, 1000, "--host-resolver-rules=MAP evil.test 127.0.0.1") as chrome:
        chrome.get(f"http://evil.test:{port}/v1/models")  # the rebound origin, as the page sees it
        assert "student" not in chrome.page_source and "loopback Host" in chrome.page_source
        script = f"{ATTACKS} attack('', '{episode_id}', {SAME_ORIGIN}).then(arguments[arguments.length - 1]);"
        out = chrome.execute_async_script(script)
    assert all(answer.startswith("403 ") for answer in out.values()), out
    assert "student" not in out["models"]
    _assert_untouched(app, episode_id, before, tmp_path)


def test_api_clients_still_work_and_loopback_names_are_answered(gateway: tuple[Gateway, int, str]) -> None:
    """What real clients send (JSON, no Origin) to any loopback name; a foreign Host is refused."""
    app, _, episode_id = gateway
    for base in ("http://127.0.0.1:8766", "http://localhost:8766", "http://[::1]:8766"):
        with TestClient(app.app, base_url=base) as http:
            assert http.get("/v1/models").status_code == 200, base
    with TestClient(app.app, base_url="http://127.0.0.1:8766") as http:
        assert http.post(f"/episodes/{episode_id}/v1/chat/completions", json=CHAT).status_code == 200
        assert http.post("/v1/chat/completions", json=CHAT, headers={"Origin": "http://127.0.0.1:8766"}).is_success
    with TestClient(app.app, base_url="http://rebound.example:8766") as http:
        refused = http.get("/v1/models")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "cross_site_request"
