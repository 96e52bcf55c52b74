"""The MCP Inspector CLI (`@modelcontextprotocol/inspector --cli`) as an independent client: a
different implementation than the Python SDK, one process per call."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from tests.conftest import HttpServer
from tests.mcp_calls import ALL_TOOLS

INSPECTOR = Path(__file__).resolve().parents[2] / ".tools" / "node_modules" / ".bin" / "mcp-inspector"

pytestmark = pytest.mark.skipif(
    not INSPECTOR.exists(), reason=f"MCP Inspector not installed at {INSPECTOR}: run scripts/setup.sh (needs npm)"
)


class Inspector:
    def __init__(self, target: list[str], env: dict[str, str], extra: list[str] | None = None) -> None:
        self.target = target
        self.env = env
        self.extra = extra or []

    def run(self, *args: str) -> tuple[int, dict[str, Any] | None, str]:
        """(exit status, the JSON printed on stdout or None, stderr)."""
        argv = [str(INSPECTOR), "--cli", "--format", "json", "-q", *self.extra, *self.target, *args]
        done = subprocess.run(argv, env=self.env, capture_output=True, timeout=90, stdin=subprocess.DEVNULL)
        out = done.stdout.decode().strip()
        return done.returncode, json.loads(out) if out else None, done.stderr.decode()

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """tools/call with exact JSON arguments; returns (exit status, the CallToolResult)."""
        code, out, err = self.run(
            "--method", "tools/call", "--tool-name", tool, "--tool-args-json", json.dumps(arguments)
        )
        assert out is not None and "result" in out, (code, out, err)
        return code, out["result"]

    def ok(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        code, result = self.call(tool, arguments)
        assert code == 0 and result["isError"] is False, result
        structured: dict[str, Any] = result["structuredContent"]
        # The text content carries the same result for clients that ignore structured content.
        assert json.loads(result["content"][0]["text"]) == structured
        return structured


@pytest.fixture
def inspector_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "inspector-home"  # the inspector keeps a catalog under $HOME: keep it out of the real one
    home.mkdir()
    return {**os.environ, "HOME": str(home)}


def _open_log(home: Path) -> EpisodeStore:
    return EpisodeStore.open(f"sqlite:///{home / 'episodes.db'}")


def test_inspector_against_the_stdio_server(
    rlide_exe: Path, rlide_env: dict[str, str], rlide_home: Path, inspector_env: dict[str, str], tmp_path: Path
) -> None:
    env_flags = [flag for name, value in rlide_env.items() for flag in ("-e", f"{name}={value}")]
    inspector = Inspector([*env_flags, str(rlide_exe), "serve"], inspector_env)

    code, listed, err = inspector.run("--method", "tools/list")
    assert code == 0, err
    assert listed is not None
    tools = {t["name"]: t for t in listed["result"]["tools"]}
    assert set(tools) == ALL_TOOLS
    for tool in tools.values():
        assert "$ref" not in json.dumps(tool["inputSchema"]), tool["name"]
        assert tool["inputSchema"]["type"] == "object"
    assert tools["give_feedback"]["inputSchema"]["required"] == ["rating"]

    started = inspector.ok("start_episode", {"task": "inspected task", "workspace": str(tmp_path)})
    episode_id = started["episode_id"]
    assert started["status"] == "open"
    # That inspector process has exited: its stdio server aborted the session's open episode. An agent
    # rates only its own session's episodes: this one is another process's.
    code, refused = inspector.call("give_feedback", {"rating": 0.75, "comment": "nice", "episode_id": episode_id})
    assert code != 0 and "not started in this session" in refused["content"][0]["text"]
    code, ended = inspector.call("end_episode", {"outcome": "success", "episode_id": episode_id})
    assert code != 0 and ended["isError"] is True
    assert "already ended with status aborted" in ended["content"][0]["text"]
    assert "start_episode" in ended["content"][0]["text"]  # it tells the model what to do next

    listing = inspector.ok("list_episodes", {"limit": 10})
    assert [(e["id"], e["status"]) for e in listing["episodes"]] == [(episode_id, "aborted")]
    assert listing["episodes"][0]["client"] == "inspector-cli"

    code, read, err = inspector.run("--method", "resources/read", "--uri", f"episode://{episode_id}")
    assert code == 0, err
    assert read is not None
    detail = json.loads(read["result"]["contents"][0]["text"])
    assert [s["tool"] for s in detail["steps"]] == ["start_episode", "give_feedback", "end_episode"]

    # Malformed arguments: a tool error that names the field, not a crash.
    code, bad = inspector.call("give_feedback", {"rating": "great", "episode_id": episode_id})
    assert code != 0 and bad["isError"] is True and "rating" in bad["content"][0]["text"]
    code, bad = inspector.call("end_episode", {"outcome": "won", "episode_id": episode_id})
    assert code != 0 and bad["isError"] is True and "outcome" in bad["content"][0]["text"]

    store = _open_log(rlide_home)
    try:
        assert store.integrity_check() == []
        on_disk = store.detail(episode_id)
        all_episodes = store.list_episodes()
    finally:
        store.close()
    assert on_disk.episode.status is EpisodeStatus.aborted
    assert on_disk.rewards == []  # the refused rating recorded nothing
    # The rejected calls named the episode, so they are recorded in it with their errors.
    assert [s.tool for s in on_disk.steps] == [
        "start_episode",
        "give_feedback",
        "end_episode",
        "give_feedback",
        "end_episode",
    ]
    assert [s.error is not None for s in on_disk.steps] == [False, True, True, True, True]  # the rating refused
    # list_episodes named no episode and its process had none open: a look at the log starts no episode.
    assert [e.id for e in all_episodes] == [episode_id]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_inspector_full_episode_against_the_http_server(
    era: str, http_server: Callable[..., HttpServer], rlide_home: Path, inspector_env: dict[str, str]
) -> None:
    server = http_server()
    inspector = Inspector([server.url], inspector_env, extra=["--protocol-era", era])

    code, listed, err = inspector.run("--method", "tools/list")
    assert code == 0, err
    assert listed is not None and {t["name"] for t in listed["result"]["tools"]} == ALL_TOOLS

    episode_id = inspector.ok("start_episode", {"task": f"inspector over http ({era})"})["episode_id"]
    code, rated = inspector.call("give_feedback", {"rating": -0.25, "episode_id": episode_id})
    if era == "legacy":  # each inspector call is a session of its own: not this episode's
        assert code != 0 and "not started in this session" in rated["content"][0]["text"]
    else:  # 2026-07-28 has no session: calls share one per server process and client name
        assert code == 0 and rated["structuredContent"]["reward_total"] == -0.25
    ended = inspector.ok("end_episode", {"outcome": "success", "summary": "done", "episode_id": episode_id})
    assert ended["episode"]["status"] == "success" and ended["outcome_reward"] == 1.0
    assert ended["episode"]["reward_total"] == pytest.approx(1.0 if era == "legacy" else 0.375)  # claims only

    store = _open_log(rlide_home)
    try:
        assert store.integrity_check() == []
        detail = store.detail(episode_id)
    finally:
        store.close()
    assert detail.episode.status is EpisodeStatus.success and detail.episode.summary == "done"
    assert [s.tool for s in detail.steps] == ["start_episode", "give_feedback", "end_episode"]
    rated_rewards = [(RewardSource.feedback, -0.25)] if era == "modern" else []
    assert [(r.source, r.value) for r in detail.rewards] == [*rated_rewards, (RewardSource.outcome, 1.0)]
