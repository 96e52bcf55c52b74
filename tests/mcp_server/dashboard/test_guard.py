"""Who may use the dashboard: a non-loopback bind needs a token; with one, the page and its API refuse
requests without it (a cookie from /login or ?token= is accepted, the MCP endpoint keeps bearer
only); a request from another site can never act, with or without the cookie; a DNS-rebinding Host
is refused on loopback."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from episodes.store import EpisodeStore
from mcp_server.dashboard.app import guarded_app
from mcp_server.dashboard.guard import COOKIE
from mcp_server.settings import load_settings
from tests.mcp_server.dashboard.seed import Seeded, seed

TOKEN = "s3cret-token-for-the-tests"
PAGE = {"X-Rlide-Request": "1"}


@pytest.fixture
def ids(rlide_home: Path) -> Iterator[Seeded]:
    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    yield seed(store)
    store.close()


def _client(host: str, token: str | None, base_url: str) -> TestClient:
    settings = load_settings(http_host=host, **({"http_token": token} if token else {}))
    return TestClient(guarded_app(settings), base_url=base_url, follow_redirects=False)


def test_a_non_loopback_dashboard_without_a_token_is_refused(rlide_exe: Path, rlide_env: dict[str, str]) -> None:
    import os

    done = subprocess.run(
        [str(rlide_exe), "dashboard", "--host", "0.0.0.0", "--port", "1"],
        env={**os.environ, **rlide_env}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "RLIDE_HTTP_TOKEN" in done.stderr and done.stdout == ""


def test_with_a_token_the_page_and_the_api_need_it(ids: Seeded) -> None:
    with _client("0.0.0.0", TOKEN, "http://rlide.example:8765") as http:
        page = http.get("/")
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        for path in ("/api/episodes", f"/api/episodes/{ids.good}", "/api/training", "/static/app.js"):
            refused = http.get(path)
            assert refused.status_code in (303, 401), path
        refused = http.post(f"/api/episodes/{ids.good}/rate", json={"value": 1, "author": "x"}, headers=PAGE)
        assert refused.status_code == 401 and "RLIDE_HTTP_TOKEN" in refused.json()["error"]
        assert http.get("/api/episodes", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.get("/api/episodes", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert http.get("/login").status_code == 200  # the form itself is public

        wrong = http.post("/login", data={"token": "nope", "next": "/"})
        assert wrong.status_code == 401 and COOKIE not in wrong.cookies
        signed_in = http.post("/login", data={"token": TOKEN, "next": "/#/training"})
        assert signed_in.status_code == 303
        cookie = signed_in.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        assert http.get("/api/episodes").status_code == 200  # the cookie now travels with each request
        assert http.get("/").status_code == 200


def test_the_token_in_the_link_becomes_a_cookie_and_leaves_the_address(ids: Seeded) -> None:
    with _client("0.0.0.0", TOKEN, "http://rlide.example:8765") as http:
        assert http.get("/?token=wrong").status_code == 303
        assert http.get("/api/episodes").status_code == 401
        opened = http.get(f"/?token={TOKEN}")
        assert opened.status_code == 303 and opened.headers["location"] == "/" and COOKIE in opened.cookies
        assert http.get("/api/episodes").status_code == 200


def test_the_mcp_endpoint_takes_the_bearer_header_only(ids: Seeded) -> None:
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def mcp(request: Any) -> PlainTextResponse:
        return PlainTextResponse("mcp")

    settings = load_settings(http_host="0.0.0.0", http_token=TOKEN)
    app = guarded_app(settings, [Route("/mcp", mcp, methods=["GET", "POST"])])
    with TestClient(app, base_url="http://rlide.example") as http:
        http.cookies.set(COOKIE, TOKEN)
        assert http.post("/mcp").status_code == 401  # a cookie is the page's, not an MCP client's
        assert http.post("/mcp", headers={"Authorization": f"Bearer {TOKEN}"}).text == "mcp"


@pytest.mark.parametrize("token", [None, TOKEN])
def test_no_action_through_a_cross_site_request(ids: Seeded, token: str | None, rlide_home: Path) -> None:
    base = "http://127.0.0.1:8765"
    with _client("127.0.0.1", token, base) as http:
        if token:
            http.cookies.set(COOKIE, token)  # the victim is signed in
        store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
        before = [r.id for r in store.detail(ids.good).rewards], store.preferences.list()
        attacks = [
            # a plain HTML form on evil.example: urlencoded, no custom header, its Origin
            {"data": {"value": "1", "author": "x"}, "headers": {"Origin": "http://evil.example"}},
            # text/plain form carrying JSON, the classic CSRF-with-JSON trick
            {"content": b'{"value": 1, "author": "x"}', "headers": {"Content-Type": "text/plain", "Origin": "null"}},
            # JSON with the header but from another origin (only possible after a CORS preflight we never grant)
            {"json": {"value": 1, "author": "x"}, "headers": {**PAGE, "Origin": "http://evil.example"}},
            {"json": {"value": 1, "author": "x"}, "headers": {**PAGE, "Sec-Fetch-Site": "cross-site"}},
            # no Origin at all (an old browser, a curl) and no header: still not the page
            {"json": {"value": 1, "author": "x"}, "headers": {}},
        ]
        for attack in attacks:
            response = http.post(f"/api/episodes/{ids.good}/rate", **attack)
            assert response.status_code == 403, (attack, response.text)
        forged = http.post(
            "/api/preferences",
            json={"a": ids.good, "b": ids.bad, "verdict": "b", "author": "x"},
            headers={"Origin": "http://evil.example", **PAGE},
        )
        assert forged.status_code == 403
        assert ([r.id for r in store.detail(ids.good).rewards], store.preferences.list()) == before
        same_site = http.post(
            f"/api/episodes/{ids.good}/rate", json={"value": 1, "author": "x"}, headers={**PAGE, "Origin": base}
        )
        assert same_site.status_code == 200  # the page's own request still works
        store.close()


def test_a_rebinding_host_is_refused_on_loopback(ids: Seeded) -> None:
    with _client("127.0.0.1", None, "http://evil.example:8765") as http:
        refused = http.get("/api/episodes")
        assert refused.status_code == 403 and "loopback" in refused.json()["error"]
    for host in ("http://localhost:8765", "http://127.0.0.1:8765", "http://[::1]:8765"):
        with _client("127.0.0.1", None, host) as http:
            assert http.get("/api/episodes").status_code == 200, host
