"""`rlide serve` over stdio as a real subprocess: the SDK client in both protocol eras, and a raw
JSON-RPC session proving that stdout carries nothing but JSON-RPC."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from tests.conftest import StdioServer
from tests.mcp_calls import ALL_TOOLS, call_ok


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "version"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_sdk_client_runs_a_full_episode(
    mode: str, version: str, rlide_exe: Path, rlide_env: dict[str, str], rlide_home: Path, tmp_path: Path
) -> None:
    params = StdioServerParameters(command=str(rlide_exe), args=["serve"], env=rlide_env)
    with open(tmp_path / "server.stderr", "w") as errlog, anyio.fail_after(30):
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            assert client.protocol_version == version
            assert {t.name for t in (await client.list_tools()).tools} == ALL_TOOLS

            started = await call_ok(client, "start_episode", {"task": "fix the flaky test", "workspace": str(tmp_path)})
            episode_id = started["episode_id"]
            assert started["status"] == "open"
            # Handshake era: the session's episode is implied. 2026-07-28 has no session: name it.
            explicit = {} if mode == "legacy" else {"episode_id": episode_id}
            feedback = await call_ok(client, "give_feedback", {"rating": 0.5, "comment": "close", **explicit})
            assert feedback == {
                "episode_id": episode_id,
                "reward_id": feedback["reward_id"],
                "value": 0.5,
                "reward_total": 0.5,
                "note": feedback["note"],
            }
            assert "claim" in feedback["note"]
            ended = await call_ok(client, "end_episode", {"outcome": "success", "summary": "fixed", **explicit})
            assert ended["episode"]["status"] == "success" and ended["outcome_reward"] == 1.0

            resource = await client.read_resource(f"episode://{episode_id}")
            detail = json.loads(resource.contents[0].text)  # type: ignore[union-attr]
            assert detail["episode"]["id"] == episode_id
            assert [s["tool"] for s in detail["steps"]] == ["start_episode", "give_feedback", "end_episode"]

    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    try:
        assert store.integrity_check() == []
        on_disk = store.detail(episode_id)
    finally:
        store.close()
    assert on_disk.episode.status is EpisodeStatus.success
    assert on_disk.episode.task == "fix the flaky test" and on_disk.episode.workspace == str(tmp_path)
    assert on_disk.episode.summary == "fixed"
    assert [s.tool for s in on_disk.steps] == ["start_episode", "give_feedback", "end_episode"]
    assert all(s.error is None for s in on_disk.steps)
    assert [(r.source, r.value) for r in on_disk.rewards] == [(RewardSource.feedback, 0.5), (RewardSource.outcome, 1.0)]
    assert on_disk.episode.reward_total == pytest.approx(0.75)


def _assert_jsonrpc(line: bytes) -> dict[str, Any]:
    assert line.endswith(b"\n"), line
    message = json.loads(line)
    assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", line
    is_response = "id" in message and (("result" in message) ^ ("error" in message)) and "method" not in message
    is_request_or_notification = isinstance(message.get("method"), str) and "result" not in message
    assert is_response or is_request_or_notification, line
    return message


def test_raw_stdio_carries_only_json_rpc(
    stdio_server: Callable[..., StdioServer], rlide_home: Path, record_property: Any
) -> None:
    server = stdio_server()
    init = server.initialize("2025-06-18")
    assert init["protocolVersion"] == "2025-06-18"
    assert init["serverInfo"]["name"] == "rlide"

    started_at = time.perf_counter()
    listed = server.request("tools/list")
    tools_list_ms = (time.perf_counter() - started_at) * 1000
    record_property("tools_list_ms", round(tools_list_ms, 2))
    print(f"tools/list answered in {tools_list_ms:.1f} ms")
    tools = {t["name"]: t for t in listed["result"]["tools"]}
    assert set(tools) == ALL_TOOLS

    started = server.call_tool("start_episode", {"task": "raw session"})
    assert started["isError"] is False
    episode_id = started["structuredContent"]["episode_id"]
    listed_episodes = server.call_tool("list_episodes", {"limit": 5})
    assert episode_id in [e["id"] for e in listed_episodes["structuredContent"]["episodes"]]
    assert server.call_tool("give_feedback", {"rating": -0.25})["structuredContent"]["episode_id"] == episode_id

    # Malformed calls: argument errors come back as tool errors naming the problem...
    bad_rating = server.call_tool("give_feedback", {"rating": "very good"})
    assert bad_rating["isError"] is True and "rating" in bad_rating["content"][0]["text"]
    bad_outcome = server.call_tool("end_episode", {"outcome": "maybe"})
    assert bad_outcome["isError"] is True and "outcome" in bad_outcome["content"][0]["text"]
    unknown = server.call_tool("no_such_tool", {})
    assert unknown["isError"] is True and "no_such_tool" in unknown["content"][0]["text"]
    # ...structurally broken requests as JSON-RPC errors, and garbage lines do not kill the server.
    assert server.request("tools/call", {"name": "give_feedback", "arguments": 5})["error"]["code"] == -32602
    assert server.request("tools/call", {"arguments": {}})["error"]["code"] == -32602
    assert server.request("no/such/method")["error"]["code"] == -32601
    server.send("{this is not json")
    server.send("[1, 2, 3]")

    # Starting the sandbox pool inside a stdio server (worker processes, pufferlib's imports) must
    # not put a byte on stdout either.
    ran = server.call_tool("run_code", {"code": "print(6 * 7)"})
    assert ran["isError"] is False and ran["structuredContent"]["stdout"] == "42\n"

    ended = server.call_tool("end_episode", {"outcome": "failure", "summary": "gave up"})
    assert ended["isError"] is False
    assert ended["structuredContent"]["episode"]["status"] == "failure"
    assert server.request("ping")["result"] == {}

    assert server.close() == 0
    assert server.stdout_lines, "the server wrote nothing"
    for line in server.stdout_lines:
        _assert_jsonrpc(line)
    # Every byte of stdout is accounted for by the parsed lines.
    assert all(b"\n" not in line[:-1] for line in server.stdout_lines)
    # Logs went to stderr.
    assert "server_started" in server.stderr()

    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    try:
        detail = store.detail(episode_id)
    finally:
        store.close()
    assert detail.episode.status is EpisodeStatus.failure
    tools_called = [s.tool for s in detail.steps]
    assert tools_called[:3] == ["start_episode", "list_episodes", "give_feedback"]
    assert "run_code" in tools_called
    assert tools_called[-1] == "end_episode"
    # The rejected calls are recorded too, with their errors.
    assert {"no_such_tool"} <= set(tools_called)
    assert sum(1 for s in detail.steps if s.error) >= 3


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "reason"), [("legacy", "the client disconnected"), ("auto", "the server stopped")])
async def test_an_episode_left_open_is_aborted_when_the_client_goes(
    mode: str, reason: str, rlide_exe: Path, rlide_env: dict[str, str], rlide_home: Path, tmp_path: Path
) -> None:
    params = StdioServerParameters(command=str(rlide_exe), args=["serve"], env=rlide_env)
    with open(tmp_path / "server.stderr", "w") as errlog, anyio.fail_after(30):
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            episode_id = (await call_ok(client, "start_episode", {"task": "walk away"}))["episode_id"]
    # The client waited for the server process to exit, so the abort is on disk now.
    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    try:
        episode = store.get_episode(episode_id)
    finally:
        store.close()
    assert episode.status is EpisodeStatus.aborted
    assert episode.summary == f"aborted: {reason}"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("RLIDE_HOME", "{file}", "cannot open the episode log"),
        ("RLIDE_DATABASE_URL", "mysql://user:hunter2@db/rlide", "unsupported database URL"),
    ],
)
def test_an_unusable_episode_log_stops_the_server_with_one_clear_line(
    variable: str, value: str, message: str, rlide_exe: Path, rlide_env: dict[str, str], tmp_path: Path
) -> None:

    a_file = tmp_path / "not-a-directory"
    a_file.write_text("")
    env = {**os.environ, **rlide_env, variable: value.format(file=a_file)}
    done = subprocess.run([str(rlide_exe), "serve"], env=env, input=b"", capture_output=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == b"", "nothing but JSON-RPC may reach stdout"
    stderr = done.stderr.decode()
    assert stderr.startswith("error: ") and message in stderr, stderr
    assert "Traceback" not in stderr and "hunter2" not in stderr


def test_indexing_with_worker_processes_keeps_stdout_clean(
    stdio_server: Callable[..., StdioServer], workspace_a_worker_warns_about: Path
) -> None:
    # The workers inherit the server's stdout, the transport: a worker's warning must land on stderr.
    server = stdio_server(RLIDE_WORKSPACE=str(workspace_a_worker_warns_about), RLIDE_MEMORY_EMBEDDER="none")
    server.initialize("2025-06-18")
    indexed = server.call_tool("index_workspace", {"wait_s": 60})
    assert indexed["isError"] is False, indexed
    assert indexed["structuredContent"]["files_indexed"] == 211
    found = server.call_tool("search_code", {"query": "f17", "k": 1})
    assert found["structuredContent"]["results"][0]["path"] == "m17.py"
    assert server.close() == 0
    for line in server.stdout_lines:
        _assert_jsonrpc(line)
    assert "chunking.parse_failed" in server.stderr()


def test_no_pool_helper_is_started_for_a_sandbox_that_cannot_run(
    stdio_server: Callable[..., StdioServer], tmp_path: Path
) -> None:
    # The helper process pool workers fork from holds ~100 MB once it has imported the pool.
    server = stdio_server(RLIDE_SANDBOX="docker", DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")
    server.initialize("2025-06-18")
    result = server.call_tool("run_code", {"code": "print(1)"})
    assert result["isError"] is True, result
    assert "code execution is unavailable here" in result["content"][0]["text"], result
    children = psutil.Process(server.proc.pid).children(recursive=True)
    assert not [c.pid for c in children if "forkserver" in " ".join(c.cmdline())]


@pytest.mark.anyio
async def test_serve_takes_the_workspace_to_serve(rlide_exe: Path, rlide_env: dict[str, str], tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    params = StdioServerParameters(
        command=str(rlide_exe), args=["serve", "--workspace", str(project)], env=rlide_env, cwd=str(tmp_path)
    )
    with open(tmp_path / "server.stderr", "w") as errlog, anyio.fail_after(60):
        async with Client(stdio_client(params, errlog=errlog)) as client:
            status = await call_ok(client, "index_status", {})
            assert status["workspace"] == str(project.resolve())
    refused = subprocess.run(
        [str(rlide_exe), "serve", "--workspace", str(tmp_path / "nope")],
        env={**os.environ, **rlide_env}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 1 and "is not a folder" in refused.stderr and refused.stdout == ""
