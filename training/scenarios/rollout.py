"""Self-play rollouts: the current policy attempts scenarios, verifiers score it, GRPO groups come out."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from episodes.codec import encode_choice
from training.backends.base import ContextTooLong, TrainingBackend
from training.data.groups import Group, Trajectory
from training.scenarios.base import (
    ProgramRunner,
    Scenario,
    WorkspaceRunner,
    check_verifier,
    verify,
)
from training.scenarios.errors import VerifierUnavailable

log = structlog.get_logger(__name__)


RECENT_GROUPS = 2
"""Groups of a scenario whose rewards `RewardRecord` keeps."""
RETRY_ONE_IN = 4
"""A deferred scenario is retried on about one step in this many (the policy has moved since)."""


@dataclass
class RewardRecord:
    """Each scenario's rewards in its last `RECENT_GROUPS` groups, for picking scenarios that teach
    (dynamic sampling, as DAPO does): a scenario whose recent rewards were all equal (all 0, all 1,
    any one value) gave GRPO no signal and is deferred. Kept in memory by the worker: it restarts
    empty, and a restarted worker picks as if every scenario were new."""

    recent: dict[str, deque[tuple[float, ...]]] = field(default_factory=dict)

    def observe(self, scenario_id: str, rewards: Sequence[float]) -> None:
        self.recent.setdefault(scenario_id, deque(maxlen=RECENT_GROUPS)).append(tuple(rewards))

    def no_signal(self, scenario_id: str) -> bool:
        """Whether the scenario's recent groups all came out with one reward (unknown: False)."""
        rewards = [r for group in self.recent.get(scenario_id, ()) for r in group]
        return bool(rewards) and min(rewards) == max(rewards)


def scenario_order(
    scenarios: Sequence[Scenario], *, seed: int, step: int, record: RewardRecord | None = None
) -> list[Scenario]:
    """Every scenario, in the order `step` draws them, the same for the same (seed, step, record):
    shuffled, those whose pass rate is unknown or strictly between 0 and 1 first, then the deferred
    ones (`RewardRecord.no_signal`), except that each deferred one is retried among the first on
    about one step in `RETRY_ONE_IN`."""
    rng = random.Random(seed * 1_000_003 + step)
    retry = random.Random(f"retry:{seed}:{step}")
    deferred = {s.id for s in scenarios if record is not None and record.no_signal(s.id)}
    deferred -= {s_id for s_id in sorted(deferred) if retry.randrange(RETRY_ONE_IN) == 0}
    shuffled = rng.sample(list(scenarios), len(scenarios))
    return [s for s in shuffled if s.id not in deferred] + [s for s in shuffled if s.id in deferred]


def pick_scenarios(
    scenarios: Sequence[Scenario], k: int, *, seed: int, step: int, record: RewardRecord | None = None
) -> list[Scenario]:
    """`k` scenarios for `step`, the same ones for the same (seed, step, record) after a restart."""
    return scenario_order(scenarios, seed=seed, step=step, record=record)[:k]


def rollout_group(
    backend: TrainingBackend,
    scenario: Scenario,
    *,
    run: str,
    step: int,
    group_size: int,
    max_tokens: int,
    temperature: float,
    seed: int,
    attempt: int = 0,
    runner: ProgramRunner | None = None,
    workspace_runner: WorkspaceRunner | None = None,
    budget_cap: int | None = None,
) -> Group:
    """`group_size` completions of `scenario`, each verified: of up to the scenario's own budget (a
    replay's is sized to its fix), capped by `budget_cap` when a person set one, else `max_tokens`.
    Raises `VerifierUnavailable` before sampling when the verifier cannot run (`check_verifier`), or
    from the first verification that finds it cannot."""
    check_verifier(scenario, runner=runner, workspace_runner=workspace_runner)
    budget = max_tokens if scenario.max_tokens is None else scenario.max_tokens
    budget = budget if budget_cap is None else min(budget, budget_cap)
    choices = backend.sample(
        list(scenario.messages), n=group_size, max_tokens=budget, temperature=temperature, seed=seed
    )
    trajectories = []
    for choice in choices:
        text = choice.message.content or ""
        reward = verify(scenario, text, runner=runner, workspace_runner=workspace_runner)
        trajectories.append(
            Trajectory(
                messages_and_choices=[*scenario.messages, encode_choice(choice)],
                reward=reward,
                policy_step=step,
                metadata={"scenario": scenario.id},
            )
        )
    return Group(
        key=f"{rollout_prefix(run, step)}{attempt}:{scenario.id}",
        trajectories=trajectories,
        metadata={"scenario": scenario.id, "source": "rollout"},
    )


def rollout_prefix(run: str, step: int) -> str:
    return f"rollout:{run}:{step}."


def next_attempt(consumed: set[str], run: str, step: int) -> int:
    """Attempts at `step` already recorded (batches without signal) + 1, so a retry samples anew."""
    prefix = rollout_prefix(run, step)
    done = [int(k[len(prefix) :].split(":", 1)[0]) for k in consumed if k.startswith(prefix)]
    return max(done) + 1 if done else 0


@dataclass
class Rollouts:
    groups: list[Group] = field(default_factory=list)
    """One verified group per scenario that could be scored, those without variance included
    (the loop's `filter_groups` drops and counts them)."""
    unavailable: dict[str, str] = field(default_factory=dict)
    """Scenario id -> why its verifier could not run (it was skipped)."""
    redrawn: int = 0
    """Scenarios drawn beyond the `groups` asked for, each in place of a group without variance."""


def rollout_groups(
    backend: TrainingBackend,
    scenarios: Sequence[Scenario],
    *,
    run: str,
    step: int,
    groups: int,
    group_size: int,
    max_tokens: int,
    temperature: float = 1.0,
    seed: int = 0,
    attempt: int = 0,
    runner: ProgramRunner | None = None,
    workspace_runner: WorkspaceRunner | None = None,
    record: RewardRecord | None = None,
    redraws: int | None = None,
    budget_cap: int | None = None,
) -> Rollouts:
    """One group per scenario drawn for (seed, step, attempt, record) (`scenario_order`). A group
    whose rewards are all equal teaches nothing: another scenario is drawn in its place, up to
    `redraws` more (default `groups`; none at temperature 0, where every group of a greedy policy
    is flat), while the pool has any left. Every group's rewards go into
    `record`. A scenario whose verifier cannot run (`VerifierUnavailable`: no runner for it,
    repository or commit gone) or whose prompt does not fit the policy's context (`ContextTooLong`)
    is left out of the groups and listed in `Rollouts.unavailable` with the reason; the other
    scenarios go on. Completion budgets as `rollout_group` sets them."""
    order = scenario_order(scenarios, seed=seed + attempt * 7_919, step=step, record=record)
    wanted = groups
    extra = 0 if temperature == 0 else groups if redraws is None else redraws
    out = Rollouts()
    for i, s in enumerate(order):
        if wanted <= 0:
            break
        try:
            group = rollout_group(
                backend,
                s,
                run=run,
                step=step,
                group_size=group_size,
                max_tokens=max_tokens,
                temperature=temperature,
                seed=seed * 1_000_003 + step * 1_009 + attempt * 7_919 + i,
                attempt=attempt,
                runner=runner,
                workspace_runner=workspace_runner,
                budget_cap=budget_cap,
            )
        except (VerifierUnavailable, ContextTooLong) as exc:
            out.unavailable[s.id] = str(exc)
            log.warning("scenario_unavailable", run=run, step=step, scenario=s.id, reason=str(exc))
            wanted -= 1
            continue
        out.groups.append(group)
        rewards = [t.reward for t in group.trajectories]
        if record is not None:
            record.observe(s.id, rewards)
        # Replaced only while the pool holds more than the groups still wanted.
        if len(set(rewards)) < 2 and extra > 0 and len(order) - i - 1 >= wanted:
            extra -= 1
            out.redrawn += 1
            log.info("scenario_redrawn", run=run, step=step, scenario=s.id, rewards=rewards)
        else:
            wanted -= 1
    return out
