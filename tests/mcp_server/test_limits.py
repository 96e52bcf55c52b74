"""Limits a daily user hits, through a real MCP client: nothing the schema accepts is cut or refused,
and a listing answers with what fits instead of a size error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from episodes.store import EpisodeStore
from mcp_server.result_size import result_chars
from mcp_server.server import build_server
from mcp_server.settings import Settings, load_settings
from tests.mcp_calls import call_error, call_ok


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    ws = tmp_path / "project"
    ws.mkdir()
    return load_settings(home=tmp_path / "home", workspace=ws, index_on_start=False)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    async with Client(build_server(settings)) as c:
        yield c


@pytest.mark.anyio
async def test_a_long_task_and_a_json_looking_summary_are_kept_whole(client: Client, settings: Settings) -> None:
    task = "Refactor the parser. " * 900  # 18,900 characters: the schema allows 20,000
    started = await call_ok(client, "start_episode", {"task": task})
    assert started["task"].startswith(task[:400]) and len(started["task"]) < 600  # the echo is brief
    ended = await call_ok(client, "end_episode", {"outcome": "success", "summary": "[1, 2]"})
    assert ended["episode"]["summary"] == "[1, 2]"
    store = EpisodeStore.open(settings.episode_db_url)
    assert store.get_episode(started["episode_id"]).task == task  # stored whole
    store.close()
    again = await call_ok(client, "start_episode", {"task": "t"})
    ended = await call_ok(client, "end_episode", {"outcome": "failure", "summary": '{"done": false}'})
    assert ended["episode"]["summary"] == '{"done": false}' and again["episode_id"] == ended["episode"]["id"]


@pytest.mark.anyio
async def test_a_workspace_that_does_not_exist_is_refused(client: Client, tmp_path: Path) -> None:
    message = await call_error(client, "start_episode", {"task": "t", "workspace": str(tmp_path / "nope")})
    assert "does not exist" in message
    listed = await call_ok(client, "list_episodes", {})
    assert [e["task"] for e in listed["episodes"] if not e["implicit"]] == []  # nothing was started


@pytest.mark.anyio
async def test_list_episodes_answers_with_what_fits_and_an_offset(client: Client, settings: Settings) -> None:
    for i in range(40):
        await call_ok(client, "start_episode", {"task": f"task {i}: " + "fix the flaky retry loop " * 300})
        await call_ok(client, "end_episode", {"outcome": "success", "summary": "done " * 800})
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        result = await client.call_tool("list_episodes", {"limit": 200, "offset": offset})
        assert not result.is_error
        raw = result.model_dump(by_alias=True, mode="json")
        assert result_chars(raw) <= settings.max_result_chars
        page = result.structured_content
        assert page is not None and page["episodes"]
        assert all(len(e["task"]) < 600 for e in page["episodes"])  # cut: the resource has it whole
        seen += [e["id"] for e in page["episodes"]]
        offset = page["next_offset"]
    assert len(seen) == len(set(seen)) == 40
