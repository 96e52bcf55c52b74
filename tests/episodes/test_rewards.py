"""An episode's reward is one function of its components, never a sum (episodes/rewards.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from episodes.db import connect
from episodes.migrations import MIGRATIONS, migrate
from episodes.records import EpisodeStatus, RewardSource
from episodes.rewards import RewardWeights, combine
from episodes.store import EpisodeStore

TESTS, OUTCOME, FEEDBACK, JUDGE = RewardSource.tests, RewardSource.outcome, RewardSource.feedback, RewardSource.judge
SELF = RewardSource.self_rating


def test_evidence_combines_as_its_weighted_mean_and_claims_never_move_it() -> None:
    assert combine({}) is None
    assert combine({TESTS: 1.0}) == 1.0
    assert combine({TESTS: 1.0, FEEDBACK: -1.0, JUDGE: 0.0}) == pytest.approx((0.5 - 0.2) / 0.8)
    # A claim of success on a broken tree, or a self rating, earns what leaving the bug earns; an
    # honest failure costs nothing.
    assert combine({TESTS: -1.0, OUTCOME: 1.0, SELF: 1.0}) == combine({TESTS: -1.0, OUTCOME: -1.0}) == -1.0
    # Claims alone score an (unverified) episode, for people to read.
    assert combine({OUTCOME: 1.0, SELF: -1.0}) == pytest.approx((0.2 - 0.2) / 0.4)
    assert combine({TESTS: 1.0, OUTCOME: -1.0}, RewardWeights(tests=0.0)) == -1.0  # evidence weighing nothing
    assert combine({OUTCOME: 1.0}, RewardWeights(outcome=0.0)) is None  # present, but weighing nothing
    with pytest.raises(ValueError, match="must be >= 0"):
        RewardWeights(tests=-1.0)


def test_running_the_tests_again_does_not_raise_the_reward(any_store: EpisodeStore) -> None:
    """Summed, two equivalent fixes differed by how often their tests ran (4.83 against 2.97)."""
    once, often = (any_store.start_episode("fix the parser") for _ in range(2))
    any_store.add_reward(once.id, TESTS, -1.0, verified=True)
    any_store.add_reward(once.id, TESTS, 1.0, verified=True)
    for _ in range(5):
        any_store.add_reward(often.id, TESTS, 1.0, verified=True)
    for episode in (once, often):
        any_store.end_episode(episode.id, EpisodeStatus.success)
        any_store.add_reward(episode.id, OUTCOME, 1.0)
    assert any_store.get_episode(once.id).reward_total == any_store.get_episode(often.id).reward_total == 1.0


def test_unverified_tests_rewards_do_not_count(any_store: EpisodeStore) -> None:
    episode = any_store.start_episode("run some tests")
    any_store.add_reward(episode.id, TESTS, 1.0)  # a pass share read from output: not verified
    any_store.add_reward(episode.id, OUTCOME, -1.0)
    got = any_store.get_episode(episode.id)
    assert (got.reward_components, got.reward_total) == ({OUTCOME: -1.0}, -1.0)
    assert [(r.source, r.verified) for r in any_store.detail(episode.id).rewards] == [(TESTS, False), (OUTCOME, False)]


def test_the_weights_are_the_stores(tmp_path: Path) -> None:
    url = str(tmp_path / "log.db")
    store = EpisodeStore.open(url)
    episode = store.start_episode("x")
    store.add_reward(episode.id, TESTS, 1.0, verified=True)
    store.add_reward(episode.id, FEEDBACK, -1.0)
    store.close()
    tests_only = EpisodeStore.open(url, RewardWeights(feedback=0.0))
    assert tests_only.get_episode(episode.id).reward_total == 1.0
    assert [e.reward_total for e in tests_only.list_episodes()] == [1.0]
    tests_only.close()


def test_only_successful_episodes_reaching_the_minimum_enter_sft(any_store: EpisodeStore) -> None:
    """An aborted episode that ran tests reached +3.0 summed and was picked for SFT."""
    outcomes = {"aborted": EpisodeStatus.aborted, "failed": EpisodeStatus.failure, "done": EpisodeStatus.success}
    ids = {}
    for task, status in outcomes.items():
        episode = any_store.start_episode(task)
        for _ in range(3):
            any_store.add_reward(episode.id, TESTS, 1.0, verified=True)
        any_store.end_episode(episode.id, status)
        ids[task] = episode.id
    weak = any_store.start_episode("weak")
    any_store.add_reward(weak.id, TESTS, -1.0, verified=True)
    any_store.end_episode(weak.id, EpisodeStatus.success)
    any_store.runs.ensure_run("r", backend="cpu", base_model="tiny")
    assert [e.id for e in any_store.runs.sft_candidates("r", min_reward=0.5, limit=10)] == [ids["done"]]
    assert any_store.runs.sft_pending("r", min_reward=-1.0) == 2  # --min-reward over the real range


def test_tests_rewards_in_a_log_from_before_verification_are_marked_unverified(tmp_path: Path) -> None:
    """A log written before migration 0008: its tests rewards (pass shares read from printed
    output) stay, unverified; the episode stays readable, its reward from what can be trusted."""
    url = str(tmp_path / "old.db")
    db = connect(url)
    migrate(db, MIGRATIONS[:-1])
    now = time.time()
    with db.transaction(write=True) as cur:
        cur.execute(
            "INSERT INTO episodes (id, task, source, status, implicit, created_at, updated_at)"
            " VALUES ('ep_old', 'fix it', 'external', 'success', 0, ?, ?)",
            (now, now),
        )
        for source, value in (("tests", 1.0), ("tests", 1.0), ("outcome", 1.0)):
            cur.execute(
                "INSERT INTO rewards (episode_id, source, value, created_at) VALUES ('ep_old', ?, ?, ?)",
                (source, value, now),
            )
    db.close()
    store = EpisodeStore.open(url)
    try:
        old = store.get_episode("ep_old")
        assert (old.reward_components, old.reward_total) == ({OUTCOME: 1.0}, 1.0)
        assert [r.verified for r in store.detail("ep_old").rewards] == [False, False, False]
    finally:
        store.close()
