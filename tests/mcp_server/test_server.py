"""The MCP server in memory, through the SDK client, in both protocol eras."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from mcp_server.server import build_server
from mcp_server.settings import Settings, load_settings
from tests.mcp_calls import call_error, call_ok

ERAS = ["legacy", "auto"]  # handshake era (2025-11-25, IDE hosts today) and 2026-07-28


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path)


@pytest.fixture(params=ERAS)
async def client(request: pytest.FixtureRequest, settings: Settings) -> AsyncIterator[Client]:
    async with Client(build_server(settings), mode=request.param) as c:
        yield c


def _log(settings: Settings) -> EpisodeStore:
    return EpisodeStore.open(settings.episode_db_url)


@pytest.mark.anyio
async def test_protocol_versions(settings: Settings) -> None:
    async with Client(build_server(settings), mode="legacy") as legacy:
        assert legacy.protocol_version == "2025-11-25"
    async with Client(build_server(settings)) as modern:
        assert modern.protocol_version == "2026-07-28"


@pytest.mark.anyio
async def test_tools_are_published_with_inlined_schemas_and_annotations(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) >= {"start_episode", "end_episode", "give_feedback", "list_episodes"}
    for tool in tools.values():
        published = json.dumps([tool.input_schema, tool.output_schema])
        assert "$ref" not in published and "$defs" not in published, tool.name
        assert tool.description and tool.annotations is not None
    assert tools["list_episodes"].annotations.read_only_hint is True  # type: ignore[union-attr]
    assert tools["start_episode"].annotations.read_only_hint is False  # type: ignore[union-attr]
    assert tools["end_episode"].input_schema["properties"]["outcome"]["enum"] == ["success", "failure", "aborted"]
    # The nested Episode model of end_episode's result is spelled out inline.
    episode_schema = tools["end_episode"].output_schema["properties"]["episode"]  # type: ignore[index]
    assert "status" in episode_schema["properties"]


@pytest.mark.anyio
async def test_a_full_episode_is_recorded(client: Client, settings: Settings, tmp_path: Path) -> None:
    ws = str(tmp_path)
    started = await call_ok(client, "start_episode", {"task": "make the tests pass", "workspace": ws})
    episode_id = started["episode_id"]
    assert started["status"] == "open"
    fb = await call_ok(client, "give_feedback", {"rating": 0.5, "comment": "on the right track"})
    assert fb == {
        "episode_id": episode_id,
        "reward_id": fb["reward_id"],
        "value": 0.5,
        "reward_total": 0.5,
        "note": "recorded as the agent's claim: a person's rating outranks it, and it never makes the episode verified",
    }
    ended = await call_ok(client, "end_episode", {"outcome": "success", "summary": "all green"})
    assert ended["episode"]["status"] == "success" and ended["outcome_reward"] == 1.0
    # No evidence (no served git workspace to verify, no person's rating): the weighted mean of its
    # claims (self rating .2, outcome .2), shown but never trained on.
    assert ended["episode"]["reward_total"] == pytest.approx(0.75) and not ended["episode"]["verified"]

    store = _log(settings)
    detail = store.detail(episode_id)
    store.close()
    assert [s.tool for s in detail.steps] == ["start_episode", "give_feedback", "end_episode"]
    assert detail.steps[0].arguments == {"task": "make the tests pass", "workspace": ws}
    assert all(s.error is None and s.duration_ms >= 0 for s in detail.steps)
    assert [(r.source, r.value) for r in detail.rewards] == [(RewardSource.feedback, 0.5), (RewardSource.outcome, 1.0)]
    assert detail.episode.client == "mcp" and detail.episode.workspace == ws

    resource = await client.read_resource(f"episode://{episode_id}")
    body = json.loads(resource.contents[0].text)  # type: ignore[union-attr]
    assert body["episode"]["id"] == episode_id and len(body["steps"]) == 3


@pytest.mark.anyio
async def test_feedback_after_end_episode_rates_the_episode_just_ended(client: Client, settings: Settings) -> None:
    """A person's verdict usually comes once the agent says it is done: without an id it goes to the
    episode the session ended last, and the call is a step of that episode, not of a new one."""
    started = await call_ok(client, "start_episode", {"task": "rename the helper"})
    await call_ok(client, "end_episode", {"outcome": "success", "summary": "renamed"})
    fb = await call_ok(client, "give_feedback", {"rating": -0.5, "comment": "it broke the build"})
    assert fb["episode_id"] == started["episode_id"] and fb["reward_total"] == pytest.approx(0.25)
    # Ending takes an open episode; and a later call outside any episode opens an implicit one,
    # which feedback then rates.
    assert "call start_episode first" in await call_error(client, "end_episode", {"outcome": "failure"})
    later = await call_ok(client, "give_feedback", {"rating": 1})
    store = _log(settings)
    detail = store.detail(started["episode_id"])
    implicit = store.detail(later["episode_id"])
    store.close()
    assert [s.tool for s in detail.steps] == ["start_episode", "end_episode", "give_feedback"]
    assert [r.value for r in detail.rewards] == [1.0, -0.5]
    assert implicit.episode.implicit and [s.tool for s in implicit.steps] == ["end_episode", "give_feedback"]


@pytest.mark.anyio
async def test_calls_outside_an_episode_go_to_an_implicit_one(client: Client, settings: Settings) -> None:
    await call_ok(client, "list_episodes", {})  # a look at the log itself: no episode for it
    await call_ok(client, "index_status", {})
    store = _log(settings)
    assert store.list_episodes() == []
    await call_error(client, "give_feedback", {"rating": 0.5})  # recorded, into a new implicit episode
    await call_ok(client, "list_episodes", {"limit": 5})  # inside the implicit episode now: a step
    [implicit] = store.list_episodes()
    assert implicit.implicit and implicit.status is EpisodeStatus.open and implicit.step_count == 2
    # An explicit episode supersedes the implicit one, which is closed as aborted.
    started = await call_ok(client, "start_episode", {"task": "real work"})
    assert store.get_episode(implicit.id).status is EpisodeStatus.aborted
    assert store.get_episode(started["episode_id"]).step_count == 1
    # Both are in the served workspace, as neither named one.
    served = str(settings.served_workspace)
    assert implicit.workspace == served and store.get_episode(started["episode_id"]).workspace == served
    store.close()


@pytest.mark.anyio
async def test_errors_tell_the_model_what_to_do_next(client: Client, settings: Settings) -> None:
    assert "call start_episode first" in await call_error(client, "end_episode", {"outcome": "success"})
    assert "list_episodes" in await call_error(client, "give_feedback", {"rating": 1, "episode_id": "ep_missing"})
    # A lone surrogate (valid JSON: "\\ud800") is refused by validation; the call is still recorded.
    log = _log(settings)
    steps_before = sum(e.step_count for e in log.list_episodes())
    assert "episode_id" in await call_error(client, "end_episode", {"outcome": "success", "episode_id": "\ud800"})
    assert sum(e.step_count for e in log.list_episodes()) == steps_before + 1
    log.close()
    started = await call_ok(client, "start_episode", {"task": "t"})
    await call_ok(client, "end_episode", {"outcome": "failure", "episode_id": started["episode_id"]})
    again = await call_error(client, "end_episode", {"outcome": "success", "episode_id": started["episode_id"]})
    assert "already ended with status failure" in again and "start_episode" in again
    assert "blank" in await call_error(client, "start_episode", {"task": "   "})
    assert "rating" in await call_error(client, "give_feedback", {"rating": 2})
    # Failed calls are steps too: the model's mistakes are part of the episode.
    store = _log(settings)
    steps = store.detail(started["episode_id"]).steps
    store.close()
    assert [s.tool for s in steps] == ["start_episode", "end_episode", "end_episode"]
    assert steps[-1].error is not None and "already ended" in steps[-1].error


@pytest.mark.anyio
async def test_a_second_explicit_episode_leaves_the_first_open_with_a_note(client: Client) -> None:
    first = await call_ok(client, "start_episode", {"task": "one"})
    second = await call_ok(client, "start_episode", {"task": "two"})
    assert first["episode_id"] in (second["note"] or "")
    listed = await call_ok(client, "list_episodes", {"status": "open"})
    assert {e["id"] for e in listed["episodes"]} == {first["episode_id"], second["episode_id"]}
    # Feedback without an id goes to the session's current episode: the second.
    fb = await call_ok(client, "give_feedback", {"rating": -1})
    assert fb["episode_id"] == second["episode_id"]


@pytest.mark.anyio
async def test_list_episodes_pages(client: Client) -> None:
    for i in range(3):
        started = await call_ok(client, "start_episode", {"task": f"t{i}"})
        await call_ok(client, "end_episode", {"outcome": "aborted", "episode_id": started["episode_id"]})
    page = await call_ok(client, "list_episodes", {"status": "aborted", "limit": 2})
    assert len(page["episodes"]) == 2 and page["next_offset"] == 2
    rest = await call_ok(client, "list_episodes", {"status": "aborted", "limit": 2, "offset": 2})
    assert len(rest["episodes"]) == 1 and rest["next_offset"] is None


@pytest.mark.anyio
async def test_unknown_episode_resource_is_a_protocol_error(client: Client) -> None:
    with pytest.raises(MCPError, match="list_episodes"):
        await client.read_resource("episode://ep_missing")


@pytest.mark.anyio
async def test_closing_a_handshake_session_aborts_its_open_episode(settings: Settings) -> None:
    async with Client(build_server(settings), mode="legacy") as c:
        started = await call_ok(c, "start_episode", {"task": "interrupted work"})
    store = _log(settings)
    with anyio.fail_after(5):
        while store.get_episode(started["episode_id"]).status is EpisodeStatus.open:
            await anyio.sleep(0.01)
    episode = store.get_episode(started["episode_id"])
    store.close()
    assert episode.status is EpisodeStatus.aborted and "disconnected" in (episode.summary or "")


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_oversized_results_become_an_actionable_error(settings: Settings, era: str) -> None:
    server = build_server(settings.model_copy(update={"max_result_chars": 1_000}))

    async def dump(size: int) -> str:
        """Return `size` characters."""
        return "x" * size

    server.add_tool(dump)
    async with Client(server, mode=era) as c:
        small = await c.call_tool("dump", {"size": 100})
        assert not small.is_error and small.content[0].text == "x" * 100  # type: ignore[union-attr]
        big = await c.call_tool("dump", {"size": 50_000})
        assert big.is_error
        text = big.content[0].text  # type: ignore[union-attr]
        assert "over this server's limit of 1000" in text and "asking for less" in text
    store = _log(settings)
    [episode] = store.list_episodes()
    steps = store.detail(episode.id).steps
    store.close()
    assert [s.error is not None for s in steps] == [False, True]  # the log holds what the client received


@pytest.mark.anyio
async def test_training_status_explains_when_nothing_has_trained(client: Client) -> None:
    assert "rlide train --once" in await call_error(client, "training_status", {})
    assert "no training run named 'nope'" in await call_error(client, "training_status", {"run": "nope"})


def test_the_server_process_never_imports_heavy_packages(tmp_path: Path) -> None:
    import subprocess
    import sys

    probe = """
import sys, anyio
from mcp import Client
from mcp_server.server import build_server
from mcp_server.settings import load_settings
async def main():
    async with Client(build_server(load_settings(home=sys.argv[1])), mode="legacy") as c:
        await c.list_tools()
        await c.call_tool("start_episode", {"task": "t"})
        await c.call_tool("training_status", {})
anyio.run(main)
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "art", "ray", "transformers", "peft", "vllm"})
print(",".join(heavy))
"""
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


@pytest.mark.anyio
async def test_prompts_an_ide_shows_and_an_unknown_one_is_invalid_params(client: Client) -> None:
    from mcp.shared.exceptions import MCPError

    listed = {p.name: p for p in (await client.list_prompts()).prompts}
    assert set(listed) == {"fix-failing-tests", "start-task"}
    assert [a.name for a in listed["start-task"].arguments or []] == ["task"]
    fix = await client.get_prompt("fix-failing-tests", {"test_command": "pytest -x tests/"})
    text = fix.messages[0].content.text  # type: ignore[union-attr]
    assert 'test_command="pytest -x tests/"' in text and "end_episode" in text
    with pytest.raises(MCPError) as refused:
        await client.get_prompt("no-such-prompt", {})
    assert refused.value.code == -32602 and "fix-failing-tests" in refused.value.message


@pytest.mark.anyio
async def test_tool_descriptions_carry_no_docstring_indentation(client: Client) -> None:
    for tool in (await client.list_tools()).tools:
        assert tool.description and "\n    " not in tool.description, tool.name
