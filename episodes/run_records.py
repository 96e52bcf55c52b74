"""Record types of the learning side that the log keeps: policy turns, training runs, their steps and
consumed groups.

They live in the episode log because the log's database holds them (one store, one set of
migrations, one transaction per event): the policy endpoint writes turns, the worker its runs, and
the MCP server and the dashboard read them back without importing `training` (torch, ART). Kept
apart from `episodes.records`, the records of what an agent did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from episodes.records import EpisodeSource, EpisodeStatus


class RunState(StrEnum):
    idle = "idle"
    training = "training"
    backing_off = "backing_off"
    stopped = "stopped"
    no_signal = "no_signal"
    failed = "failed"


class GroupOutcome(StrEnum):
    trained = "trained"
    zero_variance = "zero_variance"
    stale = "stale"


class PolicyTurn(BaseModel):
    """One completion sampled from our policy inside an episode, exactly as sampled.

    `choice` is the codec's encoding of an OpenAI `Choice` (with per-token logprobs); `request` is
    the chat request (messages, tools) that produced it, redacted like everything else in the log.
    """

    id: int
    episode_id: str
    model: str
    checkpoint_step: int | None = None
    request: dict[str, Any]
    choice: dict[str, Any]
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    created_at: datetime


@dataclass(frozen=True)
class TurnContext:
    """What the policy endpoint needs before sampling a turn of an episode: whether it may record
    into it, and the exact tokens of its last turn (to continue token in, token out, and to store
    only what the next turn adds to it). Read from the log for an episode's first turn through a
    gateway process, then kept (`gateway.LastTurns`)."""

    source: EpisodeSource
    status: EpisodeStatus
    last_request: dict[str, Any] | None = None
    """The last turn's stored (redacted) request; None when there is no turn with token ids."""
    last_choice: dict[str, Any] | None = None
    """The last turn's stored (codec-encoded, redacted) choice."""
    last_prompt_token_ids: list[int] | None = None
    last_completion_token_ids: list[int] | None = None
    last_turn_id: int | None = None
    last_request_sent: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """`last_request` as the client sent it, secrets included: only in the memory of the process that
    recorded the turn (never read from the log, never printed), so the next request, which repeats
    it, redacts only what is new (`policy_turns.RedactedRequest.of`)."""


class TrainingRun(BaseModel):
    name: str
    backend: str
    base_model: str
    step: int = Field(0, description="Optimizer steps committed so far; the next step trains step+1.")
    state: RunState = RunState.idle
    message: str | None = None
    config: dict[str, Any] | None = None
    groups_trained: int = 0
    groups_skipped_zero_variance: int = 0
    groups_skipped_stale: int = 0
    sft_skipped: int = 0
    """External episodes ready for SFT that the run's backend could not imitate (last check)."""
    sft_skip_reason: str | None = None
    scenarios_unavailable: int = 0
    """Picked self-play scenarios skipped because their verifier could not run (cumulative)."""
    scenario_unavailable_reason: str | None = None
    """The latest such skip: which scenario and why."""
    created_at: datetime
    updated_at: datetime


class SftOutcome(StrEnum):
    trained = "trained"
    unusable = "unusable"
    """No conversation to imitate (nothing but bookkeeping steps, or an empty task)."""


class SftCounts(BaseModel):
    steps: int = 0
    episodes_trained: int = 0
    episodes_unusable: int = 0
    unusable_reasons: dict[str, int] = {}
    """Why episodes were set aside, with how many each reason covers."""
    latest_unusable: str | None = None
    """The latest episode set aside, and why."""


class DpoCounts(BaseModel):
    steps: int = 0
    pairs_trained: int = 0
    pairs_unusable: int = 0


class TrainingStepRecord(BaseModel):
    run: str
    step: int
    reward_mean: float | None
    reward_std: float | None
    groups_trained: int
    groups_skipped_zero_variance: int
    groups_skipped_stale: int
    metrics: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
