"""Training runs in the episode log: each run's cursor, history, consumed groups, SFT and DPO cursors.

`TrainingRuns` reads and writes tables `training_runs`, `training_groups`, `training_steps`,
`training_sft_episodes` and `training_dpo_pairs` over the database an `EpisodeStore` opened and
migrated (the store holds one as `store.runs`). The worker writes them; `training.worker.status`
reads them without torch or ART.
"""

from __future__ import annotations

import json
import time
from typing import Any

from episodes.db import Database, Row, StoreError
from episodes.records import Episode, EvalRecord, at_epoch
from episodes.rewards import DEFAULT_WEIGHTS, RewardWeights
from episodes.rows import EPISODE_COLUMNS, clip_text, episode_from_row
from episodes.run_records import (
    DpoCounts,
    GroupOutcome,
    RunState,
    SftCounts,
    SftOutcome,
    TrainingRun,
    TrainingStepRecord,
)


class TrainingRuns:
    """The training tables, over a database `EpisodeStore` has migrated."""

    def __init__(self, db: Database, weights: RewardWeights = DEFAULT_WEIGHTS) -> None:
        self.db = db
        self.weights = weights

    def ensure_run(
        self,
        name: str,
        *,
        backend: str,
        base_model: str,
        config: dict[str, Any] | None = None,
        identity: dict[str, Any] | None = None,
    ) -> TrainingRun:
        """Create the run if it is new; an existing run keeps its step (that is how a worker resumes).
        `identity`: the values a run keeps for life (its base model, hyperparameters); an existing run
        started with other ones is refused with each difference (`check_identity`)."""
        now = time.time()
        identity = {"backend": backend, "base_model": base_model, **(identity or {})}
        with self.db.transaction(write=True) as cur:
            row = cur.execute("SELECT config FROM training_runs WHERE name = ?", (name,)).fetchone()
            if row is None:
                cur.execute(
                    "INSERT INTO training_runs (name, backend, base_model, config, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (name, backend, base_model, json.dumps({**(config or {}), "identity": identity}, default=str),
                     now, now),
                )  # fmt: skip
        if row is not None:
            self.check_identity(name, identity)
        return self.get_run(name)

    def discard_unused(self, name: str) -> bool:
        """Remove run `name` if it has recorded nothing: still at step 0, with no consumed or skipped
        group, step, SFT episode or DPO pair. The worker calls it for a run it created and that failed
        before training, so a failed start is never shown as the latest run. True if it was removed."""
        with self.db.transaction(write=True) as cur:
            row = cur.execute(
                "DELETE FROM training_runs WHERE name = ? AND step = 0"
                " AND NOT EXISTS (SELECT 1 FROM training_groups WHERE run = ?)"
                " AND NOT EXISTS (SELECT 1 FROM training_steps WHERE run = ?)"
                " AND NOT EXISTS (SELECT 1 FROM training_sft_episodes WHERE run = ?)"
                " AND NOT EXISTS (SELECT 1 FROM training_dpo_pairs WHERE run = ?) RETURNING name",
                (name,) * 5,
            ).fetchone()
        return row is not None

    def identity(self, name: str) -> dict[str, Any] | None:
        """What run `name` was started with (None: no such run). Runs saved before identities existed
        give what their saved config holds."""
        with self.db.transaction(write=False) as cur:
            row = cur.execute(
                "SELECT backend, base_model, config FROM training_runs WHERE name = ?", (name,)
            ).fetchone()
        if row is None:
            return None
        saved = json.loads(row[2] or "{}")
        return {"backend": row[0], "base_model": row[1], **(saved.get("identity") or saved.get("backend") or {})}

    def check_identity(self, name: str, identity: dict[str, Any]) -> None:
        """Raise `StoreError` saying each way `identity` differs from what run `name` was started with
        ("key V (not W)"); nothing for a run that does not exist yet."""
        started = self.identity(name) or {}
        differences = [
            f"{key} {started[key]!r} (not {value!r})"
            for key, value in identity.items()
            if key in started and started[key] != value
        ]
        if differences:
            raise StoreError(f"training run {name!r} was started with {'; '.join(differences)}")

    def committed_step(self, name: str) -> int | None:
        """The step run `name` has committed; None for a run not started yet."""
        with self.db.transaction(write=False) as cur:
            row = cur.execute("SELECT step FROM training_runs WHERE name = ?", (name,)).fetchone()
        return None if row is None else int(row[0])

    def get_run(self, name: str) -> TrainingRun:
        with self.db.transaction(write=False) as cur:
            row = cur.execute(f"SELECT {_RUN_COLUMNS} FROM training_runs WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise StoreError(f"no training run named {name!r}")
        return _run(row)

    def list_runs(self) -> list[TrainingRun]:
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(f"SELECT {_RUN_COLUMNS} FROM training_runs ORDER BY updated_at DESC").fetchall()
        return [_run(r) for r in rows]

    def set_run_state(self, name: str, state: RunState, message: str | None = None) -> None:
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "UPDATE training_runs SET state = ?, message = ?, updated_at = ? WHERE name = ?",
                (state.value, clip_text(message), time.time(), name),
            )

    def consumed_groups(self, name: str) -> set[str]:
        return set(self.group_outcomes(name))

    def group_outcomes(self, name: str) -> dict[str, GroupOutcome]:
        """Every group the run has judged, by key: trained, or skipped (zero variance, stale)."""
        with self.db.transaction(write=False) as cur:
            rows = cur.execute("SELECT group_key, outcome FROM training_groups WHERE run = ?", (name,)).fetchall()
        return {r[0]: GroupOutcome(r[1]) for r in rows}

    def commit_training_step(
        self,
        name: str,
        *,
        step: int,
        outcomes: dict[str, GroupOutcome],
        reward_mean: float | None,
        reward_std: float | None,
        metrics: dict[str, Any] | None = None,
    ) -> TrainingRun:
        """Advance the run's cursor to `step` and record the groups it consumed, in one transaction.

        `step` must be the run's step + 1 (or equal to it when nothing was trained, which only
        records skipped groups): a second worker or a replayed step fails instead of double-counting.
        """
        now = time.time()
        counts = {o: sum(1 for v in outcomes.values() if v is o) for o in GroupOutcome}
        with self.db.transaction(write=True) as cur:
            row = cur.execute("SELECT step FROM training_runs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise StoreError(f"no training run named {name!r}")
            if step not in (row[0], row[0] + 1):
                raise StoreError(f"training run {name!r} is at step {row[0]}; cannot commit step {step}")
            for key, outcome in outcomes.items():
                cur.execute(
                    "INSERT INTO training_groups (run, group_key, step, outcome, created_at) VALUES (?, ?, ?, ?, ?)",
                    (name, key, step, outcome.value, now),
                )
            cur.execute(
                "UPDATE training_runs SET step = ?, groups_trained = groups_trained + ?,"
                " groups_skipped_zero_variance = groups_skipped_zero_variance + ?,"
                " groups_skipped_stale = groups_skipped_stale + ?, updated_at = ? WHERE name = ?",
                (
                    step,
                    counts[GroupOutcome.trained],
                    counts[GroupOutcome.zero_variance],
                    counts[GroupOutcome.stale],
                    now,
                    name,
                ),
            )
            if step == row[0] + 1:
                cur.execute(
                    "INSERT INTO training_steps (run, step, reward_mean, reward_std, groups_trained,"
                    " groups_skipped_zero_variance, groups_skipped_stale, metrics, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        name,
                        step,
                        reward_mean,
                        reward_std,
                        counts[GroupOutcome.trained],
                        counts[GroupOutcome.zero_variance],
                        counts[GroupOutcome.stale],
                        json.dumps(metrics or {}, default=str),
                        now,
                    ),
                )
        return self.get_run(name)

    # -- SFT on external episodes: the run's cursor over the IDE's own successes --------------------

    def sft_candidates(
        self, name: str, *, min_reward: float, limit: int, include_unverified: bool = False
    ) -> list[Episode]:
        """Up to `limit` external episodes ready for an SFT step of run `name`, oldest ended first."""
        return self._sft_ready(name, min_reward, include_unverified)[:limit]

    def sft_pending(self, name: str, *, min_reward: float, include_unverified: bool = False) -> int:
        return len(self._sft_ready(name, min_reward, include_unverified))

    def _sft_ready(self, name: str, min_reward: float, include_unverified: bool) -> list[Episode]:
        """Successful, explicit episodes of the IDE's own model, not yet used by the run, whose reward
        (its components combined: `episodes.rewards`) reaches `min_reward`. Failed and aborted ones
        never: imitating them teaches what not to do. Unless `include_unverified`, only verified ones
        with no uncleared flag: a success the agent only claimed is not imitated."""
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                f"SELECT {EPISODE_COLUMNS} FROM episodes e WHERE {_SFT_READY} ORDER BY e.ended_at, e.id", (name,)
            ).fetchall()
        episodes = [episode_from_row(r, self.weights) for r in rows]
        return [
            e
            for e in episodes
            if e.reward_total is not None
            and e.reward_total >= min_reward
            and (include_unverified or (e.verified and e.flags == 0))
        ]

    def commit_sft_step(
        self,
        name: str,
        *,
        step: int,
        trained: list[str],
        unusable: dict[str, str],
        metrics: dict[str, Any] | None = None,
    ) -> TrainingRun:
        """Record the episodes an SFT step used and advance the run to `step`, in one transaction.

        With `trained` episodes, `step` must be the run's step + 1 (a training_steps row is written,
        without a reward: SFT has none); with only `unusable` ones it must equal the run's step. An
        episode the run already used fails the whole commit (the cursor never counts one twice).
        """
        now = time.time()
        with self.db.transaction(write=True) as cur:
            self._check_next_step(cur, name, step, trained=bool(trained), what="SFT")
            outcomes: list[tuple[str, SftOutcome, str | None]] = [(e, SftOutcome.trained, None) for e in trained]
            outcomes += [(e, SftOutcome.unusable, why) for e, why in unusable.items()]
            for episode_id, outcome, reason in outcomes:
                cur.execute(
                    "INSERT INTO training_sft_episodes (run, episode_id, step, outcome, reason, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (name, episode_id, step, outcome.value, reason, now),
                )
            cur.execute("UPDATE training_runs SET sft_skipped = 0, sft_skip_reason = NULL WHERE name = ?", (name,))
            self._advance(
                cur, name, step, {**(metrics or {}), "charts/sft_episodes": len(trained)} if trained else None
            )
        return self.get_run(name)

    # -- DPO on preference pairs: the run's cursor over (chosen, rejected) episode pairs ------------

    def dpo_used(self, name: str) -> set[tuple[str, str]]:
        """The (chosen, rejected) pairs run `name` has trained on or set aside."""
        with self.db.transaction(write=False) as cur:
            rows = cur.execute("SELECT chosen, rejected FROM training_dpo_pairs WHERE run = ?", (name,)).fetchall()
        return {(r[0], r[1]) for r in rows}

    def commit_dpo_step(
        self,
        name: str,
        *,
        step: int,
        trained: list[tuple[str, str]],
        unusable: dict[tuple[str, str], str],
        metrics: dict[str, Any] | None = None,
    ) -> TrainingRun:
        """Record the pairs a DPO step used and advance the run to `step`, in one transaction: as
        `commit_sft_step`, with (chosen episode, rejected episode) pairs."""
        now = time.time()
        with self.db.transaction(write=True) as cur:
            self._check_next_step(cur, name, step, trained=bool(trained), what="DPO")
            outcomes: list[tuple[tuple[str, str], SftOutcome, str | None]] = [
                (p, SftOutcome.trained, None) for p in trained
            ]
            outcomes += [(p, SftOutcome.unusable, why) for p, why in unusable.items()]
            for (chosen, rejected), outcome, reason in outcomes:
                cur.execute(
                    "INSERT INTO training_dpo_pairs (run, chosen, rejected, step, outcome, reason, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (name, chosen, rejected, step, outcome.value, reason, now),
                )
            self._advance(cur, name, step, {**(metrics or {}), "charts/dpo_pairs": len(trained)} if trained else None)
        return self.get_run(name)

    def dpo_counts(self, name: str) -> DpoCounts:
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                "SELECT outcome, COUNT(*), COUNT(DISTINCT step) FROM training_dpo_pairs WHERE run = ? GROUP BY outcome",
                (name,),
            ).fetchall()
        by = {r[0]: (int(r[1]), int(r[2])) for r in rows}
        trained, steps = by.get(SftOutcome.trained.value, (0, 0))
        return DpoCounts(
            steps=steps, pairs_trained=trained, pairs_unusable=by.get(SftOutcome.unusable.value, (0, 0))[0]
        )

    @staticmethod
    def _check_next_step(cur: Any, name: str, step: int, *, trained: bool, what: str) -> None:
        """A step that trained must be the run's next; one that only set data aside, the current."""
        row = cur.execute("SELECT step FROM training_runs WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise StoreError(f"no training run named {name!r}")
        expected = row[0] + 1 if trained else row[0]
        if step != expected:
            raise StoreError(f"training run {name!r} is at step {row[0]}; cannot commit {what} step {step}")

    @staticmethod
    def _advance(cur: Any, name: str, step: int, metrics: dict[str, Any] | None) -> None:
        """Move the run to `step`; with `metrics`, a training_steps row (no reward: SFT and DPO have none)."""
        now = time.time()
        cur.execute("UPDATE training_runs SET step = ?, updated_at = ? WHERE name = ?", (step, now, name))
        if metrics is not None:
            cur.execute(
                "INSERT INTO training_steps (run, step, reward_mean, reward_std, groups_trained,"
                " groups_skipped_zero_variance, groups_skipped_stale, metrics, created_at)"
                " VALUES (?, ?, NULL, NULL, 0, 0, 0, ?, ?)",
                (name, step, json.dumps(metrics), now),
            )

    def set_sft_skipped(self, name: str, count: int, reason: str | None) -> None:
        """Say how many ready external episodes the run's backend cannot imitate, and why."""
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "UPDATE training_runs SET sft_skipped = ?, sft_skip_reason = ?, updated_at = ? WHERE name = ?",
                (count, clip_text(reason), time.time(), name),
            )

    def add_unavailable_scenarios(self, name: str, count: int, reason: str | None) -> None:
        """Count `count` more self-play scenarios the run skipped (verifier unavailable), and why."""
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "UPDATE training_runs SET scenarios_unavailable = scenarios_unavailable + ?,"
                " scenario_unavailable_reason = ?, updated_at = ? WHERE name = ?",
                (count, clip_text(reason), time.time(), name),
            )

    def sft_counts(self, name: str) -> SftCounts:
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                "SELECT outcome, COUNT(*), COUNT(DISTINCT step) FROM training_sft_episodes WHERE run = ?"
                " GROUP BY outcome",
                (name,),
            ).fetchall()
            reasons = cur.execute(
                "SELECT COALESCE(reason, 'unrecorded'), COUNT(*) FROM training_sft_episodes"
                " WHERE run = ? AND outcome = ? GROUP BY 1",
                (name, SftOutcome.unusable.value),
            ).fetchall()
            latest = cur.execute(
                "SELECT episode_id, reason FROM training_sft_episodes WHERE run = ? AND outcome = ?"
                " ORDER BY created_at DESC, episode_id LIMIT 1",
                (name, SftOutcome.unusable.value),
            ).fetchone()
        by = {r[0]: (int(r[1]), int(r[2])) for r in rows}
        trained, steps = by.get(SftOutcome.trained.value, (0, 0))
        return SftCounts(
            steps=steps,
            episodes_trained=trained,
            episodes_unusable=by.get(SftOutcome.unusable.value, (0, 0))[0],
            unusable_reasons={r[0]: int(r[1]) for r in reasons},
            latest_unusable=f"{latest[0]}: {latest[1] or 'unrecorded'}" if latest else None,
        )

    def training_steps(self, name: str, *, limit: int = 1000) -> list[TrainingStepRecord]:
        """The run's most recent steps, oldest first."""
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                "SELECT step, reward_mean, reward_std, groups_trained, groups_skipped_zero_variance,"
                " groups_skipped_stale, metrics, created_at FROM training_steps WHERE run = ?"
                " ORDER BY step DESC LIMIT ?",
                (name, limit),
            ).fetchall()
        return [
            TrainingStepRecord(
                run=name,
                step=r[0],
                reward_mean=r[1],
                reward_std=r[2],
                groups_trained=r[3],
                groups_skipped_zero_variance=r[4],
                groups_skipped_stale=r[5],
                metrics=json.loads(r[6] or "{}"),
                created_at=at_epoch(r[7]),
            )
            for r in reversed(rows)
        ]

    # -- evaluations: `rlide eval` reports, charted over a run's checkpoints --------------------------

    def record_eval(self, name: str, tasks: str, report: dict[str, Any]) -> EvalRecord:
        """Keep one eval report (`EvalReport.to_dict()`) of run `name` on the task set `tasks`
        (`EvalReport.set_name`, as the run's charts name it)."""
        now = time.time()
        values = (name, report.get("checkpoint_step"), tasks, str(report["model"]), int(report["n"]),
                  int(report["passed"]), float(report["pass_at_1"]), json.dumps(report), now)  # fmt: skip
        with self.db.transaction(write=True) as cur:
            row = cur.execute(
                "INSERT INTO evals (run, step, tasks, model, n, passed, pass_at_1, report, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                values,
            ).fetchone()
        return self.evals(name, eval_id=int(row[0]))[0]

    def evals(self, name: str | None = None, *, eval_id: int | None = None) -> list[EvalRecord]:
        """Eval reports, oldest first: of run `name` (every run's when None), or the one `eval_id`."""
        where: list[str] = []
        params: list[Any] = []
        if name is not None:
            where.append("run = ?")
            params.append(name)
        if eval_id is not None:
            where.append("id = ?")
            params.append(eval_id)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                f"SELECT id, run, step, tasks, model, n, passed, pass_at_1, report, created_at FROM evals {clause}"
                " ORDER BY id",
                params,
            ).fetchall()
        return [
            EvalRecord(
                id=r[0], run=r[1], step=r[2], tasks=r[3], model=r[4], n=r[5], passed=r[6], pass_at_1=r[7],
                report=json.loads(r[8]), created_at=at_epoch(r[9]),
            )
            for r in rows
        ]  # fmt: skip


_SFT_READY = (
    "e.source = 'external' AND e.status = 'success' AND e.implicit = 0 AND e.excluded = 0"
    " AND NOT EXISTS (SELECT 1 FROM training_sft_episodes t WHERE t.run = ? AND t.episode_id = e.id)"
)
"""Successful, explicit episodes of the IDE's own model, not excluded, that the run has not used yet (in either
outcome); their reward is filtered after (it is computed from its components)."""


_RUN_COLUMNS = (
    "name, backend, base_model, step, state, message, config, groups_trained, groups_skipped_zero_variance,"
    " groups_skipped_stale, created_at, updated_at, sft_skipped, sft_skip_reason, scenarios_unavailable,"
    " scenario_unavailable_reason"
)


def _run(row: Row) -> TrainingRun:
    return TrainingRun(
        name=row[0],
        backend=row[1],
        base_model=row[2],
        step=row[3],
        state=RunState(row[4]),
        message=row[5],
        config=json.loads(row[6] or "{}"),
        groups_trained=row[7],
        groups_skipped_zero_variance=row[8],
        groups_skipped_stale=row[9],
        created_at=at_epoch(row[10]),
        updated_at=at_epoch(row[11]),
        sft_skipped=row[12],
        sft_skip_reason=row[13],
        scenarios_unavailable=row[14],
        scenario_unavailable_reason=row[15],
    )
