"""The episode log: every write and read of episodes, steps and rewards goes through `EpisodeStore`.

One transaction per event, secrets redacted at the point of the write, and the same queries for
SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from typing import Any

from training.codec import CHOICE_TAG
from training.db import Database, Row, StoreError, connect
from training.migrations import migrate
from training.records import (
    Episode,
    EpisodeDetail,
    EpisodeSource,
    EpisodeStatus,
    Reward,
    RewardSource,
    Step,
    at_epoch,
    from_epoch,
)
from training.redact import redact, redact_text
from training.run_records import (
    GroupOutcome,
    PolicyTurn,
    RunState,
    SftCounts,
    SftOutcome,
    TrainingRun,
    TrainingStepRecord,
    TurnContext,
)

MAX_TEXT_CHARS = 4_000
"""Longest result summary, error or comment kept per row; the log is a record, not a file store."""


class EpisodeNotFound(StoreError):
    def __init__(self, episode_id: str) -> None:
        super().__init__(f"no episode with id {episode_id!r}")
        self.episode_id = episode_id


class EpisodeClosed(StoreError):
    def __init__(self, episode: Episode) -> None:
        super().__init__(f"episode {episode.id} already ended with status {episode.status.value}")
        self.episode = episode


def new_episode_id() -> str:
    return "ep_" + uuid.uuid4().hex[:20]


def _clip(text: str | None, limit: int = MAX_TEXT_CHARS) -> str | None:
    """Redacted, clipped text that every backend can store.

    Callers compute it before opening a write transaction, so redaction never runs under the
    database's write lock. A lone surrogate (JSON `"\\ud800"` decodes to one) cannot be encoded as
    UTF-8 by SQLite or PostgreSQL; it is kept as its backslash escape instead of failing the write.
    """
    if text is None:
        return None
    text = redact_text(text).encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} more characters not stored]"


_ENCODER = json.JSONEncoder(ensure_ascii=True, default=str)


def _json(value: Any) -> str:
    """JSON for a text column; ASCII escapes keep any string, lone surrogates included, exactly."""
    return _ENCODER.encode(value)


def redact_choice(choice: dict[str, Any]) -> dict[str, Any]:
    """A codec-encoded choice with secrets redacted from its text: the message (content, refusal,
    tool-call arguments) goes through `redact`. Token ids and logprob floats are kept exactly.

    Why the token ids stay: GRPO trains on them. ART puts the choice's `token_id:N` tokens in place
    of the assistant turn, and the gateway splices a turn's exact prompt and completion ids into the
    next prompt; rewriting them would train on a sequence the policy never sampled (its logprobs
    would belong to other tokens). What it means: a secret the policy saw or wrote is still in the
    log as token ids (`prompt_token_ids`, `completion_token_ids`, the `token_id:N` logprob entries)
    and anyone with the tokenizer can decode it, and the model trains on it. Those columns (and the
    `art` export, which carries them) are as sensitive as the model's weights; the text of the log
    (`episodes show`, `sft`/`dpo` exports) is clean. Also, ART rebuilds the prompt from the redacted
    messages, so a turn whose prompt held a secret trains in a slightly different context than it
    was sampled in.

    When the message changed, the per-token `bytes` (the decoded text of each token, which would
    spell the secret next to its marker) are dropped; if the logprob tokens are text rather than
    `token_id:N` (an upstream that returns no ids), the token strings spell it too, so the
    logprobs are dropped and the turn is no longer trainable.
    """
    data = choice.get(CHOICE_TAG)
    if not isinstance(data, dict):
        return dict(choice)
    message = data.get("message")
    clean = redact(message)
    if clean == message:
        return choice
    out = {**data, "message": clean}
    logprobs = data.get("logprobs")
    if isinstance(logprobs, dict):
        entries = [e for key in ("content", "refusal") for e in (logprobs.get(key) or [])]
        if any(not str(e.get("token", "")).startswith("token_id:") for e in entries):
            out["logprobs"] = None
        else:

            def without_bytes(entry: dict[str, Any]) -> dict[str, Any]:
                top = entry.get("top_logprobs")
                kept = {**entry, "bytes": None}
                if top:
                    kept["top_logprobs"] = [{**t, "bytes": None} for t in top]
                return kept

            out["logprobs"] = {
                key: [without_bytes(e) for e in value] if isinstance(value, list) else value
                for key, value in logprobs.items()
            }
    return {**choice, CHOICE_TAG: out}


_EPISODE_COLUMNS = (
    "e.id, e.task, e.workspace, e.client, e.source, e.status, e.summary, e.implicit, e.created_at, e.updated_at,"
    " e.ended_at, (SELECT COUNT(*) FROM steps s WHERE s.episode_id = e.id),"
    " (SELECT SUM(r.value) FROM rewards r WHERE r.episode_id = e.id)"
)


def _episode(row: Row) -> Episode:
    created = from_epoch(row[8])
    updated = from_epoch(row[9])
    assert created is not None and updated is not None
    return Episode(
        id=row[0],
        task=row[1],
        workspace=row[2],
        client=row[3],
        source=EpisodeSource(row[4]),
        status=EpisodeStatus(row[5]),
        summary=row[6],
        implicit=bool(row[7]),
        created_at=created,
        updated_at=updated,
        ended_at=from_epoch(row[10]),
        step_count=int(row[11]),
        reward_total=None if row[12] is None else float(row[12]),
    )


class EpisodeStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        migrate(db)

    @classmethod
    def open(cls, url: str) -> EpisodeStore:
        return cls(connect(url))

    @property
    def url(self) -> str:
        return self.db.url

    def close(self) -> None:
        self.db.close()

    # -- episodes -----------------------------------------------------------------------------

    def start_episode(
        self,
        task: str,
        *,
        workspace: str | None = None,
        client: str | None = None,
        session_key: str | None = None,
        implicit: bool = False,
        source: EpisodeSource = EpisodeSource.external,
    ) -> Episode:
        episode_id = new_episode_id()
        now = time.time()
        row = (episode_id, _clip(task), _clip(workspace), _clip(client), source.value, session_key, int(implicit))
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "INSERT INTO episodes (id, task, workspace, client, source, status, session_key, implicit,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'open', ?, ?, ?, ?)",
                (*row, now, now),
            )
        return self.get_episode(episode_id)

    def get_episode(self, episode_id: str) -> Episode:
        with self.db.transaction(write=False) as cur:
            row = cur.execute(f"SELECT {_EPISODE_COLUMNS} FROM episodes e WHERE e.id = ?", (episode_id,)).fetchone()
        if row is None:
            raise EpisodeNotFound(episode_id)
        return _episode(row)

    def end_episode(self, episode_id: str, status: EpisodeStatus, summary: str | None = None) -> Episode:
        if not status.is_terminal:
            raise ValueError("an episode ends with success, failure, aborted or timeout, not open")
        now = time.time()
        clipped = _clip(summary)
        with self.db.transaction(write=True) as cur:
            row = cur.execute("SELECT status FROM episodes WHERE id = ?", (episode_id,)).fetchone()
            if row is None:
                raise EpisodeNotFound(episode_id)
            if row[0] == EpisodeStatus.open.value:
                cur.execute(
                    "UPDATE episodes SET status = ?, summary = COALESCE(?, summary), ended_at = ?, updated_at = ?"
                    " WHERE id = ?",
                    (status.value, clipped, now, now, episode_id),
                )
        episode = self.get_episode(episode_id)
        if row[0] != EpisodeStatus.open.value:
            raise EpisodeClosed(episode)
        return episode

    def list_episodes(
        self,
        *,
        status: EpisodeStatus | None = None,
        source: EpisodeSource | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Episode]:
        where, params = [], []
        if status is not None:
            where.append("e.status = ?")
            params.append(status.value)
        if source is not None:
            where.append("e.source = ?")
            params.append(source.value)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                f"SELECT {_EPISODE_COLUMNS} FROM episodes e {clause} ORDER BY e.created_at DESC, e.id LIMIT ? OFFSET ?",
                (*params, limit, offset),
            ).fetchall()
        return [_episode(row) for row in rows]

    def expire_idle(self, idle_seconds: float) -> int:
        """Mark open episodes untouched for `idle_seconds` as timed out; return how many."""
        now = time.time()
        with self.db.transaction(write=True) as cur:
            stale = cur.execute(
                "SELECT id FROM episodes WHERE status = 'open' AND updated_at < ?", (now - idle_seconds,)
            ).fetchall()
            for (episode_id,) in stale:
                cur.execute(
                    "UPDATE episodes SET status = 'timeout', ended_at = ?, updated_at = ? WHERE id = ?",
                    (now, now, episode_id),
                )
        return len(stale)

    # -- steps and rewards --------------------------------------------------------------------

    def add_step(
        self,
        episode_id: str,
        *,
        tool: str,
        arguments: dict[str, Any],
        result_summary: str | None,
        error: str | None,
        duration_ms: float,
        wait: bool = True,
    ) -> int:
        """Record one tool call. Returns the step id once it is committed.

        `wait=False` raises `StoreBusy` rather than wait for another writer (see `Database`)."""
        now = time.time()
        values = (_json(redact(arguments)), _clip(result_summary), _clip(error))
        with self.db.transaction(write=True, wait=wait) as cur:
            # Steps may land on an ended episode (a late call after end_episode): the record stays whole.
            cur.execute("UPDATE episodes SET updated_at = ? WHERE id = ?", (now, episode_id))
            row = cur.execute(
                "INSERT INTO steps (episode_id, tool, arguments, result_summary, error, duration_ms, created_at)"
                " SELECT ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM episodes WHERE id = ?) RETURNING id",
                (episode_id, tool, *values, duration_ms, now, episode_id),
            ).fetchone()
        if row is None:
            raise EpisodeNotFound(episode_id)
        return int(row[0])

    def add_reward(self, episode_id: str, source: RewardSource, value: float, comment: str | None = None) -> Reward:
        if not -1.0 <= value <= 1.0:
            raise ValueError(f"a reward is in [-1, 1], got {value}")
        now = time.time()
        clipped = _clip(comment)
        with self.db.transaction(write=True) as cur:
            row = cur.execute(
                "INSERT INTO rewards (episode_id, source, value, comment, created_at)"
                " SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM episodes WHERE id = ?) RETURNING id",
                (episode_id, source.value, float(value), clipped, now, episode_id),
            ).fetchone()
            if row is not None:
                cur.execute("UPDATE episodes SET updated_at = ? WHERE id = ?", (now, episode_id))
        if row is None:
            raise EpisodeNotFound(episode_id)
        created = from_epoch(now)
        assert created is not None
        return Reward(
            id=int(row[0]),
            episode_id=episode_id,
            source=source,
            value=value,
            comment=clipped,
            created_at=created,
        )

    def detail(self, episode_id: str) -> EpisodeDetail:
        episode = self.get_episode(episode_id)
        with self.db.transaction(write=False) as cur:
            step_rows = cur.execute(
                "SELECT id, tool, arguments, result_summary, error, duration_ms, created_at FROM steps"
                " WHERE episode_id = ? ORDER BY id",
                (episode_id,),
            ).fetchall()
            reward_rows = cur.execute(
                "SELECT id, source, value, comment, created_at FROM rewards WHERE episode_id = ? ORDER BY id",
                (episode_id,),
            ).fetchall()
        steps = [
            Step(
                id=r[0],
                episode_id=episode_id,
                tool=r[1],
                arguments=json.loads(r[2]),
                result_summary=r[3],
                error=r[4],
                duration_ms=r[5],
                created_at=at_epoch(r[6]),
            )
            for r in step_rows
        ]
        rewards = [
            Reward(
                id=r[0],
                episode_id=episode_id,
                source=RewardSource(r[1]),
                value=r[2],
                comment=r[3],
                created_at=at_epoch(r[4]),
            )
            for r in reward_rows
        ]
        return EpisodeDetail(episode=episode, steps=steps, rewards=rewards)

    def integrity_check(self) -> list[str]:
        """Problems found in the log (empty when healthy): SQLite's own check plus orphan rows."""
        problems: list[str] = []
        with self.db.transaction(write=False) as cur:
            if self.db.dialect == "sqlite":
                result = [row[0] for row in cur.execute("PRAGMA integrity_check").fetchall()]
                if result != ["ok"]:
                    problems.extend(str(r) for r in result)
            orphans = cur.execute(
                "SELECT COUNT(*) FROM steps s WHERE NOT EXISTS (SELECT 1 FROM episodes e WHERE e.id = s.episode_id)"
            ).fetchone()
            if orphans and orphans[0]:
                problems.append(f"{orphans[0]} steps belong to no episode")
        return problems

    # -- policy turns (our student's completions, with tokens and logprobs) ------------------------

    def add_policy_turn(
        self,
        episode_id: str,
        *,
        model: str,
        request: dict[str, Any],
        choice: dict[str, Any],
        checkpoint_step: int | None = None,
        prompt_token_ids: list[int] | None = None,
        completion_token_ids: list[int] | None = None,
    ) -> int:
        """Record one completion sampled from the policy. `choice` is `training.codec.encode_choice`
        output; the request and the choice's text are redacted, its token ids and logprobs kept
        exactly (`redact_choice` says why and what that means), as are the token id columns."""
        now = time.time()
        request_json, choice_json = _json(redact(request)), _json(redact_choice(choice))
        with self.db.transaction(write=True) as cur:
            cur.execute("UPDATE episodes SET updated_at = ? WHERE id = ?", (now, episode_id))
            row = cur.execute(
                "INSERT INTO policy_turns (episode_id, model, checkpoint_step, request, choice, prompt_token_ids,"
                " completion_token_ids, created_at) SELECT ?, ?, ?, ?, ?, ?, ?, ?"
                " WHERE EXISTS (SELECT 1 FROM episodes WHERE id = ?) RETURNING id",
                (
                    episode_id,
                    model,
                    checkpoint_step,
                    request_json,
                    choice_json,
                    None if prompt_token_ids is None else json.dumps(prompt_token_ids),
                    None if completion_token_ids is None else json.dumps(completion_token_ids),
                    now,
                    episode_id,
                ),
            ).fetchone()
        if row is None:
            raise EpisodeNotFound(episode_id)
        return int(row[0])

    def turn_context(self, episode_id: str) -> TurnContext:
        """The episode's source and status and its last policy turn's request, choice and token ids,
        in one query (the policy endpoint's read before each recorded turn)."""
        with self.db.transaction(write=False) as cur:
            row = cur.execute(
                "SELECT e.source, e.status, t.request, t.choice, t.prompt_token_ids, t.completion_token_ids"
                " FROM episodes e LEFT JOIN policy_turns t"
                " ON t.id = (SELECT MAX(p.id) FROM policy_turns p WHERE p.episode_id = e.id) WHERE e.id = ?",
                (episode_id,),
            ).fetchone()
        if row is None:
            raise EpisodeNotFound(episode_id)
        source, status = EpisodeSource(row[0]), EpisodeStatus(row[1])
        if row[4] is None or row[5] is None:  # no turn, or one without token ids: nothing to splice
            return TurnContext(source, status)
        return TurnContext(
            source,
            status,
            last_request=json.loads(row[2]),
            last_choice=json.loads(row[3]),
            last_prompt_token_ids=json.loads(row[4]),
            last_completion_token_ids=json.loads(row[5]),
        )

    def policy_turns(self, episode_id: str, *, last_only: bool = False) -> list[PolicyTurn]:
        """The episode's policy turns in order (`last_only`: just the newest, for continuing a conversation)."""
        order = "ORDER BY id DESC LIMIT 1" if last_only else "ORDER BY id"
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                "SELECT id, model, checkpoint_step, request, choice, prompt_token_ids, completion_token_ids,"
                f" created_at FROM policy_turns WHERE episode_id = ? {order}",
                (episode_id,),
            ).fetchall()
        return [
            PolicyTurn(
                id=r[0],
                episode_id=episode_id,
                model=r[1],
                checkpoint_step=r[2],
                request=json.loads(r[3]),
                choice=json.loads(r[4]),
                prompt_token_ids=None if r[5] is None else json.loads(r[5]),
                completion_token_ids=None if r[6] is None else json.loads(r[6]),
                created_at=_at(r[7]),
            )
            for r in rows
        ]

    def terminal_episodes(self, *, source: EpisodeSource | None = None, batch: int = 500) -> list[Episode]:
        """Every ended episode (oldest first), optionally of one source; for exporters and the worker."""
        where = "e.status <> 'open'" + (" AND e.source = ?" if source is not None else "")
        params: tuple[Any, ...] = (source.value,) if source is not None else ()
        out: list[Episode] = []
        offset = 0
        while True:
            with self.db.transaction(write=False) as cur:
                rows = cur.execute(
                    f"SELECT {_EPISODE_COLUMNS} FROM episodes e WHERE {where} ORDER BY e.created_at, e.id"
                    " LIMIT ? OFFSET ?",
                    (*params, batch, offset),
                ).fetchall()
            out.extend(_episode(r) for r in rows)
            if len(rows) < batch:
                return out
            offset += batch

    # -- training runs: the worker's cursor, history and consumed groups ---------------------------

    def ensure_run(
        self, name: str, *, backend: str, base_model: str, config: dict[str, Any] | None = None
    ) -> TrainingRun:
        """Create the run if it is new; an existing run keeps its step (that is how a worker resumes)."""
        now = time.time()
        with self.db.transaction(write=True) as cur:
            row = cur.execute("SELECT backend, base_model FROM training_runs WHERE name = ?", (name,)).fetchone()
            if row is None:
                cur.execute(
                    "INSERT INTO training_runs (name, backend, base_model, config, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (name, backend, base_model, json.dumps(config or {}, default=str), now, now),
                )
            elif row[1] != base_model:
                raise StoreError(
                    f"training run {name!r} was started on base model {row[1]!r}, not {base_model!r}:"
                    " pick another run name"
                )
        return self.get_run(name)

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
                (state.value, _clip(message), time.time(), name),
            )

    def consumed_groups(self, name: str) -> set[str]:
        with self.db.transaction(write=False) as cur:
            rows = cur.execute("SELECT group_key FROM training_groups WHERE run = ?", (name,)).fetchall()
        return {r[0] for r in rows}

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

    def sft_candidates(self, name: str, *, min_reward: float, limit: int) -> list[Episode]:
        """Up to `limit` external episodes ready for an SFT step of run `name`, oldest ended first."""
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                f"SELECT {_EPISODE_COLUMNS} FROM episodes e WHERE {_SFT_READY} ORDER BY e.ended_at, e.id LIMIT ?",
                (min_reward, name, limit),
            ).fetchall()
        return [_episode(r) for r in rows]

    def sft_pending(self, name: str, *, min_reward: float) -> int:
        with self.db.transaction(write=False) as cur:
            row = cur.execute(f"SELECT COUNT(*) FROM episodes e WHERE {_SFT_READY}", (min_reward, name)).fetchone()
        return int(row[0]) if row else 0

    def commit_sft_step(
        self,
        name: str,
        *,
        step: int,
        trained: list[str],
        unusable: list[str],
        metrics: dict[str, Any] | None = None,
    ) -> TrainingRun:
        """Record the episodes an SFT step used and advance the run to `step`, in one transaction.

        With `trained` episodes, `step` must be the run's step + 1 (a training_steps row is written,
        without a reward: SFT has none); with only `unusable` ones it must equal the run's step. An
        episode the run already used fails the whole commit (the cursor never counts one twice).
        """
        now = time.time()
        with self.db.transaction(write=True) as cur:
            row = cur.execute("SELECT step FROM training_runs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise StoreError(f"no training run named {name!r}")
            expected = row[0] + 1 if trained else row[0]
            if step != expected:
                raise StoreError(f"training run {name!r} is at step {row[0]}; cannot commit SFT step {step}")
            outcomes = [(e, SftOutcome.trained) for e in trained] + [(e, SftOutcome.unusable) for e in unusable]
            for episode_id, outcome in outcomes:
                cur.execute(
                    "INSERT INTO training_sft_episodes (run, episode_id, step, outcome, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (name, episode_id, step, outcome.value, now),
                )
            cur.execute(
                "UPDATE training_runs SET step = ?, sft_skipped = 0, sft_skip_reason = NULL, updated_at = ?"
                " WHERE name = ?",
                (step, now, name),
            )
            if trained:
                cur.execute(
                    "INSERT INTO training_steps (run, step, reward_mean, reward_std, groups_trained,"
                    " groups_skipped_zero_variance, groups_skipped_stale, metrics, created_at)"
                    " VALUES (?, ?, NULL, NULL, 0, 0, 0, ?, ?)",
                    (name, step, json.dumps({**(metrics or {}), "charts/sft_episodes": len(trained)}), now),
                )
        return self.get_run(name)

    def set_sft_skipped(self, name: str, count: int, reason: str | None) -> None:
        """Say how many ready external episodes the run's backend cannot imitate, and why."""
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "UPDATE training_runs SET sft_skipped = ?, sft_skip_reason = ?, updated_at = ? WHERE name = ?",
                (count, _clip(reason), time.time(), name),
            )

    def add_unavailable_scenarios(self, name: str, count: int, reason: str | None) -> None:
        """Count `count` more self-play scenarios the run skipped (verifier unavailable), and why."""
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "UPDATE training_runs SET scenarios_unavailable = scenarios_unavailable + ?,"
                " scenario_unavailable_reason = ?, updated_at = ? WHERE name = ?",
                (count, _clip(reason), time.time(), name),
            )

    def sft_counts(self, name: str) -> SftCounts:
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                "SELECT outcome, COUNT(*), COUNT(DISTINCT step) FROM training_sft_episodes WHERE run = ?"
                " GROUP BY outcome",
                (name,),
            ).fetchall()
        by = {r[0]: (int(r[1]), int(r[2])) for r in rows}
        trained, steps = by.get(SftOutcome.trained.value, (0, 0))
        return SftCounts(steps=steps, episodes_trained=trained, episodes_unusable=by.get("unusable", (0, 0))[0])

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
                created_at=_at(r[7]),
            )
            for r in reversed(rows)
        ]


_SFT_READY = (
    "e.source = 'external' AND e.status <> 'open' AND e.implicit = 0"
    " AND (SELECT SUM(r.value) FROM rewards r WHERE r.episode_id = e.id) >= ?"
    " AND NOT EXISTS (SELECT 1 FROM training_sft_episodes t WHERE t.run = ? AND t.episode_id = e.id)"
)
"""Ended, explicit episodes of the IDE's own model whose reward total reaches the minimum and that
the run has not used yet (in either outcome)."""


def _at(seconds: float) -> datetime:
    moment = from_epoch(seconds)
    assert moment is not None
    return moment


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
        created_at=_at(row[10]),
        updated_at=_at(row[11]),
        sft_skipped=row[12],
        sft_skip_reason=row[13],
        scenarios_unavailable=row[14],
        scenario_unavailable_reason=row[15],
    )
