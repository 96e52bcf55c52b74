"""An LLM judge mixed into verifier rewards: ART's RULER, which scores a group's trajectories
relative to each other, called through litellm (any provider litellm knows).

Tests run the real RULER code path offline with litellm's `mock_response`; a real judge needs the
provider's key (e.g. OPENAI_API_KEY) and was not exercised here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from episodes.codec import as_message
from training.data.groups import Group, Trajectory

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class JudgeConfig:
    model: str
    """litellm model id of the judge, e.g. `openai/gpt-4o-mini`."""
    weight: float = 0.5
    """Share of the judge in the reward: (1 - weight) * verifier + weight * judge, judge mapped to [-1, 1]."""
    rubric: str | None = None
    """Grading rubric for the judge; None uses RULER's default."""
    extra_litellm_params: dict[str, Any] = field(default_factory=dict)
    """Passed to litellm (temperature, api_base, or `mock_response` in tests)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"judge weight is in [0, 1], got {self.weight}")


def _messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    return [as_message(item) for item in trajectory.messages_and_choices]


async def _scores(group: Group, config: JudgeConfig) -> list[tuple[float, str]]:
    from art.rewards.ruler import DEFAULT_RUBRIC, ruler

    scores = await ruler(
        [_messages(t) for t in group.trajectories],  # type: ignore[misc]
        judge_model=config.model,
        extra_litellm_params=config.extra_litellm_params or None,
        rubric=config.rubric or DEFAULT_RUBRIC,
    )
    return [(float(s.score), s.explanation) for s in scores]


def judge_group(group: Group, config: JudgeConfig) -> Group:
    """The group with each reward mixed with the judge's score. If the judge fails (network, a
    malformed verdict), the verifier's rewards stand and the failure is noted in the metadata."""
    try:
        scores = asyncio.run(_scores(group, config))
    except Exception as exc:  # noqa: BLE001 - litellm and providers raise anything; the verifier reward stands
        log.warning("judge_failed", group=group.key, model=config.model, error=str(exc))
        return replace(group, metadata={**group.metadata, "judge_error": f"{type(exc).__name__}: {exc}"})
    mixed = [
        replace(
            t,
            reward=(1 - config.weight) * t.reward + config.weight * (2 * score - 1),
            metadata={**t.metadata, "verifier_reward": t.reward, "judge_score": score, "judge_explanation": why},
        )
        for t, (score, why) in zip(group.trajectories, scores, strict=True)
    ]
    return replace(group, trajectories=mixed, metadata={**group.metadata, "judge": config.model})
