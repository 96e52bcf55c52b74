"""How a run of the training worker ends: a `WorkerReport` with its `StopReason`, or a `WorkerError`
whose message says what to do."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class WorkerError(Exception):
    """The worker cannot start or go on; the message says what to do."""


class RunSettingsChanged(WorkerError):
    """A run was asked to resume with another value of what it keeps for life (its backend, base
    model or a hyperparameter: `training.backends.base.IDENTITY`). Refused before the model loads;
    `changed` maps each such setting to (the run's value, the value asked for), and `new_run` is a
    free run name to train the new values under."""

    def __init__(self, run: str, changed: dict[str, tuple[Any, Any]], new_run: str) -> None:
        self.run = run
        self.changed = changed
        self.new_run = new_run
        kept = "; ".join(f"{key} {old!r} (not {new!r})" for key, (old, new) in changed.items())
        super().__init__(
            f"training run {run!r} was started with {kept}, and a run keeps these for life: resume it with"
            f" the values it was started with (`rlide train status` shows them), or train the new ones as"
            f" another run: --run {new_run}"
        )


class StopReason(StrEnum):
    once = "once"
    max_steps = "max_steps"
    signal = "signal"
    no_signal = "no_signal"
    backend_failed = "backend_failed"
    interrupted = "interrupted"
    """Ctrl-C (SIGINT in `--once`, a second one in `--daemon`): the step in progress was not kept."""


@dataclass
class WorkerReport:
    run: str
    start_step: int
    step: int
    steps_trained: int = 0
    groups_trained: int = 0
    groups_skipped_zero_variance: int = 0
    groups_skipped_stale: int = 0
    rewards: list[float] = field(default_factory=list)
    """Mean rollout/group reward of each trained step, in order."""
    stop_reason: StopReason = StopReason.once
    message: str = ""
    sft_steps: int = 0
    """Of `steps_trained`, how many were supervised steps on external episodes."""
    sft_episodes: int = 0
    """External episodes those SFT steps imitated."""
    sft_skipped: int = 0
    """External episodes ready for SFT that the backend cannot imitate (it has no supervised step)."""
    sft_skip_reason: str | None = None
    dpo_steps: int = 0
    """Of `steps_trained`, how many were preference (DPO) steps."""
    dpo_pairs: int = 0
    """Preference pairs those DPO steps trained on."""
    rollouts: int = 0
    """Self-play trajectories sampled and scored by their verifier."""
    scenarios_unavailable: int = 0
    """Picked scenarios skipped because their verifier could not run."""
    scenario_unavailable_reason: str | None = None
    """The latest such skip: which scenario and why."""
    replays: int = 0
    """Of the self-play groups, how many re-solved a logged episode from its start state (log scenarios)."""
    set_aside: list[str] = field(default_factory=list)
    """One line per cause of data left untrained in this invocation, with what to change."""
    nothing_trained: str | None = None
    """When no step trained: one line saying why and what to change."""
    evals: list[dict[str, Any]] = field(default_factory=list)
    """Evaluations during training (`eval_tasks`): step, tasks, pass_at_1, n."""
    best_checkpoint: dict[str, Any] | None = None
    """The best checkpoint on `eval_tasks` so far (`best.json`), once one was evaluated."""


class WorkerInterrupted(KeyboardInterrupt):
    """Ctrl-C reached the worker: the run's state and `report.message` say what was interrupted and what
    was kept. A `KeyboardInterrupt`, so that a caller that does not catch it still stops."""

    def __init__(self, report: WorkerReport) -> None:
        super().__init__(report.message)
        self.report = report
