"""Group filtering and the worker's control flow, with a pure-Python backend (no torch needed)."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")

from episodes.records import EpisodeStatus, RewardSource  # noqa: E402
from episodes.run_records import GroupOutcome, RunState  # noqa: E402
from episodes.store import EpisodeStore  # noqa: E402
from tests.logdata import external_episode, make_choice, policy_episode, replayable  # noqa: E402
from training.backends.base import (  # noqa: E402
    BackendConfig,
    BackendError,
    BackendUnavailable,
    NoTrainableData,
    TrainResult,
)
from training.data.groups import Group, Trajectory, filter_groups, groups_from_log  # noqa: E402
from training.scenarios.base import Scenario, Verifier  # noqa: E402
from training.worker.config import WorkerConfig  # noqa: E402
from training.worker.loop import train  # noqa: E402
from training.worker.outcome import StopReason, WorkerError  # noqa: E402
from training.worker.run_lock import RunLock, WorkerBusy  # noqa: E402
from training.worker.status import read_status  # noqa: E402


class ScriptedBackend:
    """A real `TrainingBackend`: it samples scripted completions and "trains" by counting steps."""

    name = "scripted"

    def __init__(self, config: BackendConfig, completions: list[str], fail_times: int = 0) -> None:
        self.config = config
        self.completions = completions
        self.fail_times = fail_times
        self.step = 0
        self.trained: list[list[str]] = []

    def start(self) -> int:
        return self.step

    def sample(
        self,
        messages: list[dict[str, Any]],
        *,
        n: int,
        max_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        tools: Any = None,
    ) -> list[Any]:
        return [make_choice(self.completions[i % len(self.completions)], [1, 2], [-0.5, -0.5]) for i in range(n)]

    def train(self, groups: list[Group]) -> TrainResult:
        if self.fail_times > 0:
            self.fail_times -= 1
            raise BackendError("GPU fell off the bus")
        self.step += 1
        self.trained.append([g.key for g in groups])
        return TrainResult(step=self.step, metrics={"losses/policy_loss": 0.0})

    def rollback(self, step: int) -> None:
        self.step = step

    def close(self) -> None:
        pass


TOY = [Scenario(id="toy/0", messages=({"role": "user", "content": "Write a number."},), verifier=Verifier("toy"))]


def config(tmp_path: Path, **kw: Any) -> WorkerConfig:
    return WorkerConfig(
        database_url=str(tmp_path / "ep.db"),
        backend=BackendConfig(path=tmp_path / "art"),
        group_size=4,
        groups_per_step=1,
        **kw,
    )


def test_filter_drops_zero_variance_and_stale_groups() -> None:
    def group(key: str, rewards: list[float], step: int | None) -> Group:
        return Group(
            key=key, trajectories=[Trajectory([{"role": "user", "content": "x"}], r, policy_step=step) for r in rewards]
        )

    result = filter_groups(
        [group("ok", [0, 1], 9), group("flat", [1, 1, 1], 9), group("old", [0, 1], 6), group("single", [1], None)],
        current_step=9,
        max_staleness=2,
    )
    assert [g.key for g in result.kept] == ["ok"]
    assert result.outcomes == {
        "flat": GroupOutcome.zero_variance,
        "old": GroupOutcome.stale,
        "single": GroupOutcome.zero_variance,
    }
    assert (result.zero_variance, result.stale) == (2, 1)


def test_log_groups_are_claimed_once(store: EpisodeStore) -> None:
    for i, r in enumerate([1.0, -1.0, 1.0, -1.0, 1.0]):
        policy_episode(store, "fix it", r, seed=i / 10, checkpoint_step=4)
    store.runs.ensure_run("r", backend="cpu", base_model="tiny-qwen2")
    groups = groups_from_log(store, run="r", group_size=2)
    assert len(groups) == 2  # five episodes, groups of two: the fifth waits for a partner
    assert all(g.policy_step == 4 and len(g.trajectories) == 2 for g in groups)
    assert all(t.has_choices for g in groups for t in g.trajectories)
    store.runs.commit_training_step(
        "r", step=1, outcomes={groups[0].key: GroupOutcome.trained}, reward_mean=0, reward_std=1
    )
    left = groups_from_log(store, run="r", group_size=2)
    assert [len(g.trajectories) for g in left] == [2]
    assert {t.metadata["episode_id"] for t in left[0].trajectories}.isdisjoint(
        {t.metadata["episode_id"] for t in groups[0].trajectories}
    )


def test_log_groups_never_mix_runs(store: EpisodeStore) -> None:
    """Episodes another run's model sampled (another base model, say) never join this run's groups."""
    for i, r in enumerate([1.0, -1.0]):
        policy_episode(store, "fix it", r, seed=i / 10, model="student@4")
        policy_episode(store, "fix it", r, seed=i / 10, model="student-qwen@2")
    mine = groups_from_log(store, run="default", group_size=2, model="student")
    theirs = groups_from_log(store, run="qwen", group_size=2, model="student-qwen")
    assert [len(g.trajectories) for g in mine] == [2] and [len(g.trajectories) for g in theirs] == [2]
    assert {t.metadata["episode_id"] for t in mine[0].trajectories}.isdisjoint(
        {t.metadata["episode_id"] for t in theirs[0].trajectories}
    )
    assert len(groups_from_log(store, run="default", group_size=4)) == 1  # unfiltered, they would mix


def test_worker_stops_when_batches_have_no_signal(tmp_path: Path) -> None:
    cfg = config(tmp_path, no_signal_patience=3)
    backend = ScriptedBackend(cfg.backend, ["12345"])  # every rollout earns 1.0: zero variance
    report = train(cfg, daemon=True, backend=backend, scenarios=TOY)
    assert report.stop_reason is StopReason.no_signal
    assert report.groups_skipped_zero_variance == 3 and report.steps_trained == 0
    assert "no learning signal" in report.message
    store = EpisodeStore.open(cfg.database_url)
    status = read_status(store)
    assert status.state is RunState.no_signal and status.groups_skipped_zero_variance == 3 and status.step == 0
    store.close()


def test_worker_backs_off_then_trains_then_gives_up(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_steps=2, backoff_initial_s=0.01, backoff_max_s=0.02)
    backend = ScriptedBackend(cfg.backend, ["12", "ab"], fail_times=2)
    report = train(cfg, daemon=True, backend=backend, scenarios=TOY)
    assert report.stop_reason is StopReason.max_steps and report.step == 2
    assert len(backend.trained) == 2

    cfg2 = config(tmp_path / "b", backoff_initial_s=0.01, backoff_max_s=0.02, max_backend_failures=3)
    report = train(cfg2, once=True, backend=ScriptedBackend(cfg2.backend, ["12", "ab"], fail_times=99), scenarios=TOY)
    assert report.stop_reason is StopReason.backend_failed and "3 times in a row" in report.message


def test_one_worker_per_run(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    lock = RunLock(cfg.backend.model_dir() / "worker-default.lock")
    lock.acquire()
    try:
        with pytest.raises(WorkerBusy, match="another training worker"):
            train(cfg, once=True, backend=ScriptedBackend(cfg.backend, ["1"]), scenarios=TOY)
    finally:
        lock.release()


def test_stop_event_finishes_the_current_step(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    stop = threading.Event()

    class StopAfterFirst(ScriptedBackend):
        def train(self, groups: list[Group]) -> TrainResult:
            stop.set()  # a SIGTERM arriving mid-step
            return super().train(groups)

    report = train(cfg, daemon=True, backend=StopAfterFirst(cfg.backend, ["12", "ab"]), scenarios=TOY, stop=stop)
    assert report.stop_reason is StopReason.signal and report.step == 1
    store = EpisodeStore.open(cfg.database_url)
    assert store.runs.get_run("default").step == 1 and store.runs.get_run("default").state is RunState.stopped
    store.close()


class SftScriptedBackend(ScriptedBackend):
    """A real `SupportsSFT` backend: a supervised step records its conversations and counts a step."""

    def __init__(self, config: BackendConfig, *, unlearnable: bool = False) -> None:
        super().__init__(config, ["1"])
        self.sft_batches: list[list[dict[str, Any]]] = []
        self.unlearnable = unlearnable

    def train_sft(self, conversations: list[dict[str, Any]]) -> TrainResult:
        if self.unlearnable:
            raise NoTrainableData("every conversation is longer than max_seq_len")
        self.step += 1
        self.sft_batches.append(conversations)
        return TrainResult(step=self.step, metrics={"losses/sft_loss": 1.5})


def _bookkeeping_only(store: EpisodeStore) -> str:
    """A rewarded external episode with nothing to imitate: only rlide's own episode tools, no summary."""
    ep = store.start_episode("say hi", workspace="/ws")
    store.add_step(ep.id, tool="start_episode", arguments={}, result_summary="ok", error=None, duration_ms=1)
    store.end_episode(ep.id, EpisodeStatus.success)
    store.add_reward(ep.id, RewardSource.tests, 1.0, verified=True)
    return ep.id


def test_worker_imitates_external_successes_once_each_across_restarts(tmp_path: Path) -> None:
    cfg = config(tmp_path, scenarios=None, sft_batch=2, sft_min_reward=0.5, max_steps=2)
    store = EpisodeStore.open(cfg.database_url)
    wins = [external_episode(store, f"fix bug #{i}", 1.0) for i in range(3)]
    external_episode(store, "a failed attempt", -1.0)
    empty = _bookkeeping_only(store)
    store.close()

    backend = SftScriptedBackend(cfg.backend)
    report = train(cfg, daemon=True, backend=backend, scenarios=[])
    assert (report.sft_steps, report.sft_episodes, report.step) == (2, 3, 2)
    assert [len(b) for b in backend.sft_batches] == [2, 1]  # bounded batches, oldest first
    assert "fix bug #0" in backend.sft_batches[0][0]["messages"][0]["content"]
    assert not any("failed attempt" in json.dumps(b) for b in backend.sft_batches)

    # A restarted worker (new process state, same log) finds nothing left to imitate.
    again = SftScriptedBackend(cfg.backend)
    again.step = 2
    report = train(cfg, once=True, backend=again, scenarios=[])
    assert report.steps_trained == 0 and again.sft_batches == [] and report.step == 2

    store = EpisodeStore.open(cfg.database_url)
    status = read_status(store)
    assert (status.sft_steps, status.sft_episodes_trained, status.sft_episodes_unusable) == (2, 3, 1)
    assert [(p.step, p.sft_episodes, p.reward_mean) for p in status.recent] == [(1, 2, None), (2, 1, None)]
    assert store.runs.sft_candidates("default", min_reward=0.5, limit=10) == []
    newer = external_episode(store, "fix bug #3", 1.0)
    store.close()
    assert empty not in wins and newer not in wins

    later = SftScriptedBackend(cfg.backend)
    later.step = 2
    report = train(cfg, once=True, backend=later, scenarios=[])
    assert (report.sft_steps, report.step) == (1, 3)
    assert ["fix bug #3" in json.dumps(b) for b in later.sft_batches] == [True]


def test_a_backend_without_sft_skips_with_a_counted_reason(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    store = EpisodeStore.open(cfg.database_url)
    for i in range(2):
        external_episode(store, f"fix bug #{i}", 1.0)
    store.close()
    backend = ScriptedBackend(cfg.backend, ["12", "ab"])  # no train_sft
    report = train(cfg, once=True, backend=backend, scenarios=TOY)
    assert report.steps_trained == 1 and report.sft_steps == 0 and len(backend.trained) == 1  # GRPO went on
    assert report.sft_skipped == 2 and "no supervised (SFT) step" in (report.sft_skip_reason or "")
    store = EpisodeStore.open(cfg.database_url)
    status = read_status(store)
    assert status.sft_skipped == 2 and "2 successful external episodes" in (status.sft_skip_reason or "")
    assert store.runs.sft_pending("default", min_reward=cfg.sft_min_reward) == 2  # still waiting, not consumed
    store.close()


def test_an_sft_batch_with_nothing_to_learn_is_set_aside_not_retried(tmp_path: Path) -> None:
    cfg = config(tmp_path, scenarios=None)
    store = EpisodeStore.open(cfg.database_url)
    external_episode(store, "a very long episode", 1.0)
    store.close()
    backend = SftScriptedBackend(cfg.backend, unlearnable=True)
    report = train(cfg, once=True, backend=backend, scenarios=[])
    assert report.stop_reason is StopReason.once and report.steps_trained == 0 and report.step == 0
    store = EpisodeStore.open(cfg.database_url)
    assert read_status(store).sft_episodes_unusable == 1 and store.runs.get_run("default").state is RunState.idle
    store.close()


class CountingBackend(ScriptedBackend):
    def __init__(self, config: BackendConfig, completions: list[str]) -> None:
        super().__init__(config, completions)
        self.sampled: list[str] = []

    def sample(self, messages: list[dict[str, Any]], **kw: Any) -> list[Any]:
        self.sampled.append(str(messages[-1]["content"]))
        return super().sample(messages, **kw)


def test_a_log_scenario_whose_repository_is_gone_is_skipped_counted_and_not_picked_again(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap missing: `make setup` installs it")
    from training.scenarios.sandbox_runner import SandboxRunner

    cfg = WorkerConfig(
        database_url=str(tmp_path / "ep.db"),
        backend=BackendConfig(path=tmp_path / "art"),
        scenarios="toy,log",
        group_size=4,
        groups_per_step=5,  # all four toy prompts and the log's scenario
        max_steps=2,
    )
    store = EpisodeStore.open(cfg.database_url)
    ep = store.start_episode("fix the parser", workspace=str(tmp_path / "deleted-repo"))
    replayable(store, ep.id, commit="0123abc", workspace=str(tmp_path / "deleted-repo"))
    store.add_reward(ep.id, RewardSource.tests, -1.0, verified=True)
    store.end_episode(ep.id, EpisodeStatus.failure)
    store.close()
    backend = CountingBackend(cfg.backend, ["12", "ab"])
    runner = SandboxRunner()
    try:
        report = train(cfg, daemon=True, backend=backend, runner=runner, workspace_runner=runner)
    finally:
        runner.close()
    # Two steps trained on the toy groups; the log scenario was skipped once, before any sampling.
    assert report.steps_trained == 2 and report.groups_trained == 8
    assert "fix the parser" not in backend.sampled and len(backend.sampled) == 8
    assert report.scenarios_unavailable == 1 and report.rollouts == 32
    assert (report.scenario_unavailable_reason or "").startswith(f"episode/{ep.id}: the workspace repository")
    assert "does not exist" in (report.scenario_unavailable_reason or "")
    store = EpisodeStore.open(cfg.database_url)
    status = read_status(store)
    assert (status.scenarios_unavailable, status.scenario_unavailable_reason) == (1, report.scenario_unavailable_reason)
    store.close()


def test_an_unknown_scenario_set_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(WorkerError, match="unknown scenario set 'logs'"):
        train(config(tmp_path, scenarios="humaneval,logs"), once=True, backend=ScriptedBackend(BackendConfig(), ["1"]))


class GoneBackend(ScriptedBackend):
    """A real `TrainingBackend` that starts, then cannot sample: the GPU went away after start-up."""

    def sample(self, messages: list[dict[str, Any]], **kw: Any) -> list[Any]:
        raise BackendUnavailable("the GPU went away")


def test_a_new_run_that_fails_before_training_is_not_left_as_the_latest_run(tmp_path: Path) -> None:
    """A run whose backend started but that failed before committing anything is removed again, so
    `rlide train status` and MCP's `training_status` (both `read_status`) keep showing the run that
    trained; a run that had trained keeps its failure on record."""
    older = config(tmp_path, max_steps=1)
    assert train(older, once=True, backend=ScriptedBackend(older.backend, ["12", "ab"]), scenarios=TOY).step == 1
    fresh = config(tmp_path, run="fresh")
    with pytest.raises(WorkerError, match="the GPU went away"):
        train(fresh, once=True, backend=GoneBackend(fresh.backend, ["1"]), scenarios=TOY)
    flaky = config(tmp_path, run="flaky", max_backend_failures=2, backoff_initial_s=0.01, backoff_max_s=0.01)
    report = train(flaky, once=True, backend=ScriptedBackend(flaky.backend, ["12", "ab"], fail_times=9), scenarios=TOY)
    assert report.stop_reason is StopReason.backend_failed
    store = EpisodeStore.open(older.database_url)
    try:
        assert [r.name for r in store.runs.list_runs()] == ["default"]
        assert (read_status(store).run, read_status(store).step) == ("default", 1)
    finally:
        store.close()

    gone = GoneBackend(older.backend, ["1"])
    gone.step = 1  # resumes at its checkpoint
    with pytest.raises(WorkerError, match="the GPU went away"):  # the run that trained keeps its record
        train(older, once=True, backend=gone, scenarios=TOY)
    store = EpisodeStore.open(older.database_url)
    try:
        status = read_status(store)
        assert (status.run, status.step, status.state, status.message) == (
            "default",
            1,
            RunState.failed,
            "the GPU went away",
        )
    finally:
        store.close()


def test_only_a_run_that_recorded_nothing_is_discarded(any_store: EpisodeStore) -> None:
    runs = any_store.runs
    for name in ("empty", "skipped", "trained"):
        runs.ensure_run(name, backend="cpu", base_model="tiny-qwen2")
    runs.commit_training_step(
        "skipped", step=0, outcomes={"g": GroupOutcome.zero_variance}, reward_mean=1.0, reward_std=0.0
    )
    runs.commit_training_step("trained", step=1, outcomes={"g": GroupOutcome.trained}, reward_mean=0.5, reward_std=0.5)
    assert [runs.discard_unused(n) for n in ("empty", "skipped", "trained", "never")] == [True, False, False, False]
    assert sorted(r.name for r in runs.list_runs()) == ["skipped", "trained"]
