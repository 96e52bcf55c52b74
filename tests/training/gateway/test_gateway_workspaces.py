"""Episodes a scaffold starts at the policy endpoint with a workspace: the start and end states are
captured and rlide's own run of the project's tests is the verified reward
(`training/gateway/workspaces.py`, `training/recording/verification_hub.py`); what the caller posts
at the end is a claim. Driven over HTTP (starlette's TestClient, which runs the endpoint's lifespan)
with a real git project, a real bubblewrap sandbox and the real pytest verifier; the engine is
`CannedEngine`, since what is under test is capture and judgement, not sampling.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from episodes.records import EpisodeSource, EpisodeStatus, StateKind, VerifierState
from episodes.store import EpisodeStore
from tests.git_repos import git
from tests.logdata import CannedEngine
from tests.mcp_server.test_verified_rewards import FIXED, LOWER, SLUG, TESTS, buggy_minilib, write
from training.gateway.app import Gateway
from training.gateway.workspaces import WorkspaceRules

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")

CHAT = {"model": "student", "messages": [{"role": "user", "content": "Fix slugify."}], "max_tokens": 4}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return buggy_minilib(tmp_path)


def _endpoint(store: EpisodeStore, *roots: Path, idle_timeout_s: float = 1800.0) -> TestClient:
    return TestClient(
        Gateway(CannedEngine(), store, workspaces=WorkspaceRules(roots, idle_timeout_s=idle_timeout_s)).app
    )


def _start(http: TestClient, workspace: Path | str) -> dict[str, Any]:
    started = http.post("/episodes", json={"task": "Make slugs lower case.", "workspace": str(workspace)})
    assert started.status_code == 201, started.text
    return started.json()


def _attempt(http: TestClient, started: dict[str, Any], outcome: str, reward: float) -> dict[str, Any]:
    """One model turn through the shared base URL with the episode's key, then the caller's claim."""
    key = {"Authorization": f"Bearer {started['api_key']}"}
    assert http.post("/v1/chat/completions", json=CHAT, headers=key).status_code == 200
    ended = http.post(f"/episodes/{started['episode_id']}/end", json={"outcome": outcome, "reward": reward})
    assert ended.status_code == 200, ended.text
    return ended.json()


def test_the_end_is_judged_by_the_projects_tests_not_by_the_callers_claim(store: EpisodeStore, project: Path) -> None:
    with _endpoint(store, project) as http:
        started = _start(http, project)
        assert started["workspace"] == str(project.resolve())
        assert "pytest" in started["verifier"] and "start state" in started["verifier"], started["verifier"]
        write(project, "minilib/__init__.py", FIXED)  # the agent's fix, made with its own tools
        fixed = _attempt(http, started, "failure", -1.0)  # it even says it failed

        git(project, "checkout", "-q", "--", ".")
        write(project, "minilib/__init__.py", SLUG)
        cheat = _start(http, project)
        # Deleting the failing test in the workspace: the verifier runs the commit's tests.
        write(project, "tests/test_slug.py", TESTS.split("def test_lower_case")[0])
        claimed = _attempt(http, cheat, "success", 1.0)

    assert fixed["verification"]["reward"] == 1.0, fixed["verification"]
    assert claimed["verification"]["reward"] == -1.0 and claimed["verification"]["still_failing"] == [LOWER]
    honest, hacked = store.get_episode(started["episode_id"]), store.get_episode(cheat["episode_id"])
    assert honest.verified and honest.reward_total == 1.0
    assert hacked.verified and hacked.reward_total == -1.0
    assert honest.source is EpisodeSource.policy and honest.workspace == str(project.resolve())
    verifier = store.verifier(honest.id)
    assert verifier is not None and verifier.state is VerifierState.established
    assert verifier.fail_to_pass == [LOWER] and verifier.commit == git(project, "rev-parse", "HEAD").strip()
    states = store.workspace_states(honest.id)
    assert [s.kind for s in states] == [StateKind.start, StateKind.end]
    assert states[-1].solution is not None and ".lower()" in states[-1].solution
    assert len(store.turns.policy_turns(honest.id)) == 1  # its model turn and its state: one episode


def test_only_a_folder_under_the_endpoints_roots_may_be_named(
    store: EpisodeStore, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (project / "escape").symlink_to(outside)
    with _endpoint(store, project) as http:
        for named in (outside, project / "escape", project / ".." / "elsewhere", project / "pyproject.toml", "x\0y"):
            refused = http.post("/episodes", json={"task": "t", "workspace": str(named)})
            assert refused.status_code == 400, (named, refused.text)
            assert refused.json()["error"]["code"] == "workspace_not_allowed"
        assert "outside the directories" in http.post("/episodes", json={"task": "t", "workspace": str(outside)}).text
    with _endpoint(store) as http:
        refused = http.post("/episodes", json={"task": "t", "workspace": str(project)})
        assert refused.status_code == 400 and "--workspace DIR" in refused.json()["error"]["message"]
    assert store.list_episodes() == []  # nothing was started, nothing read
    assert _start(TestClient(Gateway(CannedEngine(), store, workspaces=WorkspaceRules((tmp_path,))).app), project)[
        "workspace"
    ] == str(project.resolve())  # a folder under a root


def test_an_episode_left_idle_is_timed_out_and_its_end_verified(store: EpisodeStore, project: Path) -> None:
    ide = store.start_episode("an IDE's episode", source=EpisodeSource.external)
    with _endpoint(store, project, idle_timeout_s=1.0) as http:
        started = _start(http, project)
        write(project, "minilib/__init__.py", FIXED)
        deadline = time.monotonic() + 120
        while (verifier := store.verifier(started["episode_id"])) is None or verifier.verdict is None:
            assert time.monotonic() < deadline, "the idle episode was never verified"
            time.sleep(0.5)
    episode = store.get_episode(started["episode_id"])
    assert episode.status is EpisodeStatus.timeout and episode.verified and episode.reward_total == 1.0
    assert [s.kind for s in store.workspace_states(episode.id)] == [StateKind.start, StateKind.end]
    assert store.get_episode(ide.id).status is EpisodeStatus.open  # the MCP server's to time out, not this one's
