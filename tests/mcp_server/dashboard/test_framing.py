"""No page can frame the dashboard (to lay it under an overlay and have the user click through): in a
real headless Chromium, a page on another origin that iframes the dashboard gets no dashboard in the
frame. Every response of both HTTP servers, refusals included, forbids framing and MIME sniffing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from episodes.store import EpisodeStore
from mcp_server.dashboard.app import guarded_app
from mcp_server.settings import load_settings
from tests.logdata import CannedEngine
from tests.mcp_server.dashboard.browser import attacker_site, headless_chromium, require_chromium, served, wait_for
from tests.mcp_server.dashboard.seed import Seeded, seed
from training.gateway.app import Gateway

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def ids(rlide_home: Path) -> Iterator[Seeded]:
    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    yield seed(store)
    store.close()


def test_a_page_on_another_origin_cannot_frame_the_dashboard(ids: Seeded) -> None:
    require_chromium()
    with served(guarded_app(load_settings(http_host="127.0.0.1"))) as port:
        dashboard = f"http://127.0.0.1:{port}/"
        overlay = (
            f'<iframe id="victim" src="{dashboard}" width="1200" height="800"'
            " onload=\"document.title = 'loaded'\"></iframe>"
            '<div style="position:absolute;top:0;left:0;opacity:0.01">click to win</div>'
        )
        with attacker_site({"/": overlay}) as site, headless_chromium() as chrome:
            chrome.get(dashboard)  # the dashboard itself still renders, top level
            wait_for(lambda: chrome.find_elements("css selector", '[data-test="episode-row"]'), what="the dashboard")
            chrome.get(site + "/")
            wait_for(lambda: chrome.title == "loaded", what="the frame to finish loading")
            chrome.switch_to.frame(chrome.find_element("id", "victim"))
            framed = chrome.execute_script("return [document.title, document.querySelectorAll('[data-test]').length]")
            chrome.switch_to.default_content()
    assert framed[0] != "rlide" and framed[1] == 0, framed


def _assert_secured(response: object) -> None:
    headers = response.headers  # type: ignore[attr-defined]
    assert headers["x-frame-options"] == "DENY", response
    assert "frame-ancestors 'none'" in headers["content-security-policy"], response
    assert headers["x-content-type-options"] == "nosniff", response


def test_every_response_of_both_servers_forbids_framing(ids: Seeded, store: EpisodeStore) -> None:
    page = {"X-Rlide-Request": "1"}
    with TestClient(guarded_app(load_settings(http_host="127.0.0.1")), base_url="http://127.0.0.1:8765") as http:
        for response in (
            http.get("/"),
            http.get("/static/app.js"),
            http.get("/api/episodes"),
            http.get("/api/episodes/ep_none"),  # 404
            http.post(f"/api/episodes/{ids.good}/rate", content=b"[[[", headers=page),  # 415
            http.post(f"/api/episodes/{ids.good}/rate", json={}, headers={"Origin": "http://evil.example"}),  # 403
            http.get("/nowhere"),
        ):
            _assert_secured(response)
    gateway = Gateway(CannedEngine(), store, bind_host="127.0.0.1")
    with TestClient(gateway.app, base_url="http://127.0.0.1:8766") as http:
        for response in (
            http.get("/v1/models"),
            http.post("/episodes", json={}),  # 400
            http.get("/nowhere"),
            http.get("/v1/models", headers={"Host": "evil.example"}),  # 403
        ):
            _assert_secured(response)


def test_a_policy_merges_with_frame_ancestors() -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from common.web_guard import ApiGuard

    async def page(request: object) -> PlainTextResponse:
        return PlainTextResponse("x", headers={"content-security-policy": "default-src 'self';"})

    app = ApiGuard(Starlette(routes=[Route("/", page)]), bind_host=None, refuse=lambda s, m: PlainTextResponse(m, s))
    policy = TestClient(app).get("/").headers.get_list("content-security-policy")
    assert policy == ["default-src 'self'; frame-ancestors 'none'"]
