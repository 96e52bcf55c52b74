"""`rlide agent run` (`training/gateway/agent_run.py`): N attempts of an agent, each on its own copy
of the start state, recorded through the policy endpoint with nothing but a base URL and a key,
verified by rlide and grouped.

The endpoint is a real uvicorn on loopback with a real git project, the real bubblewrap sandbox and
the real pytest verifier; the model is `CannedEngine` and the agent a script (a stand-in for a
scaffold, not one: it calls the model through the OpenAI routes, then fixes the bug on even-numbered
attempts only, so the rewards differ as a real policy's sampled attempts would).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from episodes.records import RewardSource, StateKind
from episodes.run_records import GroupOutcome
from episodes.store import EpisodeStore
from mcp_server.cli.app import app
from tests.logdata import CannedEngine
from tests.mcp_server.test_verified_rewards import FIXED, LOWER, SLUG, buggy_minilib
from tests.training.gateway.test_policy_auth import uvicorn_on_loopback
from training.data.groups import log_groups
from training.gateway.agent_run import AgentRun, AgentRunError, run_agents
from training.gateway.app import Gateway
from training.gateway.workspaces import WorkspaceRules

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")

AGENT = f"""import os, sys
from pathlib import Path
import httpx

answer = httpx.post(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    headers={{"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}},
    json={{
        "model": sys.argv[2],
        "messages": [{{"role": "user", "content": os.environ["RLIDE_TASK"]}}],
        "max_tokens": 8,
    }},
).json()
print("the model said", answer["choices"][0]["message"]["content"])
workspace = Path(sys.argv[1])
if int(workspace.name) % 2 == 0:
    (workspace / "minilib" / "__init__.py").write_text({FIXED!r})
sys.exit(0 if int(workspace.name) != 1 else 3)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return buggy_minilib(tmp_path)


def _run(base: str, project: Path, home: Path, agent: Path, name: str, attempts: int) -> AgentRun:
    command = (sys.executable, str(agent), "{workspace}", "{model}")
    return AgentRun(base, project, "Make slugs lower case.", command, name, attempts=attempts, home=home)


def test_attempts_run_on_their_own_copies_are_verified_and_form_one_group(
    store: EpisodeStore, project: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    gateway = Gateway(CannedEngine(), store, workspaces=WorkspaceRules((home / "attempts",)))
    with uvicorn_on_loopback(gateway.app) as base:
        done = run_agents(_run(base, project, home, agent, "scripted", 3))
        other = run_agents(_run(base, project, home, agent, "another scaffold", 2))

    assert [a.verified_reward for a in done] == [1.0, -1.0, 1.0], [a.verdict for a in done]
    assert [a.exit_status for a in done] == [0, 3, 0]
    assert LOWER in done[1].verdict
    assert (project / "minilib" / "__init__.py").read_text() == SLUG  # the user's workspace is untouched
    for attempt in done:
        episode = store.get_episode(attempt.episode_id)
        assert episode.workspace == attempt.workspace and Path(attempt.workspace).is_relative_to(home / "attempts")
        assert episode.client == "scripted" and episode.batch_size == 3 and episode.turn_count == 1
        assert "the model said 42" in Path(attempt.log).read_text()
        start = store.workspace_states(episode.id)[0]
        assert start.kind is StateKind.start and start.files == {"minilib/__init__.py": SLUG}  # the bug, copied
    assert len({store.get_episode(a.episode_id).batch for a in done}) == 1
    # The exit status is a claim: attempt 1 said it failed, attempt 0 that it succeeded; neither moves the reward.
    assert store.get_episode(done[0].episode_id).reward_total == 1.0

    groups = log_groups(store, run="default", group_size=8).items  # each run's attempts, whatever the size
    by_client = {g.metadata["client"]: g for g in groups}
    assert sorted(by_client) == ["another scaffold", "scripted"]
    assert sorted(by_client["scripted"].rewards) == [-1.0, 1.0, 1.0] and by_client["scripted"].reward_std > 0
    assert {t.metadata["episode_id"] for t in by_client["another scaffold"].trajectories} == {
        a.episode_id for a in other
    }
    assert by_client["scripted"].metadata["start"] == by_client["another scaffold"].metadata["start"] != ""


def test_a_runs_group_waits_for_every_attempt_to_end(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(), store).app)
    batch = {"task": "Write a number.", "client": "scripted", "batch": "run-1", "batch_size": 3}
    started = [http.post("/episodes", json=batch).json() for _ in range(3)]
    for index, episode in enumerate(started):
        chat = {"model": "student", "messages": [{"role": "user", "content": "Write a number."}]}
        assert http.post(f"/episodes/{episode['episode_id']}/v1/chat/completions", json=chat).status_code == 200
        # rlide's verifier stands in here: a verified tests reward, as the store takes it from one
        store.add_reward(episode["episode_id"], RewardSource.tests, float(index % 2), "tests", verified=True)
    for episode in started[:2]:
        assert http.post(f"/episodes/{episode['episode_id']}/end", json={"outcome": "success"}).status_code == 200
    assert log_groups(store, run="default", group_size=8).items == []  # one attempt is still open
    assert http.post(f"/episodes/{started[2]['episode_id']}/end", json={"outcome": "success"}).status_code == 200
    [group] = log_groups(store, run="default", group_size=8).items
    assert sorted(group.rewards) == [0.0, 0.0, 1.0]
    assert len(group.trajectories) == 3 and group.metadata["batch"] == "run-1"
    half = {"task": "t", "batch": "run-2"}
    refused = http.post("/episodes", json=half)
    assert refused.status_code == 400 and "batch_size" in refused.json()["error"]["message"]
    assert http.post("/episodes", json={**half, "batch_size": 1}).status_code == 400
    assert http.post("/episodes", json={**half, "batch": "../x", "batch_size": 2}).status_code == 400


def test_the_endpoint_refuses_a_copy_outside_its_roots(store: EpisodeStore, project: Path, tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    endpoint = Gateway(CannedEngine(), store, workspaces=WorkspaceRules((project,)))
    with uvicorn_on_loopback(endpoint.app) as base, pytest.raises(AgentRunError, match="outside the directories"):
        run_agents(_run(base, project, tmp_path / "home", agent, "scripted", 2))
    assert store.list_episodes() == []


def test_the_cli_says_what_is_wrong_before_anything_runs(project: Path) -> None:
    runner = CliRunner()
    named = ["agent", "run", "--task", "t", "--workspace", str(project), "--"]
    bad = runner.invoke(app, [*named, "aider", "--message", "{prompt}"])
    assert bad.exit_code != 0 and "{prompt}" in bad.output and "{task}" in bad.output
    unreachable = runner.invoke(app, ["agent", "run", "--endpoint", "http://127.0.0.1:9", *named[2:], "true"])
    assert unreachable.exit_code != 0 and "cannot be reached" in unreachable.output


def test_a_group_skipped_for_equal_rewards_is_reconsidered_when_a_reward_changes(store: EpisodeStore) -> None:
    http = TestClient(Gateway(CannedEngine(), store).app)
    batch = {"task": "Write a number.", "client": "scripted", "batch": "run-1", "batch_size": 2}
    started = [http.post("/episodes", json=batch).json()["episode_id"] for _ in range(2)]
    for episode_id in started:
        chat = {"model": "student", "messages": [{"role": "user", "content": "Write a number."}]}
        assert http.post(f"/episodes/{episode_id}/v1/chat/completions", json=chat).status_code == 200
        store.add_reward(episode_id, RewardSource.tests, -1.0, "tests", verified=True)
        assert http.post(f"/episodes/{episode_id}/end", json={"outcome": "failure"}).status_code == 200
    store.runs.ensure_run("default", backend="cpu", base_model="tiny-qwen2")
    [group] = log_groups(store, run="default", group_size=8).items
    assert group.reward_std == 0.0
    outcomes = {group.key: GroupOutcome.zero_variance}  # as the worker records a group it skipped
    store.runs.commit_training_step("default", step=0, outcomes=outcomes, reward_mean=None, reward_std=None)
    assert log_groups(store, run="default", group_size=8).items == []  # nothing changed: not offered again
    # A person re-rates one attempt (evidence): the same attempts now differ, and are offered again.
    store.add_reward(started[0], RewardSource.feedback, 1.0, "it was right", verified=True)
    [again] = log_groups(store, run="default", group_size=8).items
    assert again.key != group.key and again.reward_std > 0
    store.runs.commit_training_step(
        "default", step=1, outcomes={again.key: GroupOutcome.trained}, reward_mean=0.0, reward_std=1.0
    )
    assert log_groups(store, run="default", group_size=8).items == []  # trained: used up


def test_an_agent_runs_group_trains_a_grpo_step_on_the_student(
    store: EpisodeStore, project: Path, tmp_path: Path
) -> None:
    """The loop end to end: the student (the tiny model on the cpu engine) answers the agents, rlide
    verifies their attempts, and the worker trains one GRPO step on the run's group at the default
    group size."""
    pytest.importorskip("torch")
    from training.backends.base import BackendConfig
    from training.gateway.engines import TransformersEngine
    from training.worker.config import WorkerConfig
    from training.worker.loop import train

    home = tmp_path / "home"
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    config = BackendConfig(path=tmp_path / "art")
    gateway = Gateway(TransformersEngine(config), store, workspaces=WorkspaceRules((home / "attempts",)))
    with uvicorn_on_loopback(gateway.app) as base:
        done = run_agents(_run(base, project, home, agent, "scripted", 3))
    assert [a.verified_reward for a in done] == [1.0, -1.0, 1.0]
    report = train(WorkerConfig(database_url=store.url, backend=config, scenarios=None), once=True)
    assert (report.steps_trained, report.groups_trained, report.step) == (1, 1, 1)
    [record] = store.runs.training_steps("default")
    assert record.reward_std is not None and record.reward_std > 0
    assert log_groups(store, run="default", group_size=8).items == []  # used up
