"""Scenarios from the episode log: which workspace they are verified against, the scenario-set
option, and the refresh that re-reads only changed episodes. Real SQLite, the real sandbox."""

from __future__ import annotations

import shutil
from collections.abc import Callable

import pytest

from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from training.scenarios.base import LogScenarios, parse_scenario_sets, scenarios_from_log, verify

BROKEN = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
FIXED = {**BROKEN, "calc.py": "def add(a, b):\n    return a + b\n"}
FIX = (
    "Here is the fix:\n```diff\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n-    return a - b\n+    return a + b\n```"
)
ATTEMPT = FIX.replace("a + b", "a * b")
"""The agent's first, wrong attempt (as a `patch` argument of its first run)."""
GIVEN_TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
"""Test code passed to `run_tests` as `tests` instead of a command; the sandbox runs it under pytest."""


def run_tests_step(store: EpisodeStore, episode_id: str, arguments: dict[str, object], passed: bool) -> None:
    """What rlide's `run_tests` tool leaves in the log: the reward first, then the middleware's step."""
    store.add_reward(episode_id, RewardSource.tests, 1.0 if passed else -1.0, "1 passed" if passed else "1 failed")
    store.add_step(
        episode_id,
        tool="run_tests",
        arguments=arguments,
        result_summary="1 passed" if passed else "1 failed",
        error=None,
        duration_ms=300,
    )


def fixed_episode(store: EpisodeStore, *, first_patch: str | None = None) -> str:
    """An external episode whose first run_tests failed and whose last passed on the fixed files."""
    ep = store.start_episode("make test_add pass", workspace="/home/dev/calc", client="cursor")
    first: dict[str, object] = {"files": BROKEN, "test_command": "python -m pytest -q", "timeout_s": 30}
    if first_patch is not None:
        first["patch"] = first_patch
    run_tests_step(store, ep.id, first, passed=False)
    run_tests_step(store, ep.id, {"files": FIXED, "test_command": "python -m pytest -q test_calc.py"}, passed=True)
    store.end_episode(ep.id, EpisodeStatus.success, "add adds now")
    return ep.id


def test_a_command_scenario_is_the_workspace_before_the_agents_fix(store: EpisodeStore) -> None:
    plain = fixed_episode(store)
    attempted = fixed_episode(store, first_patch=ATTEMPT)
    scenarios = {s.source_episode: s for s in scenarios_from_log(store)}
    assert set(scenarios) == {plain, attempted}
    for scenario in scenarios.values():
        # The first run's files and command, never the passing run's fixed files, and not the
        # agent's own patch: the student has to write the fix.
        assert scenario.verifier.kind == "command"
        assert scenario.verifier.data == {"command": "python -m pytest -q", "files": BROKEN, "timeout_s": 30.0}
        assert scenario.workspace_ref is None and scenario.messages[-1]["content"] == "make test_add pass"


def given_tests_episode(store: EpisodeStore) -> str:
    """An episode whose first run_tests was given test code (`tests`) instead of a command."""
    ep = store.start_episode("make test_add pass").id
    run_tests_step(store, ep, {"files": {"calc.py": BROKEN["calc.py"]}, "tests": GIVEN_TESTS}, passed=False)
    store.end_episode(ep, EpisodeStatus.failure)
    return ep


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")
@pytest.mark.parametrize("episode", [fixed_episode, given_tests_episode], ids=["test_command", "tests"])
def test_a_canned_fix_scores_1_and_a_wrong_one_0_in_the_sandbox(
    store: EpisodeStore, episode: Callable[[EpisodeStore], str]
) -> None:
    from training.scenarios.sandbox_runner import SandboxRunner

    episode(store)
    [scenario] = scenarios_from_log(store)
    runner = SandboxRunner()
    try:
        assert verify(scenario, FIX, workspace_runner=runner) == 1.0
        assert verify(scenario, ATTEMPT, workspace_runner=runner) == 0.0
        # Without a patch the pre-fix workspace fails: a rollout that writes nothing useful gets 0,
        # which it would not if the scenario held the fixed files.
        assert verify(scenario, "I would change calc.py", workspace_runner=runner) == 0.0
    finally:
        runner.close()


def test_a_run_tests_episode_given_test_code_is_a_scenario_only_with_its_workspace(store: EpisodeStore) -> None:
    code_only = store.start_episode("check my arithmetic").id  # test code alone: nothing the student could change
    run_tests_step(store, code_only, {"tests": "assert 1 + 1 == 2"}, passed=True)
    store.end_episode(code_only, EpisodeStatus.success)
    ep = store.start_episode("make test_add pass").id
    run_tests_step(store, ep, {"files": {"calc.py": BROKEN["calc.py"]}, "tests": GIVEN_TESTS}, passed=False)
    run_tests_step(store, ep, {"files": {"calc.py": FIXED["calc.py"]}, "tests": GIVEN_TESTS}, passed=True)
    store.end_episode(ep, EpisodeStatus.success)
    [scenario] = scenarios_from_log(store)
    assert scenario.source_episode == ep and scenario.verifier.kind == "command"
    assert scenario.verifier.data == {"tests": GIVEN_TESTS, "files": {"calc.py": BROKEN["calc.py"]}}


def test_scenario_sets_are_named_once_each_comma_separated() -> None:
    assert parse_scenario_sets("humaneval,log") == ("humaneval", "log")
    assert parse_scenario_sets(" Toy , log,toy ") == ("toy", "log")
    assert parse_scenario_sets("none") == () and parse_scenario_sets(None) == () and parse_scenario_sets("") == ()
    with pytest.raises(ValueError, match="unknown scenario set 'logs'.*humaneval, toy, log"):
        parse_scenario_sets("humaneval,logs")
    with pytest.raises(ValueError, match="unknown scenario set ''"):
        parse_scenario_sets("toy,,log")


def test_log_scenarios_re_read_only_new_or_changed_episodes(store: EpisodeStore) -> None:
    first = fixed_episode(store)
    log = LogScenarios()
    assert [s.source_episode for s in log.refresh(store)] == [first]
    assert log.detail_reads == 1
    assert [s.source_episode for s in log.refresh(store)] == [first] and log.detail_reads == 1  # nothing changed

    second = fixed_episode(store)
    store.start_episode("still open: not a scenario yet")
    assert [s.source_episode for s in log.refresh(store)] == [first, second] and log.detail_reads == 2

    # A late step on an ended episode is seen at the next refresh (here it changes nothing).
    store.add_step(first, tool="search_code", arguments={"query": "add"}, result_summary="", error=None, duration_ms=1)
    assert len(log.refresh(store)) == 2 and log.detail_reads == 3
