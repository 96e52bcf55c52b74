"""`rlide serve --http` as a real subprocess on a free loopback port: the SDK client in both eras,
the bearer token, and the refusal to serve off loopback without one."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from starlette.testclient import TestClient

from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from mcp_server.dashboard.guard import HttpGuard
from mcp_server.server import build_server
from mcp_server.settings import load_settings
from mcp_server.transports.http import HttpConfigError, McpWire, build_http_app
from tests.conftest import HttpServer, free_port
from tests.mcp_calls import call_ok

ERAS = [("legacy", "2025-11-25"), ("auto", "2026-07-28")]
TOKEN = "test-token-0123456789abcdef"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}


async def _full_episode(client: Client, task: str) -> str:
    assert {t.name for t in (await client.list_tools()).tools} >= {"start_episode", "end_episode", "give_feedback"}
    episode_id: str = (await call_ok(client, "start_episode", {"task": task}))["episode_id"]
    await call_ok(client, "give_feedback", {"rating": -0.5, "comment": "slow", "episode_id": episode_id})
    ended = await call_ok(client, "end_episode", {"outcome": "failure", "episode_id": episode_id})
    assert ended["episode"]["status"] == "failure" and ended["outcome_reward"] == -1.0
    resource = await client.read_resource(f"episode://{episode_id}")
    detail = json.loads(resource.contents[0].text)  # type: ignore[union-attr]
    assert [s["tool"] for s in detail["steps"]] == ["start_episode", "give_feedback", "end_episode"]
    return episode_id


def _check_log(home: Path, episode_id: str, task: str) -> None:
    store = EpisodeStore.open(f"sqlite:///{home / 'episodes.db'}")
    try:
        assert store.integrity_check() == []
        detail = store.detail(episode_id)
    finally:
        store.close()
    assert detail.episode.task == task and detail.episode.status is EpisodeStatus.failure
    assert [(r.source, r.value) for r in detail.rewards] == [
        (RewardSource.feedback, -0.5),
        (RewardSource.outcome, -1.0),
    ]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_sdk_client_runs_a_full_episode_over_http(
    mode: str, version: str, http_server: Callable[..., HttpServer], rlide_home: Path
) -> None:
    server = http_server()
    with anyio.fail_after(30):
        async with Client(server.url, mode=mode) as client:
            assert client.protocol_version == version
            episode_id = await _full_episode(client, f"http {mode}")
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal (exit status -15).
    assert server.stop() in (0, -15)
    assert "Application shutdown complete" in server.stderr()
    assert "http_listening" in server.stderr()
    assert server.stdout() == "", "the HTTP server wrote to stdout"
    _check_log(rlide_home, episode_id, f"http {mode}")


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "version"), ERAS)
async def test_bearer_token_is_required_and_accepted(
    mode: str, version: str, http_server: Callable[..., HttpServer], rlide_home: Path
) -> None:
    server = http_server(RLIDE_HTTP_TOKEN=TOKEN)
    for headers in (
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN}x"},
    ):
        status, response_headers, body = await anyio.to_thread.run_sync(_post, server.url, INITIALIZE, headers)
        assert status == 401, (headers, status, body)
        assert {k.lower(): v for k, v in response_headers.items()}["www-authenticate"].startswith("Bearer")
        assert b"RLIDE_HTTP_TOKEN" in body
    status, _, body = await anyio.to_thread.run_sync(
        _post, server.url, INITIALIZE, {"Authorization": f"Bearer {TOKEN}"}
    )
    assert status == 200, body

    # The SDK client without the token is refused...
    with anyio.fail_after(30), pytest.raises(Exception) as refused:  # noqa: B017 - may come wrapped in groups
        async with Client(server.url, mode=mode) as client:
            await client.list_tools()
    assert any(isinstance(leaf, MCPError) for leaf in _leaves(refused.value)), repr(refused.value)
    # ...and with it, through a pre-configured HTTP client, works.
    with anyio.fail_after(30):
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            transport = streamable_http_client(server.url, http_client=http)
            async with Client(transport, mode=mode) as client:
                assert client.protocol_version == version
                episode_id = await _full_episode(client, f"token {mode}")
    assert TOKEN not in server.stderr(), "the token leaked into the logs"
    _check_log(rlide_home, episode_id, f"token {mode}")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_non_loopback_bind_without_token_refuses_to_start(how: str, rlide_exe: Path, rlide_env: dict[str, str]) -> None:

    port = str(free_port())
    argv = [str(rlide_exe), "serve", "--http", "--port", port]
    env = {**os.environ, **rlide_env}
    if how == "flag":
        argv += ["--host", "0.0.0.0"]
    else:
        env["RLIDE_HTTP_HOST"] = "0.0.0.0"
    done = subprocess.run(argv, env=env, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    stderr = done.stderr.decode()
    assert "refusing to serve on 0.0.0.0" in stderr and "RLIDE_HTTP_TOKEN" in stderr, stderr
    assert "Traceback" not in stderr
    assert done.stdout == b""


def test_non_loopback_app_with_token_requires_it(rlide_home: Path) -> None:
    settings = load_settings(http_host="0.0.0.0", http_token=TOKEN)
    app = build_http_app(build_server(settings), settings)
    assert isinstance(app, McpWire) and isinstance(app.app, HttpGuard)
    with TestClient(app, base_url="http://rlide.example") as http:
        refused = http.post("/mcp", json=INITIALIZE, headers={"Accept": "application/json, text/event-stream"})
        assert refused.status_code == 401
        accepted = http.post(
            "/mcp",
            json=INITIALIZE,
            headers={"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {TOKEN}"},
        )
        assert accepted.status_code == 200, accepted.text
        assert "2025-06-18" in accepted.text

    with pytest.raises(HttpConfigError, match="RLIDE_HTTP_TOKEN"):
        unsafe = load_settings(http_host="0.0.0.0")
        build_http_app(build_server(unsafe), unsafe)


async def _status(home: Path, episode_id: str) -> tuple[EpisodeStatus, str | None]:
    store = EpisodeStore.open(f"sqlite:///{home / 'episodes.db'}")
    try:
        episode = store.get_episode(episode_id)
    finally:
        store.close()
    return episode.status, episode.summary


@pytest.mark.anyio
async def test_open_episodes_are_aborted_when_the_session_or_the_server_ends(
    http_server: Callable[..., HttpServer], rlide_home: Path
) -> None:
    server = http_server()
    with anyio.fail_after(30):
        async with Client(server.url, mode="legacy") as client:
            stateful = (await call_ok(client, "start_episode", {"task": "http session"}))["episode_id"]
        async with Client(server.url, mode="auto") as client:
            stateless = (await call_ok(client, "start_episode", {"task": "no session"}))["episode_id"]
        # Closing a handshake-era session (the SDK sends DELETE) aborts its episode, soon after.
        while await _status(rlide_home, stateful) != (EpisodeStatus.aborted, "aborted: the client disconnected"):
            await anyio.sleep(0.05)
    # A 2026-07-28 client has no session to close: its episode stays open while the server runs...
    assert (await _status(rlide_home, stateless))[0] is EpisodeStatus.open
    # ...and is aborted when the server shuts down.
    server.stop()
    assert await _status(rlide_home, stateless) == (EpisodeStatus.aborted, "aborted: the server stopped")


def test_loopback_bind_refuses_foreign_host_and_origin(http_server: Callable[..., HttpServer]) -> None:
    """DNS rebinding protection on loopback binds: a web page's request carries a foreign Host or Origin."""
    server = http_server()
    local = f"127.0.0.1:{server.port}"
    assert _post(server.url, INITIALIZE, {"Host": "evil.example"})[0] == 421
    assert _post(server.url, INITIALIZE, {"Origin": "http://evil.example"})[0] == 403
    assert _post(server.url, INITIALIZE, {"Host": f"localhost:{server.port}"})[0] == 200
    assert _post(server.url, INITIALIZE, {"Origin": f"http://{local}"})[0] == 200


def test_a_large_run_code_body_fits_and_an_oversized_one_names_the_limit(rlide_home: Path) -> None:
    """stdio took a run_code with 5 MB of files while HTTP refused it (the SDK's 4 MiB default, with
    "Request body too large"): the limit is now a setting, 32 MiB by default, and the refusal names it."""
    files = {f"data_{i}.txt": "x" * 1_000_000 for i in range(5)}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "run_code", "arguments": {"code": "print(1)", "files": files}},
    }
    headers = {"Accept": "application/json, text/event-stream"}
    for limit, expected in ((32, 200), (2, 413)):
        settings = load_settings(http_max_body_mb=limit, index_on_start=False)
        with TestClient(build_http_app(build_server(settings), settings), base_url="http://127.0.0.1:8765") as http:
            response = http.post("/mcp", json=call, headers=headers)
            assert response.status_code != 413 if expected == 200 else response.status_code == 413, response.text
            if expected == 413:
                message = response.json()["error"]["message"]
                assert "limit of 2 MiB" in message and "RLIDE_HTTP_MAX_BODY_MB" in message


def _sse_events(text: str) -> list[dict[str, str]]:
    events, current = [], {}
    for line in text.splitlines():
        if not line:
            if current:
                events.append(current)
            current = {}
            continue
        field, _, value = line.partition(":")
        current[field] = current.get(field, "") + value.strip()
    if current:
        events.append(current)
    return events


def test_a_dropped_stream_is_resumed_with_last_event_id(http_server: Any) -> None:
    """Streams carry event ids and a retry delay, and a client reconnecting with Last-Event-ID gets
    the result it missed (a long run_tests whose stream dropped could not be resumed before)."""
    import httpx

    server = http_server(RLIDE_INDEX_ON_START="false")
    accept = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as http:
        init = {**INITIALIZE, "params": {**INITIALIZE["params"], "protocolVersion": "2025-11-25"}}
        opened = http.post("/mcp", json=init, headers=accept)
        assert opened.status_code == 200, opened.text
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], **accept}
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "run_code", "arguments": {"code": "print(6 * 7)"}}}  # fmt: skip
        streamed = http.post("/mcp", json=call, headers=session)
        events = _sse_events(streamed.text)
        priming, *rest = events
        assert priming.get("data", "") == "" and priming["id"].isdigit() and priming["retry"] == "2000"
        [result] = [e for e in rest if '"id":7' in e.get("data", "").replace(" ", "")]
        assert "42" in result["data"]

        # The client saw only the priming event before its connection dropped: it reconnects.
        # The replay stream stays open for what comes next: read until the missed event arrives.
        lines: list[str] = []
        with http.stream("GET", "/mcp", headers={**session, "Last-Event-ID": priming["id"]}) as replayed:
            assert replayed.status_code == 200
            for line in replayed.iter_lines():
                lines.append(line)
                if line.startswith("data:") and line.strip() != "data:":
                    break
        again = [e for e in _sse_events("\n".join(lines)) if e.get("data")]
        assert [e["id"] for e in again] == [result["id"]] and "42" in again[0]["data"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"jsonrpc": "2.0", "id": 1}, '"method"'),
        ({"foo": 1}, '"jsonrpc" must be "2.0"'),
        ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], "batches are not supported"),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, '"jsonrpc" must be "2.0"'),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, '"method" must be'),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}, '"params" must be an object'),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, '"id" must be'),
    ],
)
def test_an_invalid_envelope_is_an_invalid_request(rlide_home: Path, body: Any, says: str) -> None:
    """JSON that is no JSON-RPC message is -32600 Invalid Request, in one line (the SDK said -32602
    with a page of validation errors); the request's id is echoed when it has a valid one."""
    settings = load_settings(index_on_start=False)
    with TestClient(build_http_app(build_server(settings), settings), base_url="http://127.0.0.1:8765") as http:
        response = http.post("/mcp", json=body, headers={"Accept": "application/json, text/event-stream"})
        assert response.status_code == 400
        error = response.json()
        assert error["error"]["code"] == -32600 and says in error["error"]["message"], error
        assert "\n" not in error["error"]["message"]
        expected_id = body.get("id") if isinstance(body, dict) and not isinstance(body.get("id"), bool) else None
        assert error["id"] == expected_id
        parse = http.post("/mcp", content=b"not json", headers={"Accept": "application/json, text/event-stream",
                                                                "Content-Type": "application/json"})  # fmt: skip
        assert parse.json()["error"]["code"] == -32700  # unparseable stays a parse error
