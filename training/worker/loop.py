"""The training worker: claims ready GRPO groups, trains one step at a time, commits its cursor.

    rlide train --once        one step (or one pass that finds nothing to learn), then exit
    rlide train --daemon      keep going until SIGTERM/SIGINT, which finish the current step first

Per iteration (one optimizer step):
  1. gather groups: ready groups of `policy` episodes from the log (same task, ended, rewarded,
     not yet consumed by this run) and, when `scenarios` is set, fresh self-play rollouts of the
     current policy on scenarios picked deterministically for (seed, step) from the named sets
     (`toy`, `humaneval`, `log`: episodes of the log that can be re-checked, refreshed every step);
     a picked scenario whose verifier cannot run (no runner, repository or commit gone) is skipped
     before sampling, counted in the report and the run's status, and not picked again by this
     worker process;
  2. drop zero-variance groups (GRPO has no signal) and stale ones (sampled more than
     `max_staleness` steps ago), counting both;
  3. train one step on what is left (the backend saves checkpoint step+1);
  4. commit in one transaction: the run's step, the consumed group keys, the step's rewards.
A crash between 3 and 4 leaves a checkpoint the log does not know; at start-up the worker rolls
the backend back to the log's step, so it resumes at the right step and never trains a group twice.

SFT on the IDE's own successes: before gathering groups, when ended `external` episodes whose
reward total reaches `sft_min_reward` are waiting (not yet used by this run), and the backend
`SupportsSFT`, the iteration is instead one supervised step on up to `sft_batch` of them (their
`sft` export records), committed with the episodes it used in one transaction (table
`training_sft_episodes`, the run's SFT cursor: each episode is used once, across restarts). A
backend without a supervised step skips them: the run records how many wait and why, no error.

DPO on preference pairs (off unless `dpo_batch` > 0): when no SFT step is due, pairs of logged
episodes of one task whose rewards differ by `MIN_MARGIN` or more (`export.dpo_pairs`) that the
run has not used make one preference step on a backend that `SupportsDPO`, committed with the
pairs in one transaction (table `training_dpo_pairs`, the run's DPO cursor).

One worker per run and store: an exclusive `flock` on `{lock_dir}/worker-{run}.lock`
(`training.worker.run_lock`); a status reader that finds it free knows the worker is gone, whatever
state the log last recorded. Ctrl-C in `--once` (a second one in `--daemon`) rolls the step in
progress back, records the run as stopped with what was interrupted and what was kept, and raises
`WorkerInterrupted`. Progress (rollouts sampled, tokens/s, replays, optimizer steps, loss) goes to
`training.worker.progress`; what was left untrained and why to `training.worker.set_aside`.
Backend errors back off exponentially (`backoff_initial_s` .. `backoff_max_s`) and give up after
`max_backend_failures` in a row; `no_signal_patience` batches in a row without a trainable group
stop the worker with a message saying why.

What the worker is given is `training.worker.config`; how it ends (its report and stop reason, or
an error) is `training.worker.outcome`.
"""

from __future__ import annotations

import math
import random
import signal
import threading
import time
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any, TypeVar

import structlog

from episodes.db import StoreError
from episodes.run_records import GroupOutcome, RunState
from episodes.store import EpisodeStore
from training.backends.base import (
    BackendError,
    BackendUnavailable,
    NoTrainableData,
    SupportsDPO,
    SupportsSFT,
    TrainingBackend,
    TrainResult,
    make_backend,
)
from training.data.export import dpo_pairs, sft_example
from training.data.fit import FitError, SetAsideReason, StudentFit, Unusable, student_fit
from training.data.groups import Group, filter_groups, groups_from_log
from training.data.judge import JudgeConfig, judge_group
from training.scenarios.base import (
    LOG_SET,
    LogScenarios,
    ProgramRunner,
    Scenario,
    WorkspaceRunner,
    builtin,
    parse_scenario_sets,
)
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.eval import EvalRefused
from training.scenarios.rollout import RewardRecord, next_attempt, rollout_groups
from training.worker.config import WorkerConfig, write_run_file
from training.worker.evaluation import PeriodicEval
from training.worker.metrics import TENSORBOARD_FOLDER, StepMetrics
from training.worker.outcome import RunSettingsChanged, StopReason, WorkerError, WorkerInterrupted, WorkerReport
from training.worker.progress import Progress, ProgressSampler
from training.worker.run_lock import RunLock, lock_path
from training.worker.set_aside import Untrained

log = structlog.get_logger(__name__)


K = TypeVar("K")


def _untrainable(exc: NoTrainableData) -> Unusable:
    """The reason for an item a failed step named no reason of its own for."""
    return Unusable(SetAsideReason.not_trainable, str(exc))


def _details(unusable: dict[K, Unusable]) -> dict[K, str]:
    """What the log keeps of each reason: its line."""
    return {key: why.detail for key, why in unusable.items()}


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        *,
        backend: TrainingBackend | None = None,
        scenarios: list[Scenario] | None = None,
        runner: ProgramRunner | None = None,
        workspace_runner: WorkspaceRunner | None = None,
        stop: threading.Event | None = None,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        """`scenarios`: an explicit pool that replaces `config.scenarios`. `runner` scores humaneval
        scenarios, `workspace_runner` re-runs test commands (`SandboxRunner` is both). `on_progress`
        takes each progress line (default: structlog)."""
        self.config = config
        self._on_progress = on_progress
        self.progress: Progress | None = None
        self._aside = Untrained()
        self._fit: StudentFit | None | bool = False  # False: not looked up yet
        self.stop = stop or threading.Event()
        self.runner = runner
        self.workspace_runner = workspace_runner
        self._backend = backend
        self._scenarios = scenarios
        try:
            self._sets = parse_scenario_sets(config.scenarios)
        except ValueError as exc:
            raise WorkerError(str(exc)) from None
        self._builtin: list[Scenario] | None = None
        self._log_scenarios = LogScenarios()
        self._unavailable: dict[str, str] = {}
        """Scenario id -> why its verifier could not run; not picked again by this process."""
        self._rewards = RewardRecord()
        """Each scenario's recent group rewards, so steps draw scenarios that teach; in memory only."""
        self.store: EpisodeStore | None = None
        self.backend: TrainingBackend | None = None
        self._sft_skip_recorded = False
        self._created = False
        """Whether this worker created its run (it did not exist before): see `_discard_if_unused`."""
        self._metrics = StepMetrics(config.backend.model_dir())
        self._evals = self._periodic_eval()

    def _periodic_eval(self) -> PeriodicEval | None:
        cfg = self.config
        if cfg.eval_tasks is None:
            return None
        if self.runner is None:
            raise WorkerError("evaluation during training runs the answers: give the worker a runner (a SandboxRunner)")
        try:
            return PeriodicEval(
                cfg.eval_tasks,
                every=cfg.eval_every,
                limit=cfg.eval_limit,
                max_tokens=cfg.rollout_max_tokens,
                model_dir=cfg.backend.model_dir(),
            )
        except (EvalRefused, VerifierUnavailable, ValueError) as exc:
            raise WorkerError(f"--eval-tasks {cfg.eval_tasks}: {exc}") from None

    # -- lifecycle ---------------------------------------------------------------------------------

    def _open(self) -> tuple[EpisodeStore, TrainingBackend, int]:
        cfg = self.config
        store = EpisodeStore.open(cfg.database_url, train_unverified=cfg.include_unverified)
        try:
            return self._start(store)
        except BaseException:
            store.close()
            raise

    def _start(self, store: EpisodeStore) -> tuple[EpisodeStore, TrainingBackend, int]:
        cfg = self.config
        identity = cfg.backend.identity()
        # Refused before the model loads, and the run recorded only once its backend started: a
        # failed start pins nothing.
        started = store.runs.identity(cfg.run)
        self._check_identity(store, started, identity)
        backend = self._backend or make_backend(cfg.backend)
        ckpt_step = backend.start()
        foreign = self._foreign_checkpoints(store, ckpt_step)
        if foreign is not None:
            backend.close()
            raise WorkerError(foreign)
        try:
            run = store.runs.ensure_run(
                cfg.run, backend=identity["backend"], base_model=identity["base_model"], config=cfg.to_dict(),
                identity=identity,
            )  # fmt: skip
        except StoreError as exc:  # started with other settings by a worker that won the race
            backend.close()
            self._check_identity(store, store.runs.identity(cfg.run), identity)
            raise WorkerError(str(exc)) from exc
        self._created = started is None
        write_run_file(cfg.backend.model_dir(), identity)
        if ckpt_step > run.step:
            log.warning("worker_rollback", run=cfg.run, checkpoint_step=ckpt_step, committed_step=run.step)
            backend.rollback(run.step)
        elif ckpt_step < run.step:
            backend.close()
            raise WorkerError(
                f"run {cfg.run!r} is at step {run.step} in the log but the newest checkpoint under "
                f"{cfg.backend.model_dir()} is step {ckpt_step}: point the backend path at the run's checkpoints,"
                " or start a new run name"
            )
        return store, backend, run.step

    def _foreign_checkpoints(self, store: EpisodeStore, ckpt_step: int) -> str | None:
        """Why the checkpoint folder belongs to another log than `store`, or None. One checkpoint ahead
        of the log's step is a step whose commit a crash cut off (`_start` rolls it back); further
        ahead, or checkpoints of a run this log never started, were trained with another log (a new
        database, a restored copy): rolling back to this log's step would delete them."""
        cfg = self.config
        committed = store.runs.committed_step(cfg.run)
        if ckpt_step == 0 or (committed is not None and ckpt_step <= committed + 1):
            return None
        where = cfg.backend.model_dir()
        trained = f"{where} holds run {cfg.run!r}'s checkpoints up to step {ckpt_step}"
        elsewhere = (
            "point RLIDE_DATABASE_URL (or rlide's home) at the log that trained them, or train under another"
            " --run name or checkpoint folder; nothing was changed"
        )
        if committed is None:
            why = f"this episode log has no run {cfg.run!r}: they were trained with another log"
        else:
            why = f"this episode log is at step {committed}: they were trained past it with another log"
        return f"{trained}, but {why}. {elsewhere}"

    def _check_identity(self, store: EpisodeStore, started: dict[str, Any] | None, identity: dict[str, Any]) -> None:
        """Raise `RunSettingsChanged` if the run was started with other values of what it keeps."""
        changed = {
            key: (started[key], value)
            for key, value in identity.items()
            if started is not None and key in started and started[key] != value
        }
        if changed:
            run = self.config.run
            free = next(f"{run}-{i}" for i in range(2, 10_000) if store.runs.identity(f"{run}-{i}") is None)
            raise RunSettingsChanged(run, changed, free)

    def _discard_if_unused(self) -> bool:
        """A run this worker created that failed before it recorded anything is removed, so that a
        failed start never shows as the latest run (`rlide train status`, MCP `training_status`).
        True if it was removed."""
        if self.store is None or not self._created:
            return False
        try:
            if self.store.runs.discard_unused(self.config.run):
                log.info("training_run_discarded", run=self.config.run, reason="failed before training a step")
                return True
        except StoreError as exc:  # the failure being reported matters more than this clean-up
            log.warning("training_run_discard_failed", run=self.config.run, error=str(exc))
        return False

    def _scenario_pool(self) -> list[Scenario]:
        """This step's pool: the explicit list, or the built-in sets (read once) plus the log's
        re-checkable episodes (refreshed every step), less the scenarios found unavailable."""
        if self._scenarios is not None:
            pool = self._scenarios
        else:
            if self._builtin is None:
                split = self.config.scenario_split
                self._builtin = [s for name in self._sets if name != LOG_SET for s in builtin(name, split)]  # type: ignore[arg-type]
            pool = self._builtin
            if LOG_SET in self._sets:
                assert self.store is not None
                pool = pool + self._log_scenarios.refresh(self.store)
        return [s for s in pool if s.id not in self._unavailable]

    @property
    def fit(self) -> StudentFit | None:
        """The student's context, by its own tokenizer and chat template: episodes longer than it
        are condensed to fit (`training.data.condense`) rather than dropped by the trainer. None
        when the model's tokenizer cannot be read that way (the built-in tiny model): the trainer's
        own length check then stands alone."""
        if self._fit is False:
            cfg = self.config.backend
            try:
                self._fit = student_fit(cfg.base_model, cfg.max_seq_len)
            except FitError as exc:
                log.info("student_fit_unavailable", base_model=cfg.base_model, reason=str(exc))
                self._fit = None
        return self._fit if isinstance(self._fit, StudentFit) else None

    # -- one step ---------------------------------------------------------------------------------

    def gather(self, step: int, report: WorkerReport | None = None) -> list[Group]:
        """Ready log groups plus this step's self-play groups; skipped scenarios are counted in
        `report` and in the run's status."""
        assert self.store is not None and self.backend is not None
        cfg = self.config
        groups = groups_from_log(
            self.store, run=cfg.run, group_size=cfg.group_size, model=cfg.backend.run_model_name, fit=self.fit
        )
        pool = self._scenario_pool()
        if pool and cfg.groups_per_step > 0:
            attempt = next_attempt(self.store.runs.consumed_groups(cfg.run), cfg.run, step)
            sampler: TrainingBackend = self.backend
            if self.progress is not None:
                self.progress.plan_rollouts(min(len(pool), cfg.groups_per_step) * cfg.group_size, step)
                sampler = ProgressSampler(self.backend, self.progress)
            rollouts = rollout_groups(
                sampler,
                pool,
                run=cfg.run,
                step=step,
                groups=cfg.groups_per_step,
                group_size=cfg.group_size,
                max_tokens=cfg.rollout_max_tokens,
                temperature=cfg.temperature,
                seed=cfg.backend.seed,
                attempt=attempt,
                runner=self.runner,
                workspace_runner=self.workspace_runner,
                record=self._rewards,
                budget_cap=cfg.rollout_budget_cap,
            )
            groups += rollouts.groups
            replays = {s.id for s in pool if s.verifier.kind == "command"}
            replayed = sum(1 for g in rollouts.groups if g.metadata.get("scenario") in replays)
            if self.progress is not None:
                self.progress.replays(replayed)
            if rollouts.unavailable:
                self._unavailable.update(rollouts.unavailable)
                scenario_id, why = list(rollouts.unavailable.items())[-1]
                reason = f"{scenario_id}: {why}"
                self.store.runs.add_unavailable_scenarios(cfg.run, len(rollouts.unavailable), reason)
                self._aside.scenarios_unavailable += len(rollouts.unavailable)
                self._aside.scenario_reason = reason
                if report is not None:
                    report.scenarios_unavailable += len(rollouts.unavailable)
                    report.scenario_unavailable_reason = reason
            if report is not None:
                report.rollouts += sum(len(g.trajectories) for g in rollouts.groups)
                report.replays += replayed
        return groups

    def run(self, *, once: bool = False) -> WorkerReport:
        cfg = self.config
        lock = RunLock(lock_path(cfg.lock_dir or cfg.backend.model_dir(), cfg.run))
        lock.acquire()
        self.progress = Progress(cfg.backend.model_dir(), sink=self._on_progress)
        try:
            # Quiet until the run is known: a refused start says one line, its reason.
            self.progress.begin("starting", f"loading {cfg.backend.base_model}", quiet=True)
            try:
                self.store, self.backend, step = self._open()
            except KeyboardInterrupt:
                report = WorkerReport(run=cfg.run, start_step=0, step=0, stop_reason=StopReason.interrupted)
                report.message = "interrupted by Ctrl-C while starting: nothing was trained, nothing changed"
                raise WorkerInterrupted(report) from None
            report = WorkerReport(run=cfg.run, start_step=step, step=step)
            board = cfg.backend.model_dir() / TENSORBOARD_FOLDER
            self.progress.say(f"run {cfg.run!r} at step {step}: {cfg.plan()}")
            self.progress.say(f"charts: tensorboard --logdir {board}")
            try:
                self._loop(report, once=once)
                if report.stop_reason is StopReason.backend_failed:
                    self._discard_if_unused()
            except KeyboardInterrupt:
                self._interrupted(report)
                raise WorkerInterrupted(report) from None
            except BaseException:
                self._discard_if_unused()
                raise
            finally:
                if self._evals is not None:
                    self._evals.close()
                self.backend.close()
                self.store.close()
                self._metrics.close()
            return report
        finally:
            self.progress.close()
            lock.release()

    def _interrupted(self, report: WorkerReport) -> None:
        """Ctrl-C: forget the step in progress, record what was interrupted and what was kept."""
        assert self.store is not None and self.backend is not None and self.progress is not None
        cfg = self.config
        doing = self.progress.phase
        self.backend.rollback(report.step)
        report.stop_reason = StopReason.interrupted
        if self._discard_if_unused():
            report.message = f"interrupted by Ctrl-C while {doing} for step 1: nothing was kept (the run was new)"
            return
        kept = (
            f"kept: {report.steps_trained} step(s) trained by this command; the run is at step {report.step}"
            f" (its checkpoint under {cfg.backend.model_dir()})"
        )
        report.message = f"interrupted by Ctrl-C while {doing} for step {report.step + 1}, which was not kept; {kept}"
        self.store.runs.set_run_state(cfg.run, RunState.stopped, report.message)

    def _loop(self, report: WorkerReport, *, once: bool) -> None:
        assert self.store is not None and self.backend is not None
        cfg = self.config
        failures = 0
        no_signal = 0
        self.store.runs.set_run_state(cfg.run, RunState.training, None)
        while True:
            if self.stop.is_set():
                report.stop_reason = StopReason.signal
                report.message = "stopped by a signal after finishing the current step"
                self.store.runs.set_run_state(cfg.run, RunState.stopped, report.message)
                return
            if cfg.max_steps is not None and report.steps_trained >= cfg.max_steps:
                report.stop_reason = StopReason.max_steps
                report.message = f"trained {report.steps_trained} steps (max_steps)"
                self.store.runs.set_run_state(cfg.run, RunState.idle, report.message)
                return
            try:
                trained = self._step(report)
                failures = 0
            except BackendUnavailable as exc:
                report.stop_reason, report.message = StopReason.backend_failed, str(exc)
                self.store.runs.set_run_state(cfg.run, RunState.failed, report.message)
                raise WorkerError(str(exc)) from exc
            except BackendError as exc:
                failures += 1
                if failures >= cfg.max_backend_failures:
                    report.stop_reason = StopReason.backend_failed
                    report.message = f"the training backend failed {failures} times in a row; last error: {exc}"
                    self.store.runs.set_run_state(cfg.run, RunState.failed, report.message)
                    return
                delay = min(cfg.backoff_max_s, cfg.backoff_initial_s * 2 ** (failures - 1))
                delay *= 1 + 0.1 * random.random()
                log.warning("training_backend_error", error=str(exc), retry_in_s=round(delay, 2), failures=failures)
                self.store.runs.set_run_state(
                    cfg.run, RunState.backing_off, f"backend error, retrying in {delay:.0f}s: {exc}"
                )
                self.backend.rollback(report.step)
                self.stop.wait(delay)
                continue
            if trained:
                no_signal = 0
                if self._evals is not None and self._evals.due(report.step):
                    self._evaluate(report)
            elif trained is False:  # groups existed, none had a signal
                no_signal += 1
                if no_signal >= cfg.no_signal_patience:
                    report.stop_reason = StopReason.no_signal
                    report.message = (
                        f"{no_signal} batches in a row had no learning signal: every group had equal rewards"
                        f" or was stale ({report.groups_skipped_zero_variance} zero-variance, "
                        f"{report.groups_skipped_stale} stale so far). Make the task easier or the reward more "
                        "graded, raise group_size or temperature, or add scenarios the policy sometimes solves."
                    )
                    self.store.runs.set_run_state(cfg.run, RunState.no_signal, report.message)
                    log.error("training_no_signal", run=cfg.run, message=report.message)
                    return
            if once:
                report.stop_reason = StopReason.once
                report.set_aside = self._aside.lines()
                message = f"one pass done at step {report.step}"
                if not report.steps_trained:
                    self._aside.dpo_waiting_off = self._dpo_pairs_waiting_while_off()
                    report.set_aside = self._aside.lines()
                    report.nothing_trained = message = self._aside.nothing_trained(scenarios=cfg.scenarios)
                self.store.runs.set_run_state(cfg.run, RunState.idle, message)
                return
            if trained is None:  # nothing to do at all: wait for episodes
                self.store.runs.set_run_state(cfg.run, RunState.idle, "waiting for ready groups")
                assert self.progress is not None
                self.progress.begin("waiting", f"for ready groups or episodes; next look in {cfg.poll_interval_s:g}s")
                self.stop.wait(cfg.poll_interval_s)
            else:
                self.store.runs.set_run_state(cfg.run, RunState.training, None)

    def _evaluate(self, report: WorkerReport) -> None:
        """The policy as it stands on the held-out tasks; the report kept in the log and on the
        charts, and the best checkpoint recorded (`training/worker/evaluation.py`)."""
        assert self._evals is not None and self.backend is not None and self.store is not None
        assert self.progress is not None and self.runner is not None
        self.progress.begin("evaluating", f"step {report.step} on {self._evals.tasks}")
        evaluated = self._evals.run(self.backend, self.runner, report.step, self.config.backend.run_model_name)
        r = evaluated.report
        self.store.runs.record_eval(self.config.run, r.set_name, r.to_dict())
        self._metrics.write(report.step, {f"eval/{r.set_name}/pass@1": r.pass_at_1})
        report.evals.append({"step": report.step, "tasks": r.set_name, "pass_at_1": r.pass_at_1, "n": r.n})
        report.best_checkpoint = evaluated.best.model_dump()
        self.progress.say(evaluated.line())

    def _dpo_pairs_waiting_while_off(self) -> int:
        """Preference pairs in the log a run with DPO off leaves untrained (0 when DPO is on)."""
        assert self.store is not None
        return 0 if self.config.dpo_batch > 0 else len(dpo_pairs(self.store, fit=self.fit))

    def _train_timed(self, algorithm: str, step: int, what: str, train: Callable[[], TrainResult]) -> TrainResult:
        """`train()` as one optimizer step the person watching sees begin, go on, and end."""
        assert self.progress is not None
        self.progress.begin("optimizer step", f"{algorithm} step {step + 1} on {what}")
        started = time.perf_counter()
        result = train()
        self.progress.stepped(algorithm, result.step, result, time.perf_counter() - started)
        return result

    def _step(self, report: WorkerReport) -> bool | None:
        """Train one step. True: trained; False: groups but no signal; None: no groups at all."""
        assert self.store is not None and self.backend is not None
        assert self.progress is not None
        self.progress.begin("gathering", "waiting episodes, pairs and groups", quiet=True)
        if self._sft_step(report) or self._dpo_step(report):
            return True
        cfg = self.config
        started = time.perf_counter()
        groups = self.gather(report.step, report)
        if cfg.judge_model is not None:
            judge = JudgeConfig(cfg.judge_model, weight=cfg.judge_weight, extra_litellm_params=cfg.judge_params)
            groups = [judge_group(g, judge) for g in groups]
        if not groups:
            return None
        sampled_s = time.perf_counter() - started
        filtered = filter_groups(groups, current_step=report.step, max_staleness=cfg.max_staleness, fit=self.fit)
        report.groups_skipped_zero_variance += filtered.zero_variance
        report.groups_skipped_stale += filtered.stale
        self._aside.groups += len(groups)
        self._aside.zero_variance += filtered.zero_variance
        self._aside.stale += filtered.stale
        rewards = [t.reward for g in groups for t in g.trajectories]
        reward_mean, reward_std = _mean_std(rewards)
        if not filtered.kept:
            self.store.runs.commit_training_step(
                cfg.run, step=report.step, outcomes=filtered.outcomes, reward_mean=reward_mean, reward_std=reward_std
            )
            log.info("training_batch_without_signal", run=cfg.run, step=report.step, groups=len(groups))
            return False
        result = self._train_timed(
            "grpo", report.step, f"{len(filtered.kept)} groups", partial(self.backend.train, filtered.kept)
        )
        outcomes = dict(filtered.outcomes)
        outcomes.update({g.key: GroupOutcome.trained for g in filtered.kept})
        metrics = dict(result.metrics)
        metrics.update(
            {
                "perf/sample_seconds": sampled_s,
                "perf/step_seconds": time.perf_counter() - started,
                "charts/groups": len(groups),
            }
        )
        try:
            self.store.runs.commit_training_step(
                cfg.run,
                step=result.step,
                outcomes=outcomes,
                reward_mean=reward_mean,
                reward_std=reward_std,
                metrics=metrics,
            )
        except StoreError:
            self.backend.rollback(report.step)  # the log did not take it: forget the checkpoint too
            raise
        rewards_and_groups = {
            "reward/mean": reward_mean,
            "reward/std": reward_std,
            "charts/groups_trained": len(filtered.kept),
            "charts/zero_variance": filtered.zero_variance,
            "charts/stale": filtered.stale,
        }
        self._metrics.write(result.step, {**metrics, **rewards_and_groups})
        report.step = result.step
        report.steps_trained += 1
        report.groups_trained += len(filtered.kept)
        if reward_mean is not None:
            report.rewards.append(reward_mean)
        log.info(
            "training_step",
            run=cfg.run,
            step=result.step,
            reward_mean=reward_mean,
            groups_trained=len(filtered.kept),
            zero_variance=filtered.zero_variance,
            stale=filtered.stale,
            seconds=round(metrics["perf/step_seconds"], 2),
        )
        if cfg.plot_path is not None:
            from training.worker.plot import plot_run

            plot_run(self.store, cfg.run, cfg.plot_path)
        return True

    def _sft_step(self, report: WorkerReport) -> bool:
        """One supervised step on waiting external successes, if there are any and the backend can;
        True when a step was trained and committed."""
        assert self.store is not None and self.backend is not None
        cfg = self.config
        if cfg.sft_batch <= 0:
            return False
        while True:
            episodes = self.store.runs.sft_candidates(
                cfg.run, min_reward=cfg.sft_min_reward, limit=cfg.sft_batch, include_unverified=cfg.include_unverified
            )
            if not episodes:
                return False
            if not isinstance(self.backend, SupportsSFT):
                self._record_sft_skip(report)
                return False
            records: list[dict[str, Any]] = []
            trained: list[str] = []
            unusable: dict[str, Unusable] = {}
            for episode in episodes:
                record = sft_example(self.store, episode, cfg.sft_view, self.fit)
                if isinstance(record, Unusable):
                    unusable[episode.id] = record
                else:
                    records.append(record)
                    trained.append(episode.id)
            if not records:  # set them aside and look at the next ones
                self._aside.sft.add(len(episodes), list(unusable.values()))
                self.store.runs.commit_sft_step(cfg.run, step=report.step, trained=[], unusable=_details(unusable))
                continue
            started = time.perf_counter()
            try:
                result = self._train_timed(
                    "sft", report.step, f"{len(records)} external episodes", partial(self.backend.train_sft, records)
                )
            except NoTrainableData as exc:  # e.g. every conversation longer than max_seq_len
                log.warning("sft_batch_unusable", run=cfg.run, episodes=len(episodes), error=str(exc))
                self.backend.rollback(report.step)
                unusable |= {e: exc.skipped.get(i, _untrainable(exc)) for i, e in enumerate(trained)}
                self._aside.sft.add(len(episodes), list(unusable.values()))
                self.store.runs.commit_sft_step(cfg.run, step=report.step, trained=[], unusable=_details(unusable))
                continue
            unusable |= {trained[i]: why for i, why in result.skipped.items()}
            self._aside.sft.add(len(episodes), list(unusable.values()))
            trained = [e for i, e in enumerate(trained) if i not in result.skipped]
            metrics = {**result.metrics, "perf/step_seconds": time.perf_counter() - started}
            try:
                self.store.runs.commit_sft_step(
                    cfg.run, step=result.step, trained=trained, unusable=_details(unusable), metrics=metrics
                )
            except StoreError:
                self.backend.rollback(report.step)  # the log did not take it: forget the checkpoint too
                raise
            self._metrics.write(result.step, {**metrics, "charts/sft_episodes": len(trained)})
            report.step = result.step
            report.steps_trained += 1
            report.sft_steps += 1
            report.sft_episodes += len(trained)
            report.sft_skipped, report.sft_skip_reason = 0, None
            log.info(
                "sft_step",
                run=cfg.run,
                step=result.step,
                episodes=len(trained),
                unusable=len(unusable),
                loss=metrics.get("losses/sft_loss"),
            )
            return True

    def _dpo_step(self, report: WorkerReport) -> bool:
        """One preference step on pairs of logged episodes this run has not used, if DPO is on and
        the backend has the step; True when a step was trained and committed."""
        assert self.store is not None and self.backend is not None
        cfg = self.config
        if cfg.dpo_batch <= 0 or not isinstance(self.backend, SupportsDPO):
            return False
        used = self.store.runs.dpo_used(cfg.run)
        while True:
            waiting = dpo_pairs(self.store, fit=self.fit)
            pairs = [p for p in waiting if (p.chosen, p.rejected) not in used][: cfg.dpo_batch]
            if not pairs:
                return False
            keys = [(p.chosen, p.rejected) for p in pairs]
            started = time.perf_counter()
            try:
                result = self._train_timed(
                    "dpo", report.step, f"{len(pairs)} preference pairs",
                    partial(self.backend.train_dpo, [p.record for p in pairs]),
                )  # fmt: skip
            except NoTrainableData as exc:
                log.warning("dpo_batch_unusable", run=cfg.run, pairs=len(pairs), error=str(exc))
                self.backend.rollback(report.step)
                unusable = {k: exc.skipped.get(i, _untrainable(exc)) for i, k in enumerate(keys)}
                self._aside.dpo.add(len(pairs), list(unusable.values()))
                self.store.runs.commit_dpo_step(cfg.run, step=report.step, trained=[], unusable=_details(unusable))
                used.update(keys)
                continue
            trained = [k for i, k in enumerate(keys) if i not in result.skipped]
            unusable = {keys[i]: why for i, why in result.skipped.items()}
            self._aside.dpo.add(len(pairs), list(unusable.values()))
            metrics = {**result.metrics, "perf/step_seconds": time.perf_counter() - started}
            try:
                self.store.runs.commit_dpo_step(
                    cfg.run, step=result.step, trained=trained, unusable=_details(unusable), metrics=metrics
                )
            except StoreError:
                self.backend.rollback(report.step)
                raise
            self._metrics.write(result.step, {**metrics, "charts/dpo_pairs": len(trained)})
            report.step = result.step
            report.steps_trained += 1
            report.dpo_steps += 1
            report.dpo_pairs += len(trained)
            log.info("dpo_step", run=cfg.run, step=result.step, pairs=len(trained), loss=metrics.get("losses/dpo_loss"))
            return True

    def _record_sft_skip(self, report: WorkerReport) -> None:
        """Once per worker: how many external episodes wait for a supervised step this backend lacks."""
        assert self.store is not None and self.backend is not None
        if self._sft_skip_recorded:
            return
        cfg = self.config
        pending = self.store.runs.sft_pending(
            cfg.run, min_reward=cfg.sft_min_reward, include_unverified=cfg.include_unverified
        )
        reason = (
            f"the {self.backend.name} backend has no supervised (SFT) step: {pending} successful external"
            f" episodes (reward >= {cfg.sft_min_reward}) are not imitated; GRPO goes on without them"
        )
        self.store.runs.set_sft_skipped(cfg.run, pending, reason)
        self._aside.sft_waiting_no_backend = reason
        report.sft_skipped, report.sft_skip_reason = pending, reason
        self._sft_skip_recorded = True
        log.info("sft_skipped", run=cfg.run, episodes=pending, backend=self.backend.name)


def train(
    config: WorkerConfig,
    *,
    once: bool = False,
    daemon: bool = False,
    backend: TrainingBackend | None = None,
    scenarios: list[Scenario] | None = None,
    runner: ProgramRunner | None = None,
    workspace_runner: WorkspaceRunner | None = None,
    stop: threading.Event | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> WorkerReport:
    """Run the worker: `once` for a single step, `daemon` to go on until SIGTERM/SIGINT.

    In daemon mode SIGTERM and SIGINT set the stop flag; the step in progress finishes and is
    committed before the worker exits. A second SIGINT stops at once (`WorkerInterrupted`, the step
    in progress not kept), as Ctrl-C does in `once` mode.
    """
    if once == daemon:
        raise WorkerError("choose exactly one of --once and --daemon")
    worker = Worker(
        config,
        backend=backend,
        scenarios=scenarios,
        runner=runner,
        workspace_runner=workspace_runner,
        stop=stop,
        on_progress=on_progress,
    )
    previous: dict[signal.Signals, Any] = {}
    if daemon and threading.current_thread() is threading.main_thread():

        def _on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("training_worker_stopping", signal=signal.Signals(signum).name)
            if signum == signal.SIGINT and worker.stop.is_set():
                raise KeyboardInterrupt
            worker.stop.set()
            if worker.progress is not None:
                worker.progress.say(
                    f"{signal.Signals(signum).name}: stopping once the current step is committed (now: "
                    f"{worker.progress.phase}); Ctrl-C again stops at once and drops that step"
                )

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, _on_signal)
    try:
        return worker.run(once=once)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
