"""Self-play rollouts: the current policy attempts scenarios, verifiers score it, GRPO groups come out."""

from __future__ import annotations

import random
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


def pick_scenarios(scenarios: Sequence[Scenario], k: int, *, seed: int, step: int) -> list[Scenario]:
    """`k` scenarios for `step`, the same ones for the same (seed, step) after a restart."""
    if not scenarios:
        return []
    rng = random.Random(seed * 1_000_003 + step)
    if k >= len(scenarios):
        return list(scenarios)
    return rng.sample(list(scenarios), k)


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
) -> Group:
    """`group_size` completions of `scenario`, each verified. Raises `VerifierUnavailable` before
    sampling when the verifier cannot run (`check_verifier`), or from the first verification that
    finds it cannot."""
    check_verifier(scenario, runner=runner, workspace_runner=workspace_runner)
    choices = backend.sample(
        list(scenario.messages), n=group_size, max_tokens=max_tokens, temperature=temperature, seed=seed
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
    """One verified group per scenario that could be scored."""
    unavailable: dict[str, str] = field(default_factory=dict)
    """Scenario id -> why its verifier could not run (it was skipped)."""


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
) -> Rollouts:
    """One group per scenario picked for (seed, step, attempt). A scenario whose verifier cannot run
    (`VerifierUnavailable`: no runner for it, repository or commit gone) or whose prompt does not fit
    the policy's context (`ContextTooLong`) is left out of the groups and listed in
    `Rollouts.unavailable` with the reason; the other scenarios go on."""
    picked = pick_scenarios(scenarios, groups, seed=seed + attempt * 7_919, step=step)
    out = Rollouts()
    for i, s in enumerate(picked):
        try:
            out.groups.append(
                rollout_group(
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
                )
            )
        except (VerifierUnavailable, ContextTooLong) as exc:
            out.unavailable[s.id] = str(exc)
            log.warning("scenario_unavailable", run=run, step=step, scenario=s.id, reason=str(exc))
    return out
