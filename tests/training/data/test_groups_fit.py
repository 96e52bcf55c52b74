"""GRPO data: only verified rewards train, and a trajectory longer than the student's context leaves
its group before the group's variance (hence its advantages) is measured. Lengths are counted with
the real Qwen2.5-Coder tokenizer; episodes are recorded the way the policy endpoint records them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from episodes.codec import encode_choice
from episodes.policy_turns import EncodedTurn
from episodes.records import EpisodeSource, EpisodeStatus, RewardSource
from episodes.run_records import GroupOutcome
from episodes.store import EpisodeStore
from tests.logdata import make_choice, policy_episode
from tests.training.data.recorded import NEEDS_QWEN, qwen_folder
from training.data.fit import SetAsideReason, StudentFit
from training.data.groups import Group, Trajectory, filter_groups, groups_from_log, log_groups

pytest.importorskip("openai")  # policy turns are real `Choice` objects


def claimed_episode(store: EpisodeStore, task: str, *, success: bool) -> str:
    """A policy episode whose only rewards are its own claims: its outcome and a self-rating."""
    episode = store.start_episode(task, source=EpisodeSource.policy, client="gateway")
    choice = make_choice("all fixed", [21, 22], [-0.1, -0.2])
    request = {"messages": [{"role": "user", "content": task}]}
    store.turns.add_policy_turn(
        episode.id,
        EncodedTurn.of(model="student", request=request, choice=encode_choice(choice), checkpoint_step=3,
                       completion_token_ids=[21, 22]),
    )  # fmt: skip
    store.end_episode(episode.id, EpisodeStatus.success if success else EpisodeStatus.failure)
    store.add_reward(episode.id, RewardSource.feedback, 1.0 if success else -1.0, "I did well", verified=False)
    return episode.id


def test_claims_never_enter_grpo_even_when_the_store_trains_unverified(tmp_path: Path) -> None:
    store = EpisodeStore.open(str(tmp_path / "episodes.db"), train_unverified=True)
    verified = [policy_episode(store, "fix the failing test", r, seed=s) for r, s in ((1.0, 0.0), (-1.0, 0.5))]
    claimed = [claimed_episode(store, "fix the parser", success=s) for s in (True, False)]
    assert all(store.get_episode(e).reward_total is not None for e in claimed)  # rewarded, by claims

    selection = log_groups(store, run="r", group_size=2)
    assert [sorted(t.metadata["episode_id"] for t in g.trajectories) for g in selection.items] == [sorted(verified)]
    assert selection.set_aside.counts == {SetAsideReason.unverified_reward: 2}
    assert "rewarded by only claims" in selection.set_aside.latest[SetAsideReason.unverified_reward]
    assert [g.key for g in groups_from_log(store, run="r", group_size=2)] == [g.key for g in selection.items]
    store.close()


def test_a_verified_reward_is_its_evidence_alone(store: EpisodeStore) -> None:
    episode = policy_episode(store, "fix the failing test", -1.0)
    store.add_reward(episode, RewardSource.feedback, 1.0, "rated myself", verified=False)  # a claim on top
    other = policy_episode(store, "fix the failing test", 1.0, seed=0.5)
    [group] = log_groups(store, run="r", group_size=2).items
    rewards = {t.metadata["episode_id"]: t.reward for t in group.trajectories}
    assert rewards == {episode: -1.0, other: 1.0}


# -- over-length trajectories leave before the group is judged ---------------------------------------


@pytest.fixture(scope="module")
def fit() -> StudentFit:
    folder = qwen_folder()
    if folder is None:
        pytest.skip(NEEDS_QWEN)
    return StudentFit.of_folder(folder, 512, model="qwen")


def trajectory(reward: float, tool_output: str, name: str) -> Trajectory:
    call = {"id": "call_1", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "fix the off-by-one in chunked()"},
        encode_choice(make_choice(None, [11, 12], [-0.3, -0.1], tool_call=call)),
        {"role": "tool", "tool_call_id": "call_1", "content": tool_output},
        encode_choice(make_choice("fixed", [21, 22], [-0.2, -0.4])),
    ]
    return Trajectory(items, reward, None, 3, {"episode_id": name})


SHORT = "1 failed, 3 passed in 0.1s"
LONG = "tests/test_chunks.py::test_even_lengths_split_whole PASSED [ 50%]\n" * 200


def test_an_over_length_trajectory_leaves_its_group_before_its_variance_is_judged(fit: StudentFit) -> None:
    # The only success is too long: without it the group has no signal, and must not be trained with
    # advantages measured against a reward that will not be trained on.
    lonely = Group("g1", [trajectory(1.0, LONG, "long"), trajectory(-1.0, SHORT, "a"), trajectory(-1.0, SHORT, "b")])
    mixed = Group("g2", [trajectory(1.0, SHORT, "c"), trajectory(1.0, LONG, "long2"), trajectory(-1.0, SHORT, "d")])
    result = filter_groups([lonely, mixed], current_step=3, max_staleness=4, fit=fit)
    assert result.outcomes == {"g1": GroupOutcome.zero_variance}
    [kept] = result.kept
    assert [t.metadata["episode_id"] for t in kept.trajectories] == ["c", "d"]
    assert kept.rewards == [1.0, -1.0]  # the advantages the trainer computes are over these two
    assert result.set_aside.counts == {SetAsideReason.too_long: 2, SetAsideReason.no_variance: 1}
    assert "longer than max_seq_len=512 of qwen" in result.set_aside.latest[SetAsideReason.too_long]
    assert result.set_aside.as_dict()["counts"] == {"no_variance": 1, "too_long": 2}
    # Without a fit, nothing is measured (the groups are what they were).
    assert len(filter_groups([lonely], current_step=3, max_staleness=4).kept[0].trajectories) == 3
