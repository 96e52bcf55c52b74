"""An episode's reward: one documented function of its components, never a sum of every reward it got.

Summed, an episode earned more by running its tests more often (4.83 against 2.97 for two
equivalent fixes), and an aborted episode that ran tests reached +3.0, above the real fix. Now an
episode has at most one value per component, each in [-1, 1]. Evidence:

    tests        the latest *verified* tests reward: rlide's own run of the project's tests on the
                 end state (training.scenarios.verification); the agent's own runs earn nothing
    feedback     the latest rating by a person (dashboard, `rlide episodes rate`)
    judge        the latest judge score

and claims, what the agent says about itself:

    outcome      the latest `end_episode` outcome (success +1, failure -1)
    self_rating  the latest rating an agent gave its own episode (`give_feedback`)

The reward is the weighted mean (`RewardWeights`, settings: `RLIDE_REWARD_WEIGHTS`) of the evidence
components it has; only an episode with no evidence at all is scored by its claims, and such an
episode is unverified: training leaves it out (`EpisodeStore.terminal_episodes`). So a claim never
moves a verified reward: claiming success on a broken tree, or rating oneself +1, earns exactly what
leaving the bug earns, and reporting a failure honestly costs nothing. The components are stored
(table `rewards`, every value with its source and whether it was verified), so an episode's reward
is recomputed whenever the weights change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from episodes.records import EpisodeStatus, RewardSource

COMPONENTS: tuple[RewardSource, ...] = (
    RewardSource.tests,
    RewardSource.outcome,
    RewardSource.feedback,
    RewardSource.judge,
    RewardSource.self_rating,
)
EVIDENCE = frozenset({RewardSource.tests, RewardSource.feedback, RewardSource.judge})
"""Components measured or given by someone other than the agent: they decide a verified reward."""


@dataclass(frozen=True)
class RewardWeights:
    """How much each component counts. The defaults follow the RLAIF plan this project grew from:
    verified tests first, then what a person said (the outcome, a rating), then a judge."""

    tests: float = 0.5
    outcome: float = 0.2
    feedback: float = 0.2
    judge: float = 0.1
    self_rating: float = 0.2

    def __post_init__(self) -> None:
        for name, weight in asdict(self).items():
            if not 0.0 <= weight <= 1e6:
                raise ValueError(f"reward weight {name} must be >= 0, got {weight}")

    def of(self, source: RewardSource) -> float:
        return float(getattr(self, source.value))


DEFAULT_WEIGHTS = RewardWeights()

OUTCOME_REWARD = {EpisodeStatus.success: 1.0, EpisodeStatus.failure: -1.0, EpisodeStatus.aborted: 0.0}
"""An ended episode's outcome as a reward (`end_episode`, a relabel); aborted work is neither good nor bad."""


def combine(components: Mapping[RewardSource, float], weights: RewardWeights = DEFAULT_WEIGHTS) -> float | None:
    """The weighted mean of the evidence components present; without any, of the claims (None
    without any component, or if all weigh nothing)."""
    present = {source: value for source, value in components.items() if source in COMPONENTS}
    evidence = {source: value for source, value in present.items() if source in EVIDENCE}
    chosen = evidence if any(weights.of(source) > 0 for source in evidence) else present
    weighted = [(weights.of(source), value) for source, value in chosen.items()]
    total = sum(weight for weight, _ in weighted)
    if total <= 0.0:
        return None
    # Shares first: a lone component then comes back exactly, not as 0.7500000000000001.
    return max(-1.0, min(1.0, sum(weight / total * value for weight, value in weighted)))
