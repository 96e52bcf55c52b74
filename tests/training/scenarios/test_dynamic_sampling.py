"""Dynamic sampling (as DAPO does): steps draw scenarios whose pass rate is unknown or between 0 and
1, defer those whose recent groups all scored one value (retrying them now and then), and draw a
replacement when a group comes out without variance; a scenario's own completion budget caps the
worker's. Rewards are scripted per scenario through the toy verifier (the share of digits in the
answer) by a sampler that answers each prompt the same way: a real model is not the point here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")

from tests.logdata import make_choice  # noqa: E402
from training.backends.base import BackendConfig  # noqa: E402
from training.data.groups import Group  # noqa: E402
from training.scenarios.base import Scenario, Verifier  # noqa: E402
from training.scenarios.rollout import (  # noqa: E402
    RewardRecord,
    pick_scenarios,
    rollout_group,
    rollout_groups,
)

ANSWERS = {
    "always right": ["123", "456"],  # digit share 1 for every rollout
    "always wrong": ["abc", "def"],  # 0 for every rollout
    "sometimes": ["123", "abc"],  # 1 and 0: a group with signal
    "new": ["12", "ab"],
}


def toy(name: str, max_tokens: int | None = None) -> Scenario:
    return Scenario(
        id=f"toy/{name}", messages=({"role": "user", "content": name},), verifier=Verifier("toy"), max_tokens=max_tokens
    )


class PerPromptSampler:
    """A `TrainingBackend` that answers each prompt with its scripted completions, and notes the
    budget each sampling call was given."""

    name = "per-prompt"

    def __init__(self) -> None:
        self.config = BackendConfig(path=Path("/nonexistent"))
        self.calls: list[tuple[str, int]] = []

    def sample(self, messages: list[dict[str, Any]], *, n: int, max_tokens: int, **_: Any) -> list[Any]:
        prompt = str(messages[-1]["content"])
        self.calls.append((prompt, max_tokens))
        answers = ANSWERS[prompt]
        return [make_choice(answers[i % len(answers)], [1], [-0.1]) for i in range(n)]


def rewards(group: Group) -> list[float]:
    return [t.reward for t in group.trajectories]


def test_picks_prefer_scenarios_with_signal_and_retry_the_deferred_now_and_then() -> None:
    pool = [toy(name) for name in ANSWERS]
    record = RewardRecord()
    record.observe("toy/always right", [1.0, 1.0])
    record.observe("toy/always wrong", [0.0, 0.0])
    record.observe("toy/always wrong", [0.0, 0.0, 0.0])
    record.observe("toy/sometimes", [1.0, 1.0])
    record.observe("toy/sometimes", [0.0, 0.0])  # all-1 then all-0: a pass rate between 0 and 1
    assert [record.no_signal(s.id) for s in pool] == [True, True, False, False]

    steps = range(40)
    picks = [{s.id for s in pick_scenarios(pool, 2, seed=3, step=step, record=record)} for step in steps]
    # Without a retry, the two scenarios with signal fill the step; each deferred one comes back on
    # some steps (the policy changes), never on most.
    assert sum(p == {"toy/sometimes", "toy/new"} for p in picks) >= len(picks) // 2
    for deferred in ("toy/always right", "toy/always wrong"):
        assert 0 < sum(deferred in p for p in picks) < len(picks) // 2
    # Without a record every scenario is as likely: the deferred ones are picked far more often.
    plain = [{s.id for s in pick_scenarios(pool, 2, seed=3, step=step)} for step in steps]
    assert sum("toy/always right" in p for p in plain) > sum("toy/always right" in p for p in picks)
    # The same (seed, step, record) picks the same scenarios, as after a restart.
    again = [{s.id for s in pick_scenarios(pool, 2, seed=3, step=step, record=record)} for step in steps]
    assert again == picks


def test_a_group_without_variance_is_replaced_by_another_scenario() -> None:
    pool = [toy("always right"), toy("sometimes")]
    seed = next(s for s in range(100) if pick_scenarios(pool, 1, seed=s, step=0)[0].id == "toy/always right")
    record = RewardRecord()
    out = rollout_groups(
        PerPromptSampler(), pool, run="r", step=0, groups=1, group_size=2, max_tokens=8, seed=seed, record=record
    )
    # The zero-variance group is still returned (the loop's filter counts it), with its replacement.
    assert [g.metadata["scenario"] for g in out.groups] == ["toy/always right", "toy/sometimes"]
    assert [rewards(g) for g in out.groups] == [[1.0, 1.0], [1.0, 0.0]] and out.redrawn == 1
    assert record.no_signal("toy/always right") and not record.no_signal("toy/sometimes")
    # The next step draws the scenario with signal first, and needs no replacement.
    nxt = rollout_groups(
        PerPromptSampler(), pool, run="r", step=1, groups=1, group_size=2, max_tokens=8, seed=seed, record=record
    )
    if pick_scenarios(pool, 1, seed=seed, step=1, record=record)[0].id == "toy/sometimes":  # not a retry step
        assert [g.metadata["scenario"] for g in nxt.groups] == ["toy/sometimes"] and nxt.redrawn == 0


def test_replacements_are_bounded_and_never_repeat_a_scenario() -> None:
    pool = [toy("always right"), toy("always wrong"), toy("new")]
    out = rollout_groups(PerPromptSampler(), pool, run="r", step=0, groups=1, group_size=2, max_tokens=8, redraws=1)
    drawn = [g.metadata["scenario"] for g in out.groups]
    assert len(drawn) == len(set(drawn)) and len(drawn) <= 2 and out.redrawn == len(drawn) - 1
    everything = rollout_groups(PerPromptSampler(), pool, run="r", step=0, groups=3, group_size=2, max_tokens=8)
    assert sorted(g.metadata["scenario"] for g in everything.groups) == sorted(s.id for s in pool)
    assert everything.redrawn == 0  # nothing left in the pool to draw instead
    none = rollout_groups(PerPromptSampler(), pool, run="r", step=0, groups=1, group_size=2, max_tokens=8, redraws=0)
    assert len(none.groups) == 1 and none.redrawn == 0
    greedy = rollout_groups(
        PerPromptSampler(), pool, run="r", step=0, groups=1, group_size=2, max_tokens=8, temperature=0
    )
    assert len(greedy.groups) == 1 and greedy.redrawn == 0  # greedy groups are all flat: drawing more costs only


def test_a_scenarios_own_budget_wins_over_the_default_and_a_set_cap_wins_over_it() -> None:
    sampler = PerPromptSampler()
    for scenario, worker_max, cap in (
        (toy("new", max_tokens=160), 384, None),
        (toy("new", max_tokens=900), 384, None),  # a fix longer than the default still fits
        (toy("new", max_tokens=900), 384, 512),  # a person's --max-tokens caps it
        (toy("new"), 384, None),
        (toy("new"), 384, 100),
    ):
        rollout_group(
            sampler, scenario, run="r", step=0, group_size=2, max_tokens=worker_max, temperature=1.0, seed=0,
            budget_cap=cap,
        )  # fmt: skip
    assert [budget for _, budget in sampler.calls] == [160, 900, 512, 384, 100]


def test_the_worker_gets_a_group_with_signal_every_step_when_its_pool_has_one(tmp_path: Path) -> None:
    """The worker keeps the record and redraws: with a scenario that always scores 1 beside one that
    sometimes does, every step trains (one batch without signal would stop it: patience 1), and the
    flat groups drawn on the way are counted, not trained."""
    from tests.training.worker.test_groups_worker import ScriptedBackend, config
    from training.worker.loop import train
    from training.worker.outcome import StopReason

    class PerPromptBackend(ScriptedBackend):
        def sample(self, messages: list[dict[str, Any]], *, n: int, **_: Any) -> list[Any]:
            answers = ANSWERS[str(messages[-1]["content"])]
            return [make_choice(answers[i % len(answers)], [1, 2], [-0.5, -0.5]) for i in range(n)]

    cfg = config(tmp_path, max_steps=6, no_signal_patience=1)
    backend = PerPromptBackend(cfg.backend, [])
    report = train(cfg, daemon=True, backend=backend, scenarios=[toy("always right"), toy("sometimes")])
    assert report.stop_reason is StopReason.max_steps and report.steps_trained == 6
    assert all(keys == [keys[0]] and keys[0].endswith(":toy/sometimes") for keys in backend.trained)
    # Each flat group was drawn in addition to the step's one group, and counted as zero-variance.
    assert report.rollouts == (6 + report.groups_skipped_zero_variance) * cfg.group_size
    assert report.groups_skipped_zero_variance >= 1  # the flat scenario is retried now and then
