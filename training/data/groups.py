"""GRPO groups: trajectories of one task, their filtering, and where they come from.

A group is only useful when its rewards differ (GRPO's advantage is reward minus the group mean)
and when it was sampled by a recent enough policy (old logprobs make the importance ratio
meaningless). Both kinds are dropped before training and counted, so the worker can say why a
batch taught nothing. A trajectory longer than the student's context is dropped from its group
before that check, so the advantages the trainer computes are over the trajectories it trains on
(dropping one afterwards leaves the others' advantages measured against a reward that is gone).
Such a trajectory is dropped, not condensed: its choices were sampled after the whole tool results,
and training them after cut ones would score them in a context the policy never saw.

Only verified rewards make GRPO data: a policy episode rewarded by its own claims alone (its
outcome, its self-rating) or carrying an uncleared flag is set aside, whatever the store's
`train_unverified`, and a verified episode's reward is its evidence alone (claims never move it).
These types are plain data (no ART import); `to_art` converts at the boundary of the ART backends.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from episodes.codec import CHOICE_TAG, decode_conversation
from episodes.records import Episode, EpisodeSource
from episodes.rewards import EVIDENCE, combine
from episodes.run_records import GroupOutcome
from episodes.store import EpisodeStore
from training.data.conversations import policy_conversation
from training.data.fit import Selection, SetAside, SetAsideReason, StudentFit

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
    """The groups to train, each without its trajectories that do not fit the student."""
    outcomes: dict[str, GroupOutcome]
    """Every dropped group's key with why it was dropped (kept groups are added once trained)."""
    set_aside: SetAside = field(default_factory=SetAside)
    """Trajectories too long for the student, and groups with no variance left, counted."""

    @property
    def zero_variance(self) -> int:
        return sum(1 for o in self.outcomes.values() if o is GroupOutcome.zero_variance)

    @property
    def stale(self) -> int:
        return sum(1 for o in self.outcomes.values() if o is GroupOutcome.stale)


def filter_groups(
    groups: list[Group],
    *,
    current_step: int,
    max_staleness: int,
    min_std: float = 1e-6,
    fit: StudentFit | None = None,
) -> FilterResult:
    """Drop the trajectories longer than `fit`'s context first, then groups sampled more than
    `max_staleness` steps ago and groups whose remaining rewards are (near) equal."""
    kept: list[Group] = []
    outcomes: dict[str, GroupOutcome] = {}
    set_aside = SetAside()
    for group in groups:
        if fit is not None:
            group = _fitting(group, fit, set_aside)
        step = group.policy_step
        if step is not None and current_step - step > max_staleness:
            outcomes[group.key] = GroupOutcome.stale
        elif len(group.trajectories) < 2 or group.reward_std < min_std:
            outcomes[group.key] = GroupOutcome.zero_variance
            rewards = ", ".join(f"{r:+.2f}" for r in group.rewards) or "none"
            set_aside.add(SetAsideReason.no_variance, f"group {group.key[:40]}: rewards left {rewards}")
        else:
            kept.append(group)
    return FilterResult(kept=kept, outcomes=outcomes, set_aside=set_aside)


def _fitting(group: Group, fit: StudentFit, set_aside: SetAside) -> Group:
    """`group` without its trajectories longer than the student's context (counted in `set_aside`)."""
    fitting = []
    for trajectory in group.trajectories:
        why = fit.too_long(trajectory.messages_and_choices, trajectory.tools)
        if why is None:
            fitting.append(trajectory)
        else:
            label = trajectory.metadata.get("episode_id") or group.key[:40]
            set_aside.add(SetAsideReason.too_long, f"trajectory of {label}: {why}")
    if len(fitting) == len(group.trajectories):
        return group
    return Group(key=group.key, trajectories=fitting, metadata=group.metadata)


def group_key(prefix: str, parts: list[str]) -> str:
    return prefix + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


def log_group_key(episode_ids: list[str], rewards: list[float]) -> str:
    """Key of a group built from logged episodes: it lists them, so consumed episodes are known, and
    names their rewards, so a group skipped for zero variance is a new group once a reward changes."""
    order = sorted(range(len(episode_ids)), key=lambda i: episode_ids[i])
    named = hashlib.sha256(",".join(repr(float(rewards[i])) for i in order).encode()).hexdigest()[:12]
    return LOG_GROUP_PREFIX + ",".join(episode_ids[i] for i in order) + "|" + named


def consumed_episode_ids(outcomes: Mapping[str, GroupOutcome]) -> set[str]:
    """The episodes a run's log groups used up: trained, or stale (sampled too long ago ever to be fresh
    again). A zero-variance group's stay available: with a reward changed they form a group again."""
    out: set[str] = set()
    for key, outcome in outcomes.items():
        if key.startswith(LOG_GROUP_PREFIX) and outcome is not GroupOutcome.zero_variance:
            out.update(key.removeprefix(LOG_GROUP_PREFIX).split("|")[0].split(","))
    return out


def verified_reward(store: EpisodeStore, episode: Episode) -> float | None:
    """The episode's reward from evidence alone (a verifier's tests, a person's rating, a judge),
    or None when only its claims speak for it or a monitor flag is not cleared."""
    if not episode.verified or episode.flags:
        return None
    evidence = {source: value for source, value in episode.reward_components.items() if source in EVIDENCE}
    return combine(evidence, store.weights)


def start_state_digest(store: EpisodeStore, episode_id: str) -> str:
    """What the episode started from: its first captured workspace state (commit and changes), or ""
    when it captured none. Attempts are comparable, and so one GRPO group, only from the same start."""
    states = store.workspace_states(episode_id)
    if not states:
        return ""
    first = states[0]
    files = json.dumps(sorted(first.files.items(), key=lambda item: item[0]), ensure_ascii=False)
    return f"{first.commit}:{hashlib.sha256(files.encode('utf-8', 'surrogatepass')).hexdigest()[:24]}"


def log_groups(
    store: EpisodeStore, *, run: str, group_size: int, model: str | None = None, fit: StudentFit | None = None
) -> Selection[Group]:
    """Ready groups of policy episodes: ended, rewarded by evidence, not consumed by `run`, each
    trajectory within `fit`'s context; with what was set aside. Attempts are grouped when they share
    their task, their start state (`start_state_digest`) and their client (the scaffold: different
    prompts and tools are different policies to compare): `group_size` per group, except the
    attempts of one agent run (`Episode.batch`), which form one group of their own once all of them
    have ended. `model`: the run's, as its policy endpoint records turns (`student-RUN@{step}`;
    `student` for the default run); episodes another model sampled any turn of are left out, so a
    group never mixes runs, or the base models they train."""
    judged = store.runs.group_outcomes(run)
    consumed = consumed_episode_ids(judged)
    set_aside = SetAside()
    by_key: dict[tuple[str, str, str, str], list[tuple[str, Trajectory]]] = defaultdict(list)
    ended: dict[tuple[str, str, str, str], int] = defaultdict(int)
    sizes: dict[tuple[str, str, str, str], int] = {}
    # Every ended episode, unverified ones included, so those set aside are counted, not unseen.
    for episode in store.terminal_episodes(source=EpisodeSource.policy, verified_only=False):
        if episode.id in consumed or episode.reward_total is None or episode.implicit:
            continue
        turns = store.turns.policy_turns(episode.id)
        if model is not None and any(turn.model.rsplit("@", 1)[0] != model for turn in turns):
            continue
        key = (episode.task.strip(), episode.client or "", start_state_digest(store, episode.id), episode.batch or "")
        ended[key] += 1
        if episode.batch is not None and episode.batch_size is not None:
            sizes[key] = episode.batch_size
        reward = verified_reward(store, episode)
        if reward is None:
            claims = ", ".join(sorted(source.value for source in episode.reward_components)) or "none"
            why = "an uncleared monitor flag" if episode.flags else f"only claims (components: {claims})"
            set_aside.add(SetAsideReason.unverified_reward, f"episode {episode.id}: rewarded by {why}")
            continue
        items, tools, steps = policy_conversation(turns)  # the conversation rebuilt, its choices exact
        if not items:
            continue
        too_long = fit.too_long(items, tools) if fit is not None else None
        if too_long is not None:
            set_aside.add(SetAsideReason.too_long, f"episode {episode.id}: {too_long}")
            continue
        trajectory = Trajectory(items, reward, tools, min(steps) if steps else None, {"episode_id": episode.id})
        by_key[key].append((episode.id, trajectory))
    groups: list[Group] = []
    for key, members in by_key.items():
        task, client, start, batch = key
        if batch:  # an agent run's attempts: one group, once every attempt has ended
            chunks = [members] if ended[key] >= sizes.get(key, 0) and len(members) >= 2 else []
        else:
            chunks = [members[i : i + group_size] for i in range(0, len(members) - group_size + 1, group_size)]
        for chunk in chunks:
            key_of = log_group_key([eid for eid, _ in chunk], [trajectory.reward for _, trajectory in chunk])
            if judged.get(key_of) is GroupOutcome.zero_variance:
                continue  # judged with these very rewards: nothing to learn until one changes
            groups.append(
                Group(
                    key=key_of,
                    trajectories=[trajectory for _, trajectory in chunk],
                    metadata={"task": task[:200], "source": "log", "client": client, "start": start, "batch": batch},
                )
            )
    return Selection(groups, set_aside)


def groups_from_log(
    store: EpisodeStore, *, run: str, group_size: int, model: str | None = None, fit: StudentFit | None = None
) -> list[Group]:
    """`log_groups`' groups."""
    return log_groups(store, run=run, group_size=group_size, model=model, fit=fit).items


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
