"""Training status for `rlide train status` and the MCP `training_status` tool.

Reads the episode log (the worker commits its cursor and per-step history there) and, on the
machine the worker runs on, the run's folder: its lock says whether the worker that the log calls
`training` is still alive (a Ctrl-C'd, killed or crashed worker leaves the log saying so; the
kernel drops its lock), and its `progress.json` what a live worker is doing. Light: no torch, no
ART, safe to import in the MCP server process.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from episodes.db import StoreError
from episodes.run_records import RunState, TrainingRun
from episodes.store import EpisodeStore
from training.backends.base import BackendConfig
from training.worker.metrics import TENSORBOARD_FOLDER
from training.worker.progress import WorkerProgress, read_progress
from training.worker.run_lock import WorkerLiveness, lock_path, worker_alive

RECENT_STEPS = 20


class StepReward(BaseModel):
    step: int
    algorithm: str = Field(description="What trained this step: grpo, sft or dpo.")
    reward_mean: float | None
    groups_trained: int
    sft_episodes: int = Field(0, description="External episodes imitated by this step (an SFT step; no reward).")


class TrainingStatus(BaseModel):
    run: str
    backend: str
    base_model: str
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="What the run was started with and keeps: backend, base model, hyperparameters.",
    )
    step: int = Field(description="Optimizer steps committed; the policy endpoint serves this checkpoint.")
    state: RunState
    message: str | None = None
    groups_trained: int
    groups_skipped_zero_variance: int = Field(description="Groups dropped because all their rewards were equal.")
    groups_skipped_stale: int = Field(description="Groups dropped because an older policy sampled them.")
    sft_steps: int = Field(0, description="Supervised steps on successful external episodes (the IDE's own model).")
    sft_episodes_trained: int = Field(0, description="External episodes those SFT steps imitated (each once).")
    sft_episodes_unusable: int = Field(0, description="External episodes set aside: no conversation to imitate.")
    sft_unusable_reasons: dict[str, int] = Field(
        default_factory=dict, description="Why external episodes were set aside, with how many each reason covers."
    )
    sft_latest_unusable: str | None = Field(None, description="The latest episode set aside, and why.")
    sft_skipped: int = Field(0, description="External episodes waiting that the backend cannot imitate (no SFT).")
    dpo_steps: int = Field(0, description="Preference (DPO) steps on pairs of logged episodes.")
    dpo_pairs_trained: int = Field(0, description="Preference pairs those DPO steps trained on (each once).")
    sft_skip_reason: str | None = None
    scenarios_unavailable: int = Field(
        0, description="Self-play scenarios skipped because their verifier could not run (repository or commit gone)."
    )
    scenario_unavailable_reason: str | None = Field(None, description="The latest such skip: which scenario and why.")
    worker_pid: int | None = Field(
        None, description="The worker process that owns the run now, or last did (None: not known on this machine)."
    )
    worker_alive: bool | None = Field(
        None, description="Whether that process still holds the run's lock (None: cannot be told from here)."
    )
    progress: WorkerProgress | None = Field(
        None, description="What the live worker is doing: rollouts sampled, tokens/s, replays, steps, loss."
    )
    tensorboard: str | None = Field(None, description="The command that charts this run's metrics.")
    recent: list[StepReward] = Field(description=f"The last {RECENT_STEPS} steps, oldest first.")
    updated_at: datetime


def step_algorithm(metrics: dict[str, float]) -> str:
    """Which objective a committed step trained, from the loss it reported."""
    for algorithm in ("sft", "dpo"):
        if f"losses/{algorithm}_loss" in metrics:
            return algorithm
    return "grpo"


class NoTrainingRun(StoreError):
    pass


def read_status(store: EpisodeStore, run: str | None = None) -> TrainingStatus:
    """Status of `run`, or of the most recently updated run when None."""
    if run is None:
        runs = store.runs.list_runs()
        if not runs:
            raise NoTrainingRun("no training run yet: start one with `rlide train --once` or `rlide train --daemon`")
        info = runs[0]
    else:
        info = store.runs.get_run(run)
    state, message, alive = honest_state(info)
    model_dir, _ = _run_folders(info)
    board = model_dir / TENSORBOARD_FOLDER if model_dir is not None else None
    steps = store.runs.training_steps(info.name, limit=RECENT_STEPS)
    sft = store.runs.sft_counts(info.name)
    dpo = store.runs.dpo_counts(info.name)
    return TrainingStatus(
        run=info.name,
        backend=info.backend,
        base_model=info.base_model,
        settings=store.runs.identity(info.name) or {},
        step=info.step,
        state=state,
        message=message,
        groups_trained=info.groups_trained,
        groups_skipped_zero_variance=info.groups_skipped_zero_variance,
        groups_skipped_stale=info.groups_skipped_stale,
        sft_steps=sft.steps,
        sft_episodes_trained=sft.episodes_trained,
        sft_episodes_unusable=sft.episodes_unusable,
        sft_unusable_reasons=sft.unusable_reasons,
        sft_latest_unusable=sft.latest_unusable,
        sft_skipped=info.sft_skipped,
        dpo_steps=dpo.steps,
        dpo_pairs_trained=dpo.pairs_trained,
        sft_skip_reason=info.sft_skip_reason,
        scenarios_unavailable=info.scenarios_unavailable,
        scenario_unavailable_reason=info.scenario_unavailable_reason,
        worker_pid=None if alive is None else alive.pid,
        worker_alive=None if alive is None else alive.alive,
        progress=read_progress(model_dir) if model_dir is not None and alive is not None and alive.alive else None,
        tensorboard=f"tensorboard --logdir {board}" if board is not None and board.is_dir() else None,
        recent=[
            StepReward(
                step=s.step,
                algorithm=step_algorithm(s.metrics),
                reward_mean=s.reward_mean,
                groups_trained=s.groups_trained,
                sft_episodes=int(s.metrics.get("charts/sft_episodes", 0)),
            )
            for s in steps
        ],
        updated_at=info.updated_at,
    )


LIVE_STATES = {RunState.training: "training", RunState.backing_off: "backing off"}
"""States only a live worker can be in."""


def honest_state(info: TrainingRun) -> tuple[RunState, str | None, WorkerLiveness | None]:
    """The run's state and message as a reader should show them: a state only a live worker can be
    in, whose worker is gone, reads `stopped (process N gone)`. With the liveness (None: the run's
    lock is not on this machine, so the log's word stands)."""
    model_dir, lock_dir = _run_folders(info)
    alive = worker_alive(lock_path(lock_dir, info.name)) if lock_dir is not None else None
    live = LIVE_STATES.get(info.state)
    if live is None or alive is None or alive.alive:
        return info.state, info.message, alive
    pid = "?" if alive.pid is None else alive.pid
    said = f"stopped (process {pid} gone): the log last said {live}" + (f": {info.message}" if info.message else "")
    return RunState.stopped, said, alive


def _run_folders(info: TrainingRun) -> tuple[Path | None, Path | None]:
    """The run's folder and its lock's, from the config its worker saved (None: a run saved without
    one, or with a backend this version cannot read)."""
    saved = info.config or {}
    fields = {f.name for f in dataclasses.fields(BackendConfig)}
    raw = saved.get("backend")
    if not isinstance(raw, dict):
        return None, None
    try:
        backend = BackendConfig(**{k: v for k, v in raw.items() if k in fields and k != "path"}, path=Path(raw["path"]))
    except (KeyError, TypeError, ValueError):
        return None, None
    model_dir = backend.model_dir()
    lock_dir = saved.get("lock_dir")
    return model_dir, Path(lock_dir).expanduser() if lock_dir else model_dir
