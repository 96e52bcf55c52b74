"""The policy endpoint's bearer token: the same rule as the MCP HTTP transport (common.http_auth).

Driven over real HTTP: starlette's TestClient, and a real uvicorn on loopback for the OpenAI client.
The engine is `CannedEngine` (a real PolicyEngine without torch), so these run without the training extra.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.testclient import TestClient
from typer.testing import CliRunner

from common.http_auth import InsecureBind
from episodes.store import EpisodeStore
from mcp_server.cli.app import app as cli_app
from tests.conftest import free_port
from tests.logdata import CannedEngine
from training.backends.base import BackendConfig
from training.gateway.app import Gateway, serve

TOKEN = "policy-token-5f2c9a1e"
CHAT = {"model": "student", "messages": [{"role": "user", "content": "Write a number."}], "max_tokens": 4}


def _assert_openai_401(resp: httpx.Response) -> None:
    assert resp.status_code == 401, resp.text
    assert resp.headers["www-authenticate"].startswith("Bearer")
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_api_key"
    assert "RLIDE_POLICY_TOKEN" in error["message"] and TOKEN not in resp.text


def test_every_route_needs_the_token(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(), store, token=TOKEN).app)
    wrong = {"Authorization": "Bearer not-the-token"}
    right = {"Authorization": f"Bearer {TOKEN}"}
    for method, path, body in [
        ("GET", "/v1/models", None),
        ("POST", "/v1/chat/completions", CHAT),
        ("POST", "/episodes", {"task": "t"}),
        ("POST", "/episodes/ep_x/v1/chat/completions", CHAT),
        ("POST", "/episodes/ep_x/end", {"outcome": "success"}),
    ]:
        _assert_openai_401(http.request(method, path, json=body))
        _assert_openai_401(http.request(method, path, json=body, headers=wrong))
        _assert_openai_401(http.request(method, path, json=body, headers={"Authorization": TOKEN}))  # no scheme
    assert store.list_episodes() == []  # nothing refused reached the log

    assert http.get("/v1/models", headers=right).json()["data"][0]["id"] == "student"
    answer = http.post("/v1/chat/completions", json=CHAT, headers=right).json()
    assert answer["choices"][0]["message"]["content"] == "42"
    started = http.post("/episodes", json={"task": "Write a number."}, headers=right)
    assert started.status_code == 201
    episode_id = started.json()["episode_id"]
    assert http.post(f"/episodes/{episode_id}/v1/chat/completions", json=CHAT, headers=right).status_code == 200
    assert len(store.turns.policy_turns(episode_id)) == 1


def test_loopback_without_a_token_stays_open(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(), store).app)
    assert http.get("/v1/models").status_code == 200


@contextmanager
def uvicorn_on_loopback(app: Any) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_openai_client_authenticates_with_its_api_key(store: EpisodeStore) -> None:
    openai = pytest.importorskip("openai")
    with uvicorn_on_loopback(Gateway(CannedEngine(), store, token=TOKEN).app) as base:
        _assert_openai_401(httpx.get(f"{base}/v1/models"))
        refused = openai.OpenAI(base_url=f"{base}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="bearer token"):
            refused.chat.completions.create(**CHAT)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key=TOKEN, max_retries=0)
        assert [m.id for m in client.models.list().data] == ["student", "student@0"]
        assert client.chat.completions.create(**CHAT).choices[0].message.content == "42"


def test_serve_refuses_an_open_bind_without_a_token_before_loading_the_model(tmp_path: Path) -> None:
    config = BackendConfig(path=tmp_path / "art")
    with pytest.raises(InsecureBind, match="refusing to serve on 0.0.0.0.*RLIDE_POLICY_TOKEN"):
        serve(config, str(tmp_path / "ep.db"), host="0.0.0.0", port=free_port())
    assert not (tmp_path / "art").exists() and not (tmp_path / "ep.db").exists()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_policy_serve_cli_refuses_an_open_bind_without_a_token(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["policy", "serve", "--port", str(free_port())]
    if how == "flag":
        argv += ["--host", "0.0.0.0"]
    else:
        monkeypatch.setenv("RLIDE_POLICY_HOST", "0.0.0.0")
    done = CliRunner().invoke(cli_app, argv)
    assert done.exit_code == 1
    assert "refusing to serve on 0.0.0.0" in done.stderr and "RLIDE_POLICY_TOKEN" in done.stderr
    assert done.stdout == ""
