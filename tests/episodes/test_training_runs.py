"""The learning-side tables: migration of an old log, the run cursor and its guards."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from episodes.db import EpisodeNotFound, PolicyTurnRefused, StoreError, connect
from episodes.migrations import applied, migrate
from episodes.policy_turns import EncodedTurn, PolicyTurns, TurnPrefix
from episodes.records import EpisodeSource, EpisodeStatus, RewardSource
from episodes.run_records import GroupOutcome, RunState, TurnContext
from episodes.store import EpisodeStore
from episodes.training_runs import TrainingRuns

FROZEN = Path(__file__).parents[1] / "data" / "episodes-0001.sqlite"


def test_an_old_frozen_log_gains_the_training_tables(tmp_path: Path) -> None:
    if not FROZEN.exists():
        pytest.skip("no frozen log in tests/data")
    copy = tmp_path / "old.sqlite"
    shutil.copy(FROZEN, copy)
    store = EpisodeStore.open(str(copy))
    try:
        assert "0003_policy_turns_and_training" in applied(store.db)
        assert "0004_sft_cursor" in applied(store.db)
        assert store.runs.list_runs() == []
        episodes = store.list_episodes(limit=5)
        if episodes:
            assert store.turns.policy_turns(episodes[0].id) == []
    finally:
        store.close()


def test_runs_and_turns_need_only_a_migrated_database(tmp_path: Path) -> None:
    db = connect(str(tmp_path / "episodes.db"))
    migrate(db)
    try:
        assert TrainingRuns(db).ensure_run("r", backend="cpu", base_model="tiny-qwen2").step == 0
        with pytest.raises(EpisodeNotFound):
            PolicyTurns(db).turn_context("ep_nope")
    finally:
        db.close()


def test_policy_turn_needs_an_episode_and_redacts_the_request(any_store: EpisodeStore) -> None:
    store = any_store
    with pytest.raises(EpisodeNotFound):
        store.turns.add_policy_turn("ep_nope", EncodedTurn.of(model="m", request={}, choice={"__choice__": {}}))
    ep = store.start_episode("t")
    key = "sk-" + "a" * 30
    store.turns.add_policy_turn(
        ep.id,
        EncodedTurn.of(
            model="m",
            request={"messages": [{"role": "user", "content": f"key {key}"}]},
            choice={"__choice__": {"message": {"content": "ok"}}},
        ),
    )
    turn = store.turns.policy_turns(ep.id)[0]
    assert key not in str(turn.request)
    assert turn.choice == {"__choice__": {"message": {"content": "ok"}}}


def test_an_encoded_turn_knows_the_context_the_log_reads_back(any_store: EpisodeStore) -> None:
    """The policy endpoint keeps `EncodedTurn.context()` instead of reading `turn_context` before
    the next turn: the two must agree, redaction and stored prefixes included."""
    store = any_store
    ep = store.start_episode("t", source=EpisodeSource.policy)
    key = "ghp_" + "A1b2" * 9
    context = store.turns.turn_context(ep.id)
    messages = [{"role": "user", "content": f"use {key}"}]
    for prompt_ids, completion_ids in ((None, None), ([1, 2], [3, 4]), ([1, 2, 3, 4, 5], [6])):
        turn = EncodedTurn.of(
            model="m@0",
            request={"messages": list(messages), "tools": None},
            choice={"__choice__": {"message": {"role": "assistant", "content": f"ok {key}"}}},
            checkpoint_step=0,
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
            after=context,
        )
        turn_id = store.turns.add_policy_turn(ep.id, turn, open_policy_only=True)
        context = turn.context(turn_id)
        assert store.turns.turn_context(ep.id) == context
        messages += [{"role": "assistant", "content": f"ok {key}"}, {"role": "user", "content": "more"}]
    assert turn.prefix == TurnPrefix(turn_id - 1, 3, 4)  # the last turn stored only what it added
    assert key in str(context.last_request_sent) and key not in str(context)


def test_a_turn_only_for_open_policy_episodes_says_why_it_was_refused(any_store: EpisodeStore) -> None:
    store = any_store
    turn = EncodedTurn.of(model="m", request={}, choice={"__choice__": {}})
    with pytest.raises(EpisodeNotFound):
        store.turns.add_policy_turn("ep_nope", turn, open_policy_only=True)
    external = store.start_episode("the IDE's own model")
    with pytest.raises(PolicyTurnRefused) as refused:
        store.turns.add_policy_turn(external.id, turn, open_policy_only=True)
    assert (refused.value.source, refused.value.status) == (EpisodeSource.external, EpisodeStatus.open)
    ended = store.start_episode("t", source=EpisodeSource.policy)
    store.end_episode(ended.id, EpisodeStatus.aborted)
    before = store.get_episode(ended.id).updated_at
    with pytest.raises(PolicyTurnRefused) as refused:
        store.turns.add_policy_turn(ended.id, turn, open_policy_only=True)
    assert (refused.value.source, refused.value.status) == (EpisodeSource.policy, EpisodeStatus.aborted)
    assert store.turns.policy_turns(ended.id) == [] and store.turns.policy_turns(external.id) == []
    assert store.get_episode(ended.id).updated_at == before  # the refused write left no trace
    store.turns.add_policy_turn(ended.id, turn)  # a late turn without the check still lands, as steps do
    assert len(store.turns.policy_turns(ended.id)) == 1


def test_turn_context_reads_the_episode_and_its_last_turn(any_store: EpisodeStore) -> None:
    store = any_store
    with pytest.raises(EpisodeNotFound):
        store.turns.turn_context("ep_nope")
    external = store.start_episode("the IDE's own model")
    assert store.turns.turn_context(external.id) == TurnContext(EpisodeSource.external, EpisodeStatus.open)
    ep = store.start_episode("t", source=EpisodeSource.policy)
    assert store.turns.turn_context(ep.id) == TurnContext(EpisodeSource.policy, EpisodeStatus.open)
    choice = {"__choice__": {"message": {"role": "assistant", "content": "one"}}}
    store.turns.add_policy_turn(
        ep.id, EncodedTurn.of(model="m", request={"messages": [{"role": "user", "content": "1"}]}, choice=choice)
    )
    assert store.turns.turn_context(ep.id).last_request is None  # a turn without token ids cannot be spliced
    for n in (2, 3):
        last_id = store.turns.add_policy_turn(
            ep.id,
            EncodedTurn.of(
                model="m",
                request={"messages": [{"role": "user", "content": str(n)}]},
                choice=choice,
                prompt_token_ids=[n, 7],
                completion_token_ids=[n, 8],
            ),
        )
    other = store.start_episode("another", source=EpisodeSource.policy)
    store.turns.add_policy_turn(
        other.id, EncodedTurn.of(model="m", request={}, choice=choice, prompt_token_ids=[9], completion_token_ids=[])
    )
    store.end_episode(ep.id, EpisodeStatus.success)
    assert store.turns.turn_context(ep.id) == TurnContext(  # the newest turn of this episode, not another's
        EpisodeSource.policy,
        EpisodeStatus.success,
        last_request={"messages": [{"role": "user", "content": "3"}]},
        last_choice=choice,
        last_prompt_token_ids=[3, 7],
        last_completion_token_ids=[3, 8],
        last_turn_id=last_id,
    )


def test_run_cursor_advances_one_step_at_a_time(any_store: EpisodeStore) -> None:
    store = any_store
    run = store.runs.ensure_run("r", backend="cpu", base_model="tiny-qwen2", config={"lr": 0.01})
    assert run.step == 0 and run.state is RunState.idle
    run = store.runs.commit_training_step(
        "r",
        step=1,
        outcomes={"g1": GroupOutcome.trained, "g2": GroupOutcome.stale},
        reward_mean=0.5,
        reward_std=0.1,
        metrics={"loss": 1.0},
    )
    assert (run.step, run.groups_trained, run.groups_skipped_stale) == (1, 1, 1)
    # Skipped groups alone do not advance the step.
    run = store.runs.commit_training_step(
        "r", step=1, outcomes={"g3": GroupOutcome.zero_variance}, reward_mean=None, reward_std=None
    )
    assert (run.step, run.groups_skipped_zero_variance) == (1, 1)
    with pytest.raises(StoreError, match="at step 1; cannot commit step 3"):
        store.runs.commit_training_step("r", step=3, outcomes={}, reward_mean=None, reward_std=None)
    with pytest.raises(StoreError):  # a group is consumed once per run
        store.runs.commit_training_step("r", step=2, outcomes={"g1": GroupOutcome.trained}, reward_mean=0, reward_std=0)
    assert store.runs.get_run("r").step == 1
    assert (store.runs.committed_step("r"), store.runs.committed_step("never started")) == (1, None)
    assert store.runs.consumed_groups("r") == {"g1", "g2", "g3"}
    [record] = store.runs.training_steps("r")
    assert record.reward_mean == 0.5 and record.metrics == {"loss": 1.0}
    with pytest.raises(StoreError, match="started with base_model 'tiny-qwen2' \\(not 'other'\\)"):
        store.runs.ensure_run("r", backend="cpu", base_model="other")
    store.runs.set_run_state("r", RunState.no_signal, "nothing to learn")
    assert store.runs.get_run("r").message == "nothing to learn"


def _ended(store: EpisodeStore, task: str, reward: float | None, **kw: object) -> str:
    ep = store.start_episode(task, **kw)  # type: ignore[arg-type]
    store.end_episode(ep.id, EpisodeStatus.success)
    if reward is not None:
        store.add_reward(ep.id, RewardSource.tests, reward, verified=True)
    return ep.id


def test_sft_cursor_uses_each_external_success_once(any_store: EpisodeStore) -> None:
    store = any_store
    store.runs.ensure_run("r", backend="cpu", base_model="tiny-qwen2")
    store.runs.ensure_run("other", backend="cpu", base_model="tiny-qwen2")
    first = _ended(store, "a", 1.0)
    second = _ended(store, "b", 0.25)
    store.add_reward(second, RewardSource.feedback, 1.0, verified=True)  # a person: (0.5 * 0.25 + 0.2) / 0.7 = 0.46
    _ended(store, "low", 0.25)
    _ended(store, "no reward", None)
    _ended(store, "the student's", 1.0, source=EpisodeSource.policy)
    _ended(store, "implicit", 1.0, implicit=True)
    still_open = store.start_episode("open")
    store.add_reward(still_open.id, RewardSource.tests, 1.0, verified=True)
    third = _ended(store, "c", 1.0)

    assert [e.id for e in store.runs.sft_candidates("r", min_reward=0.4, limit=10)] == [first, second, third]
    assert [e.id for e in store.runs.sft_candidates("r", min_reward=0.4, limit=2)] == [first, second]
    assert store.runs.sft_pending("r", min_reward=0.4) == 3 and store.runs.sft_pending("r", min_reward=0.5) == 2

    run = store.runs.commit_sft_step(
        "r",
        step=1,
        trained=[first],
        unusable={second: "5000 tokens, longer than max_seq_len=4096"},
        metrics={"losses/sft_loss": 2.0},
    )
    assert run.step == 1
    assert [e.id for e in store.runs.sft_candidates("r", min_reward=0.4, limit=10)] == [third]
    assert len(store.runs.sft_candidates("other", min_reward=0.4, limit=10)) == 3  # cursors are per run
    with pytest.raises(StoreError):  # an episode is used once per run
        store.runs.commit_sft_step("r", step=2, trained=[first], unusable={})
    with pytest.raises(StoreError, match="cannot commit SFT step 3"):
        store.runs.commit_sft_step("r", step=3, trained=[third], unusable={})
    assert store.runs.get_run("r").step == 1
    [record] = store.runs.training_steps("r")
    assert record.reward_mean is None and record.metrics == {"losses/sft_loss": 2.0, "charts/sft_episodes": 1}
    counts = store.runs.sft_counts("r")
    assert (counts.steps, counts.episodes_trained, counts.episodes_unusable) == (1, 1, 1)
    assert counts.unusable_reasons == {"5000 tokens, longer than max_seq_len=4096": 1}
    assert counts.latest_unusable == f"{second}: 5000 tokens, longer than max_seq_len=4096"

    store.runs.set_sft_skipped("other", 3, "no supervised step")
    other = store.runs.get_run("other")
    assert (other.sft_skipped, other.sft_skip_reason) == (3, "no supervised step")
