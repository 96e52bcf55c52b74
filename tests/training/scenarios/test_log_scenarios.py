"""Scenarios from the episode log: which episodes become replays (those whose verifier rlide
established from the project), what a replay holds, the scenario-set option, and the refresh that
re-reads only changed episodes. Real SQLite; the replays' runs are in test_replay_verifier.py."""

from __future__ import annotations

import pytest

from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from tests.logdata import replayable
from training.scenarios.base import LogScenarios, parse_scenario_sets, scenarios_from_log


def ended(store: EpisodeStore, *, replay: bool = True) -> str:
    """An external episode, ended with rlide's verdict; a replay when its verifier came from the project."""
    episode = store.start_episode("make test_add pass", workspace="/home/dev/calc", client="cursor").id
    if replay:
        replayable(store, episode, workspace="/home/dev/calc")
    store.add_reward(episode, RewardSource.tests, 1.0, "measured on the end state", verified=True)
    store.end_episode(episode, EpisodeStatus.success, "add adds now")
    return episode


def test_a_replay_is_the_start_state_judged_by_the_projects_verifier(store: EpisodeStore) -> None:
    episode = ended(store)
    # An episode from before project verifiers: its verifier was its agent's first failing run.
    legacy = store.start_episode("make test_add pass", workspace="/home/dev/calc").id
    store.add_step(
        legacy, tool="run_tests", arguments={"files": {"calc.py": "x"}, "test_command": "pytest -q"},
        result_summary="1 failed", error=None, duration_ms=3,
    )  # fmt: skip
    store.add_reward(legacy, RewardSource.tests, -1.0, verified=True)
    store.end_episode(legacy, EpisodeStatus.failure)
    [scenario] = scenarios_from_log(store)
    assert scenario.source_episode == episode and scenario.verifier.kind == "command"
    assert (scenario.workspace_ref, scenario.workspace) == ("c0ffee", "/home/dev/calc")
    data = scenario.verifier.data
    assert data["files"] == {"calc.py": "def add(a, b):\n    return a - b\n"}  # the uncommitted bug
    assert (data["fail_to_pass"], data["pass_to_pass"], data["trusted"]) == (
        ["tests/test_calc.py::test_add"],
        [],
        {"tests/test_calc.py": None},
    )
    prompt = scenario.task
    assert prompt.startswith("make test_add pass") and "tests/test_calc.py::test_add" in prompt
    assert "```diff block" in prompt


def test_scenario_sets_are_named_once_each_comma_separated() -> None:
    assert parse_scenario_sets("humaneval,log") == ("humaneval", "log")
    assert parse_scenario_sets(" Toy , log,toy ") == ("toy", "log")
    assert parse_scenario_sets("none") == () and parse_scenario_sets(None) == () and parse_scenario_sets("") == ()
    with pytest.raises(ValueError, match="unknown scenario set 'logs'.*humaneval, toy, log"):
        parse_scenario_sets("humaneval,logs")
    with pytest.raises(ValueError, match="unknown scenario set ''"):
        parse_scenario_sets("toy,,log")


def test_log_scenarios_re_read_only_new_or_changed_episodes(store: EpisodeStore) -> None:
    first = ended(store)
    log = LogScenarios()
    assert [s.source_episode for s in log.refresh(store)] == [first]
    assert log.detail_reads == 1
    assert [s.source_episode for s in log.refresh(store)] == [first] and log.detail_reads == 1  # nothing changed

    second = ended(store)
    store.start_episode("still open: not a scenario yet")
    assert [s.source_episode for s in log.refresh(store)] == [first, second] and log.detail_reads == 2

    # A late step on an ended episode is seen at the next refresh (here it changes nothing).
    store.add_step(first, tool="search_code", arguments={"query": "add"}, result_summary="", error=None, duration_ms=1)
    assert len(log.refresh(store)) == 2 and log.detail_reads == 3
