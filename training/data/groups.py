"""GRPO groups: trajectories of one task, their filtering, and where they come from.

A group is only useful when its rewards differ (GRPO's advantage is reward minus the group mean)
and when it was sampled by a recent enough policy (old logprobs make the importance ratio
meaningless). Both kinds are dropped before training and counted, so the worker can say why a
batch taught nothing. These types are plain data (no ART import); `to_art` converts at the
boundary of the ART backends.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, cast

from episodes.codec import CHOICE_TAG, decode_conversation
from episodes.records import EpisodeSource
from episodes.run_records import GroupOutcome
from episodes.store import EpisodeStore
from training.data.conversations import policy_conversation

LOG_GROUP_PREFIX = "log:"


@dataclass
class Trajectory:
    messages_and_choices: list[dict[str, Any]]
    """Codec-encoded items: chat messages and tagged `Choice`s (the trainable turns)."""
    reward: float
    tools: list[dict[str, Any]] | None = None
    policy_step: int | None = None
    """Oldest checkpoint step that sampled one of its choices (None: not sampled from our policy)."""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def has_choices(self) -> bool:
        return any(CHOICE_TAG in item for item in self.messages_and_choices)


@dataclass
class Group:
    key: str
    """Stable identity; the worker records it so a group is never trained twice."""
    trajectories: list[Trajectory]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]

    @property
    def reward_std(self) -> float:
        r = self.rewards
        if not r:
            return 0.0
        mean = sum(r) / len(r)
        return math.sqrt(sum((x - mean) ** 2 for x in r) / len(r))

    @property
    def policy_step(self) -> int | None:
        steps = [t.policy_step for t in self.trajectories if t.policy_step is not None]
        return min(steps) if steps else None


@dataclass
class FilterResult:
    kept: list[Group]
    outcomes: dict[str, GroupOutcome]
    """Every dropped group's key with why it was dropped (kept groups are added once trained)."""

    @property
    def zero_variance(self) -> int:
        return sum(1 for o in self.outcomes.values() if o is GroupOutcome.zero_variance)

    @property
    def stale(self) -> int:
        return sum(1 for o in self.outcomes.values() if o is GroupOutcome.stale)


def filter_groups(groups: list[Group], *, current_step: int, max_staleness: int, min_std: float = 1e-6) -> FilterResult:
    """Drop groups with (near) equal rewards and groups sampled more than `max_staleness` steps ago."""
    kept: list[Group] = []
    outcomes: dict[str, GroupOutcome] = {}
    for group in groups:
        step = group.policy_step
        if step is not None and current_step - step > max_staleness:
            outcomes[group.key] = GroupOutcome.stale
        elif len(group.trajectories) < 2 or group.reward_std < min_std:
            outcomes[group.key] = GroupOutcome.zero_variance
        else:
            kept.append(group)
    return FilterResult(kept=kept, outcomes=outcomes)


def group_key(prefix: str, parts: list[str]) -> str:
    return prefix + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


def log_group_key(episode_ids: list[str]) -> str:
    """Key of a group built from logged episodes; it lists them so consumed episodes are known."""
    return LOG_GROUP_PREFIX + ",".join(sorted(episode_ids))


def consumed_episode_ids(keys: set[str]) -> set[str]:
    out: set[str] = set()
    for key in keys:
        if key.startswith(LOG_GROUP_PREFIX):
            out.update(key.removeprefix(LOG_GROUP_PREFIX).split(","))
    return out


def groups_from_log(store: EpisodeStore, *, run: str, group_size: int, model: str | None = None) -> list[Group]:
    """Ready groups of policy episodes: ended, rewarded, not consumed by `run`, `group_size` per task.
    `model`: the run's, as its policy endpoint records turns (`student-RUN@{step}`; `student` for the
    default run); episodes another model sampled any turn of are left out, so a group never mixes runs,
    or the base models they train."""
    consumed = consumed_episode_ids(store.runs.consumed_groups(run))
    by_task: dict[str, list[tuple[str, Trajectory]]] = defaultdict(list)
    for episode in store.terminal_episodes(source=EpisodeSource.policy):
        if episode.id in consumed or episode.reward_total is None or episode.implicit:
            continue
        turns = store.turns.policy_turns(episode.id)
        if model is not None and any(turn.model.rsplit("@", 1)[0] != model for turn in turns):
            continue
        items, tools, steps = policy_conversation(turns)  # the conversation rebuilt, its choices exact
        if items:
            reward = max(-1.0, min(1.0, episode.reward_total))
            trajectory = Trajectory(items, reward, tools, min(steps) if steps else None, {"episode_id": episode.id})
            by_task[episode.task.strip()].append((episode.id, trajectory))
    groups: list[Group] = []
    for task, members in by_task.items():
        for start in range(0, len(members) - group_size + 1, group_size):
            chunk = members[start : start + group_size]
            groups.append(
                Group(
                    key=log_group_key([eid for eid, _ in chunk]),
                    trajectories=[trajectory for _, trajectory in chunk],
                    metadata={"task": task[:200], "source": "log"},
                )
            )
    return groups


def to_art(groups: list[Group]) -> list[Any]:
    """ART `TrajectoryGroup`s with real `Choice` objects (imports ART: backends only)."""
    import art

    return [
        art.TrajectoryGroup(
            [
                art.Trajectory(
                    messages_and_choices=decode_conversation(t.messages_and_choices),
                    tools=cast(Any, t.tools),
                    reward=t.reward,
                    metadata={k: v for k, v in t.metadata.items() if isinstance(v, str | int | float | bool)},
                )
                for t in g.trajectories
            ],
            # The scenario a self-play group practised names the task in the trained-task ledger.
            metadata={
                "group_key": g.key,
                **({"scenario": str(g.metadata["scenario"])} if "scenario" in g.metadata else {}),
            },
        )
        for g in groups
    ]
