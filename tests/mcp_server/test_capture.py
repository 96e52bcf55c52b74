"""The agent's work captured: the served workspace at start_episode, run_tests and end_episode, edited
on disk as an IDE edits it (never through rlide). A real `rlide serve` over stdio, killed with
SIGKILL after the episode: every state it acknowledged is in the log, and the SFT export carries
the episode's diff."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from episodes.records import StateKind
from episodes.store import EpisodeStore
from tests.git_repos import git, plain_venv
from tests.mcp_calls import call_ok
from training.data.export import export
from training.recording.capture import capture
from training.scenarios.snapshots import unified_diff

CALC = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "calc"
    (root / "tests").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "calc.py").write_text(CALC)
    (root / "tests" / "test_calc.py").write_text(TESTS)
    (root / "notes.md").write_text("remove me\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "calc")
    (root / "draft.py").write_text("DRAFT = 1\n")  # an uncommitted file from before the episode
    plain_venv(root / ".venv")
    return root


@pytest.mark.anyio
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")
async def test_an_episode_edited_on_disk_exports_its_diff_and_survives_a_killed_server(
    project: Path, rlide_exe: Path, rlide_env: dict[str, str], rlide_home: Path, tmp_path: Path
) -> None:
    env = {**os.environ, **rlide_env, "RLIDE_WORKSPACE": str(project)}
    params = StdioServerParameters(command=str(rlide_exe), args=["serve"], env=env)
    with open(tmp_path / "server.stderr", "w") as errlog, anyio.fail_after(60):
        async with Client(stdio_client(params, errlog=errlog)) as client:
            started = await call_ok(client, "start_episode", {"task": "make add add"})
            episode_id = started["episode_id"]
            (project / "calc.py").write_text(FIXED)  # the IDE's own edit tool
            (project / "notes.md").unlink()
            tested = await call_ok(client, "run_tests", {"test_command": "python -m pytest -q tests"})
            assert tested["tests_passed"] == 1
            (project / "calc.py").write_text(FIXED + "\n\ndef sub(a, b):\n    return a - b\n")
            await call_ok(client, "end_episode", {"outcome": "success", "summary": "add adds"})
            server = _server_pid(rlide_exe)
            os.kill(server, signal.SIGKILL)  # no shutdown, no flush: only what was committed
            await anyio.sleep(0.2)
            _assert_gone(server)

    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    try:
        states = store.workspace_states(episode_id)
        assert [s.kind for s in states] == [StateKind.start, StateKind.run_tests, StateKind.end]
        head = git(project, "rev-parse", "HEAD")
        assert all(s.commit == head for s in states)
        assert states[0].files == {"draft.py": "DRAFT = 1\n"}
        assert states[1].files == {"calc.py": FIXED, "notes.md": None, "draft.py": "DRAFT = 1\n"}
        assert all(".venv/ (installed files)" in s.omitted for s in states)
        assert "+    return a + b" in states[1].diff and "--- a/notes.md" in states[1].diff
        solution = store.detail(episode_id).solution
        assert solution is not None and states[2].solution == solution
        # From the start state: the draft that was already there is not the agent's work.
        assert "draft.py" not in solution and "+def sub(a, b):" in solution
        assert "--- a/notes.md\n+++ /dev/null" in solution
        applied = _apply(CALC, solution)
        assert applied == FIXED + "\n\ndef sub(a, b):\n    return a - b\n"

        out = io.StringIO()
        export(store, "sft", None, out)
        [record] = [json.loads(line) for line in out.getvalue().splitlines()]
        final = record["messages"][-1]
        assert final["role"] == "assistant" and final["content"].startswith("add adds\n\n```diff\n")
        assert solution in final["content"]
        calls = [m for m in record["messages"] if m.get("tool_calls")]
        arguments = calls[0]["tool_calls"][0]["function"]["arguments"]
        assert set(arguments) == {"test_command"}  # no `commit`, `repo`, `changed` the recorder added
        tool_turn = next(m for m in record["messages"] if m["role"] == "tool")
        assert '"tests_passed":1' in tool_turn["content"].replace(" ", "")  # the result, whole
    finally:
        store.close()


def test_a_workspace_that_is_not_a_repository_is_skipped_and_commits_between_states_count(
    project: Path, tmp_path: Path, store: EpisodeStore
) -> None:
    episode = store.start_episode("no repository here").id
    plain = tmp_path / "plain"
    plain.mkdir()
    assert capture(store, plain, episode, StateKind.start) is None
    assert capture(store, None, episode, StateKind.start) is None
    assert store.workspace_states(episode) == []

    episode = store.start_episode("commit as you go").id
    assert capture(store, project, episode, StateKind.start) is not None
    (project / "calc.py").write_text(FIXED)
    git(project, "commit", "-q", "-am", "fix add")  # the agent committed its fix
    (project / "tests" / "test_sub.py").write_text("def test_sub():\n    pass\n")
    capture(store, project, episode, StateKind.end)
    end = store.workspace_states(episode)[-1]
    assert end.commit == git(project, "rev-parse", "HEAD") != store.workspace_states(episode)[0].commit
    assert end.solution is not None
    assert "+    return a + b" in end.solution and "+++ b/tests/test_sub.py" in end.solution
    assert "draft.py" not in end.solution  # unchanged between the two states


def _apply(original: str, diff: str) -> str:
    """calc.py after `patch -p1` applies the diff (the other files' hunks go to a scratch tree)."""
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as scratch:
        Path(scratch, "calc.py").write_text(original)
        Path(scratch, "notes.md").write_text("remove me\n")
        subprocess.run(["patch", "-p1", "--batch", "-s"], input=diff.encode(), cwd=scratch, check=True)
        return Path(scratch, "calc.py").read_text()


def _server_pid(exe: Path) -> int:
    import psutil

    mine = psutil.Process().children(recursive=True)
    servers = [p for p in mine if "serve" in p.cmdline() and any(str(exe) in part for part in p.cmdline())]
    assert len(servers) == 1, [p.cmdline() for p in mine]
    return servers[0].pid


def _assert_gone(pid: int) -> None:
    import psutil

    with contextlib.suppress(psutil.NoSuchProcess):
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.anyio
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")
async def test_a_replay_starts_from_the_uncommitted_bug_not_the_clean_commit(project: Path, tmp_path: Path) -> None:
    """The bug is an uncommitted edit (the usual case): the commit alone passes its tests, so a replay
    from it taught nothing. The replay is the start state, with the context to act and a verifier
    that pays the fix."""
    from mcp_server.server import build_server
    from mcp_server.settings import load_settings
    from training.scenarios.base import check_verifier, scenarios_from_log, verify
    from training.scenarios.sandbox_runner import SandboxRunner

    (project / "calc.py").write_text(FIXED)
    git(project, "commit", "-q", "-am", "add adds")  # the clean commit passes
    (project / "calc.py").write_text(CALC)  # the bug, uncommitted
    settings = load_settings(home=tmp_path / "home", workspace=project, pool_envs=1)
    async with Client(build_server(settings), mode="legacy") as client:
        await call_ok(client, "start_episode", {"task": "make add add"})
        failed = await call_ok(client, "run_tests", {"test_command": "python -m pytest -q tests"})
        assert failed["tests_failed"] == 1
        (project / "calc.py").write_text(FIXED)
        ended = await call_ok(client, "end_episode", {"outcome": "success", "summary": "fixed add"})
        assert ended["verification"]["reward"] == 1.0

    store = EpisodeStore.open(settings.episode_db_url)
    runner = SandboxRunner()
    try:
        [scenario] = scenarios_from_log(store)
        assert scenario.workspace_ref == git(project, "rev-parse", "HEAD")
        assert scenario.verifier.data["files"]["calc.py"] == CALC  # the uncommitted bug
        prompt = scenario.messages[-1]["content"]
        assert prompt.startswith("make add add") and "tests/test_calc.py::test_add" in prompt  # what fails
        assert f"calc.py, add:\n```python\n{CALC.rstrip()}\n```" in prompt and "<<<<<<< SEARCH" in prompt
        check_verifier(scenario, workspace_runner=runner)  # its start state fails: a scenario
        fix = f"```diff\n{unified_diff({'calc.py': CALC}, {'calc.py': FIXED})}```"
        assert verify(scenario, fix, workspace_runner=runner) == 1.0
        assert verify(scenario, "I would leave it", workspace_runner=runner) == 0.0
    finally:
        runner.close()
        store.close()


@pytest.mark.anyio
async def test_run_tests_with_an_unknown_episode_is_a_clear_error_not_a_crash(project: Path, tmp_path: Path) -> None:
    """The capture of a served git workspace used to write a state for an episode id the log does
    not know, and the run crashed ("Error executing tool run_tests"); now it is the ToolError every
    tool gives for an unknown episode, and nothing is recorded."""
    from mcp_server.server import build_server
    from mcp_server.settings import load_settings

    settings = load_settings(home=tmp_path / "home", workspace=project, pool_envs=1)
    async with Client(build_server(settings), mode="legacy") as client:
        answer = await client.call_tool("run_tests", {"test_command": "true", "episode_id": "no-such-episode"})
    assert answer.is_error
    assert "no episode with id 'no-such-episode'" in answer.content[0].text
    assert "start_episode" in answer.content[0].text
    store = EpisodeStore.open(settings.episode_db_url)
    try:
        assert store.workspace_states("no-such-episode") == []
    finally:
        store.close()
