"""Scenarios from the episode log: which episodes become replays (those whose verifier rlide
established from the project), what a replay holds, the scenario-set option, and the refresh that
re-reads only changed episodes. Real SQLite; the replays' runs are in test_replay_verifier.py."""

from __future__ import annotations

import pytest

from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from tests.logdata import replayable
from training.scenarios.base import LogScenarios, parse_scenario_sets, scenarios_from_log
from training.scenarios.edits import ANSWER_FORMAT, FunctionSite, apply_answer
from training.scenarios.replay_prompt import (
    CHARS_PER_TOKEN,
    HEADROOM_TOKENS,
    MAX_TOKENS,
    MIN_TOKENS,
    replay_prompt,
)


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
    # No end state recorded: no code to show, the answer format all the same, the worker's budget.
    assert "<<<<<<< SEARCH" in prompt and data["shown"] == {} and scenario.max_tokens is None


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


MODULE = (
    "import math\n\nLIMIT = 10\n\n\n"
    + "".join(f"def helper_{i}(x):\n    return x + {i}\n\n\n" for i in range(60))
    + "class Shape:\n    @staticmethod\n    def area(w, h):\n        return w + h\n\n    def name(self):\n"
    + "        return 'shape'\n"
)


def test_a_replay_prompt_shows_the_functions_the_change_touched_not_the_file() -> None:
    fixed = MODULE.replace("return w + h", "return w * h")
    prompt = replay_prompt(
        "fix area", ["tests/test_shape.py::test_area"], {"shape.py": MODULE}, {"shape.py": fixed}, {}
    )
    area = "    @staticmethod\n    def area(w, h):\n        return w + h"
    assert f"shape.py, Shape.area:\n```python\n{area}\n```" in prompt.text  # whole, decorator and all
    assert "helper_3" not in prompt.text and "def name" not in prompt.text and "LIMIT" not in prompt.text
    assert prompt.sites == {
        "Shape.area": FunctionSite("shape.py", "Shape.area"),
        "area": FunctionSite("shape.py", "Shape.area"),
    }
    assert prompt.excerpts == () and "<<<<<<< SEARCH" in prompt.text
    # The rewrite the prompt asks for applies through the same reader the verifier uses.
    answer = "```python\n@staticmethod\ndef area(w, h):\n    return w * h\n```"
    assert apply_answer({"shape.py": MODULE}, answer, prompt.sites, prompt.excerpts) == {"shape.py": fixed}


def test_a_function_the_task_already_shows_is_not_shown_twice() -> None:
    fixed = MODULE.replace("return w + h", "return w * h")
    area = "    @staticmethod\n    def area(w, h):\n        return w + h"
    task = f"Fix a bug.\n\nshape.py, Shape.area:\n```python\n{area}\n```\n\n{ANSWER_FORMAT}"
    prompt = replay_prompt(task, ["tests/test_shape.py::test_area"], {"shape.py": MODULE}, {"shape.py": fixed}, {})
    assert prompt.text.count("def area") == 1 and prompt.text.count(ANSWER_FORMAT) == 1
    assert prompt.text.startswith(task) and "tests/test_shape.py::test_area" in prompt.text
    assert prompt.sites["area"] == FunctionSite("shape.py", "Shape.area")  # a rewrite of it still applies
    assert prompt.max_tokens is not None and prompt.max_tokens >= MIN_TOKENS


def test_a_change_outside_any_function_is_shown_as_a_bounded_excerpt() -> None:
    fixed = MODULE.replace("LIMIT = 10", "LIMIT = 100")
    prompt = replay_prompt(
        "raise the limit",
        ["t.py::t"],
        {"shape.py": MODULE, "tests/t.py": "x"},
        {"shape.py": fixed, "tests/t.py": "y"},
        {"tests/t.py": None},
    )
    assert "shape.py, lines 1-7:\n```\nimport math\n\nLIMIT = 10\n" in prompt.text
    assert "helper_30" not in prompt.text and prompt.sites == {} and prompt.excerpts == ("shape.py",)
    assert "tests/t.py" not in prompt.text  # a file the judge restores is not the student's to change
    answer = "<<<<<<< SEARCH\nLIMIT = 10\n=======\nLIMIT = 100\n>>>>>>> REPLACE\n"  # no path: the excerpt's file
    assert apply_answer({"shape.py": MODULE}, answer, prompt.sites, prompt.excerpts) == {"shape.py": fixed}


def test_a_replays_completion_budget_fits_a_rewrite_of_what_it_shows() -> None:
    small = replay_prompt("t", ["t"], {"a.py": "def f():\n    return 1\n"}, {"a.py": "def f():\n    return 2\n"}, {})
    assert small.max_tokens == MIN_TOKENS
    body = "".join(f"    total += {i} * x  # step {i}\n" for i in range(80))
    big = f"def g(x):\n    total = 0\n{body}    return total\n"
    large = replay_prompt("t", ["t"], {"a.py": big}, {"a.py": big.replace("total = 0", "total = 1")}, {})
    assert large.max_tokens is not None and large.max_tokens >= len(big) / CHARS_PER_TOKEN + HEADROOM_TOKENS
    assert large.max_tokens <= MAX_TOKENS and f"a.py, g:\n```python\n{big.rstrip()}" in large.text
