"""Training status for `rlide train status` and the MCP `training_status` tool.

Reads only the episode log (the worker commits its cursor and per-step history there), so it is
light: no torch, no ART, safe to import in the MCP server process.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from episodes.db import StoreError
from episodes.run_records import RunState
from episodes.store import EpisodeStore

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
    steps = store.runs.training_steps(info.name, limit=RECENT_STEPS)
    sft = store.runs.sft_counts(info.name)
    dpo = store.runs.dpo_counts(info.name)
    return TrainingStatus(
        run=info.name,
        backend=info.backend,
        base_model=info.base_model,
        settings=store.runs.identity(info.name) or {},
        step=info.step,
        state=info.state,
        message=info.message,
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
