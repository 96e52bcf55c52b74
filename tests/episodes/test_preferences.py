"""Human preferences, ratings and filtered listings in the episode log (SQLite and PostgreSQL), and
the DPO pairs they become: a person's verdict comes first and stands over the rewards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from episodes.db import StoreError
from episodes.records import CurationAction, EpisodeSource, EpisodeStatus, RewardSource, Verdict
from episodes.rewards import COMPONENTS, RewardWeights
from episodes.rows import REWARD_BOUND_SLACK, EpisodeQuery
from episodes.store import EpisodeStore
from tests.logdata import external_episode
from training.data.export import dpo_pairs

TASK = "Make parse() accept empty files"


def test_a_preference_is_stored_with_its_author_and_recorded_on_both_episodes(any_store: EpisodeStore) -> None:
    a = external_episode(any_store, TASK, 1.0)
    b = external_episode(any_store, TASK, -1.0)
    preference = any_store.preferences.prefer(a, b, Verdict.b, author="  Ana  Lopez ", comment="b is simpler")
    assert (preference.author, preference.chosen_rejected) == ("Ana Lopez", (b, a))
    assert any_store.preferences.list(a) == any_store.preferences.list(b) == [preference]
    for episode, judged in ((a, "worse"), (b, "better")):
        [event] = [c for c in any_store.curation_log(episode) if c.action is CurationAction.prefer]
        assert event.detail["judged"] == judged and event.detail["author"] == "Ana Lopez"


def test_what_cannot_be_a_preference_is_refused_and_stores_nothing(any_store: EpisodeStore) -> None:
    a = external_episode(any_store, TASK, 1.0)
    b = external_episode(any_store, TASK, -1.0)
    other = external_episode(any_store, "Another task", 1.0)
    still_open = any_store.start_episode(TASK).id
    with pytest.raises(ValueError, match="different episodes"):
        any_store.preferences.prefer(a, a, Verdict.a, author="x")
    with pytest.raises(ValueError, match="one situation"):
        any_store.preferences.prefer(a, other, Verdict.a, author="x")
    with pytest.raises(StoreError, match="still open"):
        any_store.preferences.prefer(a, still_open, Verdict.a, author="x")
    with pytest.raises(ValueError, match="author"):
        any_store.preferences.prefer(a, b, Verdict.a, author=" \n")
    with pytest.raises(ValueError):
        any_store.preferences.prefer(a, b, "better", author="x")  # type: ignore[arg-type]
    assert any_store.preferences.list() == []
    assert [c for c in any_store.curation_log() if c.action is CurationAction.prefer] == []


def test_dpo_uses_human_preferences_first_and_they_stand_over_the_rewards(store: EpisodeStore) -> None:
    high = external_episode(store, TASK, 1.0)
    low = external_episode(store, TASK, -1.0)
    middle = external_episode(store, TASK, 0.0)
    by_reward = [(p.chosen, p.rejected) for p in dpo_pairs(store)]
    assert by_reward == [(high, middle), (high, low), (middle, low)]

    # A person prefers the low-reward attempt to the high one (the tests passed, the fix is a hack).
    store.preferences.prefer(high, low, Verdict.b, author="ana")
    pairs = dpo_pairs(store)
    assert [(p.chosen, p.rejected) for p in pairs] == [(low, high), (high, middle), (middle, low)]
    assert pairs[0].record["preference"]["author"] == "ana" and "preference" not in pairs[1].record

    # Changing one's mind: the latest verdict of a pair stands; "both bad" makes no pair of them.
    store.preferences.prefer(low, high, Verdict.both_bad, author="ana")
    assert [(p.chosen, p.rejected) for p in dpo_pairs(store)] == [(high, middle), (middle, low)]

    # A preference between episodes no longer trained on is dropped with them.
    store.preferences.prefer(middle, low, Verdict.a, author="bo")
    store.exclude_episode(middle)
    assert [(p.chosen, p.rejected) for p in dpo_pairs(store)] == []


def test_a_rating_is_the_feedback_component_and_is_recorded_with_its_author(any_store: EpisodeStore) -> None:
    a = external_episode(any_store, TASK, 1.0)
    reward = any_store.rate_episode(a, -0.5, "slow", author="ana")
    assert (reward.source, reward.value) == (RewardSource.feedback, -0.5)
    assert any_store.get_episode(a).reward_components[RewardSource.feedback] == -0.5
    [event] = [c for c in any_store.curation_log(a) if c.action is CurationAction.rate]
    assert event.detail == {"value": -0.5, "author": "ana", "comment": "slow"}
    with pytest.raises(ValueError):
        any_store.rate_episode(a, 1.5, author="ana")
    with pytest.raises(ValueError, match="author"):
        any_store.rate_episode(a, 0.5, author="")
    assert len([c for c in any_store.curation_log(a) if c.action is CurationAction.rate]) == 1


def test_filters_page_in_sql(any_store: EpisodeStore) -> None:
    made = [
        external_episode(any_store, f"task {i} {'alpha' if i % 3 == 0 else 'beta'}", (i % 5 - 2) / 2) for i in range(12)
    ]
    policy = any_store.start_episode("alpha by the student", source=EpisodeSource.policy).id
    any_store.exclude_episode(made[0])
    query = EpisodeQuery(text="ALPHA", excluded=False)
    expected = [e for e in reversed(made[1:]) if "alpha" in any_store.get_episode(e).task]
    assert [e.id for e in any_store.list_episodes(query, limit=100)] == [policy, *expected]
    assert any_store.count_episodes(query) == len(expected) + 1
    pages = [any_store.list_episodes(EpisodeQuery(), limit=5, offset=o) for o in (0, 5, 10)]
    assert [e.id for page in pages for e in page] == [e.id for e in any_store.list_episodes(limit=100)]
    assert any_store.count_episodes(EpisodeQuery(source=EpisodeSource.policy, status=EpisodeStatus.open)) == 1
    now = datetime.now(UTC)
    assert any_store.count_episodes(EpisodeQuery(since=now - timedelta(hours=1))) == 13
    assert any_store.count_episodes(EpisodeQuery(until=now - timedelta(hours=1))) == 0
    for bad in ({"min_reward": 1.5}, {"min_reward": 0.5, "max_reward": 0.0}, {"text": "x" * 501},
                {"since": now, "until": now - timedelta(days=1)}):  # fmt: skip
        with pytest.raises(ValueError):
            EpisodeQuery(**bad)  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    weights=st.tuples(*[st.sampled_from([0.0, 0.1, 0.5, 1.0, 3.0])] * len(COMPONENTS)),
    components=st.lists(
        st.dictionaries(st.sampled_from(list(RewardSource)), st.sampled_from([-1.0, -0.5, 0.0, 0.25, 1.0])),
        min_size=1,
        max_size=6,
    ),
    bounds=st.tuples(st.sampled_from([None, -1.0, -0.3, 0.0, 0.5]), st.sampled_from([None, 0.0, 0.4, 1.0])),
)
def test_the_reward_filter_in_sql_agrees_with_the_reward_shown(
    tmp_path_factory: pytest.TempPathFactory,
    weights: tuple[float, ...],
    components: list[dict[RewardSource, float]],
    bounds: tuple[float | None, float | None],
) -> None:
    low, high = bounds
    if low is not None and high is not None and low > high:
        low, high = high, low
    store = EpisodeStore.open(str(tmp_path_factory.mktemp("log") / "e.db"), RewardWeights(*weights))
    try:
        for values in components:
            episode = store.start_episode("t").id
            for source, value in values.items():
                store.add_reward(episode, source, value, verified=True)
        if low is None and high is None:
            return
        totals = {e.id: e.reward_total for e in store.list_episodes(limit=100)}
        slack = REWARD_BOUND_SLACK  # CI drew a total of 0 that combine() gives as -1.4e-17
        expected = {
            i
            for i, r in totals.items()
            if r is not None and (low is None or r >= low - slack) and (high is None or r <= high + slack)
        }
        found = {e.id for e in store.list_episodes(EpisodeQuery(min_reward=low, max_reward=high), limit=100)}
        assert found == expected
    finally:
        store.close()


def test_a_total_of_zero_is_inside_a_bound_of_zero_whatever_its_rounding(tmp_path: Path) -> None:
    """The case hypothesis drew in CI: 0.75 - 0.25 - 0.5 weighted comes out of combine() as -1.4e-17."""
    store = EpisodeStore.open(str(tmp_path / "e.db"), RewardWeights(tests=3.0, outcome=0.1, feedback=0.5, judge=1.0))
    try:
        episode = store.start_episode("t").id
        for source, value in {RewardSource.feedback: -0.5, RewardSource.outcome: 0.0}.items():
            store.add_reward(episode, source, value, verified=True)
        for source, value in {RewardSource.tests: 0.25, RewardSource.judge: -0.5}.items():
            store.add_reward(episode, source, value, verified=True)
        [shown] = store.list_episodes(limit=10)
        assert shown.reward_total is not None and abs(shown.reward_total) < 1e-15
        for bounds in ({"min_reward": 0.0}, {"max_reward": 0.0}, {"min_reward": 0.0, "max_reward": 0.0}):
            assert [e.id for e in store.list_episodes(EpisodeQuery(**bounds), limit=10)] == [episode], bounds
        assert store.list_episodes(EpisodeQuery(min_reward=0.001), limit=10) == []
    finally:
        store.close()
