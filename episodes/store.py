"""The episode log: every write and read of the log goes through `EpisodeStore`.

It reads and writes episodes, steps and rewards itself, and holds the log's other two parts over the
same database: `turns` (`episodes.policy_turns`: the policy's completions) and `runs`
(`episodes.training_runs`: the training worker's cursors and history). One transaction per event,
secrets redacted at the point of the write, and the same queries for SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

from episodes import codec
from episodes.db import Cursor, Database, EpisodeClosed, EpisodeNotFound, StoreError, check_episode_id, connect
from episodes.migrations import migrate
from episodes.policy_turns import PolicyTurns
from episodes.preferences import HumanPreferences
from episodes.records import (
    CurationAction,
    CurationEvent,
    Episode,
    EpisodeDetail,
    EpisodeSource,
    EpisodeStatus,
    EpisodeVerifier,
    Flag,
    Reward,
    RewardSource,
    StateKind,
    Step,
    VerifierState,
    VerifierVerdict,
    WorkspaceState,
    at_epoch,
    from_epoch,
)
from episodes.redaction import redact, redact_text
from episodes.rewards import DEFAULT_WEIGHTS, OUTCOME_REWARD, RewardWeights
from episodes.rows import (
    EPISODE_COLUMNS,
    MAX_TASK_CHARS,
    MAX_TEXT_CHARS,
    TRAINABLE,
    EpisodeQuery,
    check_author,
    clip_text,
    episode_from_row,
    json_text,
    record_curation,
)
from episodes.training_runs import TrainingRuns


def _blob_rows(cur: Cursor, columns: str, digests: set[str]) -> list[Any]:
    wanted, rows = sorted(digests), []
    for start in range(0, len(wanted), 500):
        part = wanted[start : start + 500]
        marks = ",".join("?" * len(part))
        rows += cur.execute(f"SELECT {columns} FROM blobs WHERE sha256 IN ({marks})", part).fetchall()
    return rows


def _stored_blobs(cur: Cursor, digests: set[str]) -> set[str]:
    return {row[0] for row in _blob_rows(cur, "sha256", digests)}


def _read_blobs(cur: Cursor, digests: set[str]) -> dict[str, str]:
    return {digest: json.loads(text) for digest, text in _blob_rows(cur, "sha256, text", digests)}


def _put_blobs(cur: Cursor, blobs: dict[str, str]) -> None:
    """Store texts by digest (the values JSON-encoded); most are there already (the same files, call
    after call): they are looked up in one statement and only the new ones inserted."""
    for digest in blobs.keys() - _stored_blobs(cur, set(blobs)):
        cur.execute(
            "INSERT INTO blobs (sha256, text) VALUES (?, ?) ON CONFLICT (sha256) DO NOTHING", (digest, blobs[digest])
        )


def _text_blob(text: str) -> tuple[str, str]:
    """(digest, stored value) of a text kept whole in `blobs`; surrogatepass: a lone surrogate still hashes."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), json_text(text)


def _blob_in_use(cur: Cursor, digest: str) -> bool:
    """Whether any step or workspace state still refers to a stored text (a digest is 64 hex digits:
    it appears quoted in a JSON column only where it is referred to)."""
    quoted = f'%"{digest}"%'
    checks = (
        ("SELECT 1 FROM steps WHERE blob_refs LIKE ? LIMIT 1", quoted),
        ("SELECT 1 FROM steps WHERE result_digest = ? LIMIT 1", digest),
        ("SELECT 1 FROM workspace_states WHERE files LIKE ? LIMIT 1", quoted),
        ("SELECT 1 FROM workspace_states WHERE diff_digest = ? OR solution_digest = ? LIMIT 1", digest),
    )
    for query, value in checks:
        params = (value, value) if query.count("?") == 2 else (value,)
        if cur.execute(query, params).fetchone() is not None:
            return True
    return False


def _arguments(episode_id: str, step_id: int, stored: Any, refs: Any, blobs: dict[str, str]) -> dict[str, Any]:
    """A step's arguments whole again: `stored` with the texts its `refs` name put back."""
    if refs is None:
        return stored  # type: ignore[no-any-return]
    try:
        return codec.join_blobs(stored, refs, blobs)  # type: ignore[no-any-return]
    except (LookupError, TypeError) as exc:  # a missing blob, or refs that do not fit the arguments
        raise StoreError(
            f"step {step_id} of episode {episode_id} refers to a text the log does not hold ({exc}):"
            " the log was edited by hand?"
        ) from exc


def new_episode_id() -> str:
    return "ep_" + uuid.uuid4().hex[:20]


class EpisodeStore:
    def __init__(
        self, db: Database, weights: RewardWeights = DEFAULT_WEIGHTS, *, train_unverified: bool = False
    ) -> None:
        self.db = db
        self.weights = weights  # how an episode's reward components combine (episodes.rewards)
        # Whether the readers training uses (`terminal_episodes`) also return episodes with only claims
        # (no verified reward) or uncleared flags: off unless a person asks (`RLIDE_TRAIN_UNVERIFIED`).
        self.train_unverified = train_unverified
        migrate(db)
        self.turns = PolicyTurns(db)
        self.runs = TrainingRuns(db, weights)
        self.preferences = HumanPreferences(self)

    @classmethod
    def open(
        cls, url: str, weights: RewardWeights = DEFAULT_WEIGHTS, *, train_unverified: bool = False
    ) -> EpisodeStore:
        return cls(connect(url), weights, train_unverified=train_unverified)

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
        batch: tuple[str, int] | None = None,
    ) -> Episode:
        """`batch`: (the agent run's id, its number of attempts) when the episode is one of them."""
        episode_id = new_episode_id()
        now = time.time()
        row = (
            episode_id,
            clip_text(task, MAX_TASK_CHARS),
            clip_text(workspace),
            clip_text(client),
            source.value,
            session_key,
            int(implicit),
            *(batch or (None, None)),
        )
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "INSERT INTO episodes (id, task, workspace, client, source, status, session_key, implicit,"
                " batch, batch_size, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, ?)",
                (*row, now, now),
            )
        return self.get_episode(episode_id)

    def get_episode(self, episode_id: str) -> Episode:
        check_episode_id(episode_id)
        with self.db.transaction(write=False) as cur:
            row = cur.execute(f"SELECT {EPISODE_COLUMNS} FROM episodes e WHERE e.id = ?", (episode_id,)).fetchone()
        if row is None:
            raise EpisodeNotFound(episode_id)
        return episode_from_row(row, self.weights)

    def session_of(self, episode_id: str) -> str | None:
        """The MCP session an episode was started in (None: the policy endpoint's, or the CLI's)."""
        check_episode_id(episode_id)
        with self.db.transaction(write=False) as cur:
            row = cur.execute("SELECT session_key FROM episodes WHERE id = ?", (episode_id,)).fetchone()
        if row is None:
            raise EpisodeNotFound(episode_id)
        return None if row[0] is None else str(row[0])

    def end_episode(self, episode_id: str, status: EpisodeStatus, summary: str | None = None) -> Episode:
        if not status.is_terminal:
            raise ValueError("an episode ends with success, failure, aborted or timeout, not open")
        check_episode_id(episode_id)
        now = time.time()
        clipped = clip_text(summary, MAX_TASK_CHARS)
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

    def end_with_outcome(self, episode_id: str, status: EpisodeStatus, summary: str | None = None) -> float | None:
        """End an episode and record its outcome as a reward (success +1, failure -1, aborted 0:
        `OUTCOME_REWARD`), as MCP's `end_episode` and the policy endpoint's `/end` both do; returns
        that reward (None for a status without one)."""
        self.end_episode(episode_id, status, summary)
        reward = OUTCOME_REWARD.get(status)
        if reward is not None:
            self.add_reward(episode_id, RewardSource.outcome, reward, f"outcome: {status.value}")
        return reward

    def list_episodes(
        self,
        query: EpisodeQuery | None = None,
        *,
        status: EpisodeStatus | None = None,
        source: EpisodeSource | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Episode]:
        """Newest first, filtered by `query` (or the `status`/`source` shorthands), one page in SQL."""
        if limit < 0 or offset < 0:
            raise ValueError("limit and offset are >= 0")
        query = query or EpisodeQuery(status=status, source=source)
        clause, params = query.where(self.weights)
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                f"SELECT {EPISODE_COLUMNS} FROM episodes e {clause} ORDER BY e.created_at DESC, e.id LIMIT ? OFFSET ?",
                (*params, limit, offset),
            ).fetchall()
        return [episode_from_row(row, self.weights) for row in rows]

    def count_episodes(self, query: EpisodeQuery | None = None) -> int:
        clause, params = (query or EpisodeQuery()).where(self.weights)
        with self.db.transaction(write=False) as cur:
            row = cur.execute(f"SELECT COUNT(*) FROM episodes e {clause}", params).fetchone()
        return int(row[0])

    def same_task(self, episode_id: str, *, limit: int = 50) -> list[Episode]:
        """Other episodes whose task text is this one's (what a person compares it with), newest first."""
        check_episode_id(episode_id)
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                f"SELECT {EPISODE_COLUMNS} FROM episodes e WHERE e.task = (SELECT task FROM episodes WHERE id = ?)"
                " AND e.id <> ? ORDER BY e.created_at DESC, e.id LIMIT ?",
                (episode_id, episode_id, limit),
            ).fetchall()
        return [episode_from_row(row, self.weights) for row in rows]

    def expire_idle(self, idle_seconds: float, source: EpisodeSource | None = None) -> list[str]:
        """Mark open episodes (of `source`, else any) untouched for `idle_seconds` as timed out; return
        their ids. Whoever records a source sweeps it: the MCP server an IDE's, the endpoint its own."""
        now = time.time()
        with self.db.transaction(write=True) as cur:
            sql = "SELECT id FROM episodes WHERE status = 'open' AND updated_at < ?"
            args: list[float | str] = [now - idle_seconds]
            if source is not None:
                sql, args = sql + " AND source = ?", [*args, source.value]
            stale = cur.execute(sql, tuple(args)).fetchall()
            for (episode_id,) in stale:
                cur.execute(
                    "UPDATE episodes SET status = 'timeout', ended_at = ?, updated_at = ? WHERE id = ?",
                    (now, now, episode_id),
                )
        return [episode_id for (episode_id,) in stale]

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
        """Record one tool call. Returns the step id once it is committed. `result_summary` is the
        result as the agent received it: the column keeps its head, a longer one is kept whole
        once per content in `blobs` (`Step.result`).

        `wait=False` raises `StoreBusy` rather than wait for another writer (see `Database`)."""
        check_episode_id(episode_id)
        now = time.time()
        parts = codec.split_blobs(redact(arguments))
        refs = json_text(parts.refs) if parts.refs else None
        # JSON keeps a lone surrogate storable (escaped), as in every other text column.
        blobs = {digest: json_text(text) for digest, text in parts.blobs.items()}
        result_digest = None
        if result_summary is not None and len(result_summary) > MAX_TEXT_CHARS:
            result_digest, stored = _text_blob(redact_text(result_summary))
            blobs[result_digest] = stored
        values = (json_text(parts.arguments), refs, clip_text(result_summary), result_digest, clip_text(error))
        with self.db.transaction(write=True, wait=wait) as cur:
            # Steps may land on an ended episode (a late call after end_episode): the record stays whole.
            cur.execute("UPDATE episodes SET updated_at = ? WHERE id = ?", (now, episode_id))
            row = cur.execute(
                "INSERT INTO steps (episode_id, tool, arguments, blob_refs, result_summary, result_digest, error,"
                " duration_ms, created_at) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?"
                " WHERE EXISTS (SELECT 1 FROM episodes WHERE id = ?) RETURNING id",
                (episode_id, tool, *values, duration_ms, now, episode_id),
            ).fetchone()
            if row is not None:
                _put_blobs(cur, blobs)
        if row is None:
            raise EpisodeNotFound(episode_id)
        return int(row[0])

    def add_reward(
        self,
        episode_id: str,
        source: RewardSource,
        value: float,
        comment: str | None = None,
        *,
        verified: bool = False,
        curation: dict[str, Any] | None = None,
    ) -> Reward:
        """Record a reward component; `verified` for a tests reward judged by the episode's own
        verifier (only those count towards its reward: `episodes.rewards`). With `curation` (a
        person's rating: who, why), the rating is also recorded in the curation history, in the same
        transaction."""
        if not -1.0 <= value <= 1.0:
            raise ValueError(f"a reward is in [-1, 1], got {value}")
        check_episode_id(episode_id)
        if source is RewardSource.self_rating:  # an agent's rating: stored as a feedback row that is no evidence
            source, verified = RewardSource.feedback, False
        now = time.time()
        clipped = clip_text(comment)
        with self.db.transaction(write=True) as cur:
            row = cur.execute(
                "INSERT INTO rewards (episode_id, source, value, comment, created_at, verified)"
                " SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM episodes WHERE id = ?) RETURNING id",
                (episode_id, source.value, float(value), clipped, now, int(verified), episode_id),
            ).fetchone()
            if row is not None:
                cur.execute("UPDATE episodes SET updated_at = ? WHERE id = ?", (now, episode_id))
                if curation is not None:
                    record_curation(cur, episode_id, CurationAction.rate, {"value": value, **curation})
        if row is None:
            raise EpisodeNotFound(episode_id)
        return Reward(
            id=int(row[0]),
            episode_id=episode_id,
            source=source,
            value=value,
            comment=clipped,
            created_at=at_epoch(now),
            verified=verified,
        )

    def rate_episode(self, episode_id: str, value: float, comment: str | None = None, *, author: str) -> Reward:
        """A person's rating of an episode (-1..1): its `feedback` reward component, recorded in the
        curation history with its author (the dashboard's "rate", `rlide episodes rate`)."""
        who = check_author(author)
        return self.add_reward(
            episode_id,
            RewardSource.feedback,
            value,
            comment,
            verified=True,  # a person's word is evidence; an agent's rating (give_feedback) is a claim
            curation={"author": who, "comment": clip_text(comment)},
        )

    # -- verifiers ------------------------------------------------------------------------------

    _VERIFIER_COLUMNS = (
        "command, fail_to_pass, pass_to_pass, trusted_files, state, reason, project, commit_id, environment,"
        " end_requested, verdict"
    )

    def verifier(self, episode_id: str) -> EpisodeVerifier | None:
        with self.db.transaction(write=False) as cur:
            row = cur.execute(
                f"SELECT {self._VERIFIER_COLUMNS} FROM verifiers WHERE episode_id = ?", (episode_id,)
            ).fetchone()
        if row is None:
            return None
        fail_to_pass = None if row[1] is None else json.loads(row[1])
        # A verifier from before the project's verifiers: established by its first failing run, or named.
        state = (
            VerifierState(row[4]) if row[4] else (VerifierState.established if fail_to_pass else VerifierState.pending)
        )
        return EpisodeVerifier(
            command=row[0],
            fail_to_pass=fail_to_pass,
            pass_to_pass=None if row[2] is None else json.loads(row[2]),
            trusted_files=json.loads(row[3] or "{}"),
            state=state,
            reason=row[5],
            project=None if row[6] is None else json.loads(row[6]),
            commit=row[7],
            environment=row[8],
            end_requested=bool(row[9]),
            verdict=None if row[10] is None else VerifierVerdict.model_validate_json(row[10]),
        )

    def set_verifier(
        self,
        episode_id: str,
        command: str,
        *,
        project: dict[str, Any] | None,
        commit: str | None,
        environment: str | None,
        state: VerifierState = VerifierState.pending,
        reason: str | None = None,
    ) -> EpisodeVerifier:
        """The project's verifier for an episode, pending until its start state has run (once: an
        episode keeps the verifier it was given)."""
        check_episode_id(episode_id)
        with self.db.transaction(write=True) as cur:
            if cur.execute("SELECT 1 FROM episodes WHERE id = ?", (episode_id,)).fetchone() is None:
                raise EpisodeNotFound(episode_id)
            if cur.execute("SELECT 1 FROM verifiers WHERE episode_id = ?", (episode_id,)).fetchone() is None:
                cur.execute(
                    "INSERT INTO verifiers (episode_id, command, state, reason, project, commit_id, environment,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        episode_id,
                        command,
                        state.value,
                        clip_text(reason),
                        None if project is None else json_text(project),
                        commit,
                        environment,
                        time.time(),
                    ),
                )
        found = self.verifier(episode_id)
        assert found is not None
        return found

    def establish_verifier(
        self,
        episode_id: str,
        fail_to_pass: set[str],
        pass_to_pass: set[str],
        trusted_files: dict[str, str | None],
        project: dict[str, Any],
    ) -> EpisodeVerifier:
        """Fix a pending verifier's FAIL_TO_PASS and PASS_TO_PASS tests and its trusted files, from a
        complete run of the start state (secrets in the files redacted, as everything the log keeps)."""
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "UPDATE verifiers SET fail_to_pass = ?, pass_to_pass = ?, trusted_files = ?, project = ?, state = ?,"
                " reason = NULL WHERE episode_id = ? AND state = ?",
                (
                    json.dumps(sorted(fail_to_pass)),
                    json.dumps(sorted(pass_to_pass)),
                    json_text(trusted_files),  # digests, not texts
                    json_text(project),
                    VerifierState.established.value,
                    episode_id,
                    VerifierState.pending.value,
                ),
            )
        found = self.verifier(episode_id)
        assert found is not None
        return found

    def verifier_unavailable(self, episode_id: str, reason: str) -> None:
        """A pending verifier that cannot be established: no failing test, a crashed start state..."""
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "UPDATE verifiers SET state = ?, reason = ? WHERE episode_id = ? AND state = ?",
                (VerifierState.unavailable.value, clip_text(reason), episode_id, VerifierState.pending.value),
            )

    def request_end_verification(self, episode_id: str) -> bool:
        """Mark the episode's end state as waiting for rlide's run of its verifier (kept across a crash:
        `pending_verifications`); False when it has no verifier."""
        with self.db.transaction(write=True) as cur:
            row = cur.execute(
                "UPDATE verifiers SET end_requested = 1 WHERE episode_id = ? RETURNING episode_id", (episode_id,)
            ).fetchone()
        return row is not None

    def pending_verifications(self) -> list[str]:
        """Episodes whose verifier or end state still waits for a run, oldest first: a server or worker
        that stopped in the middle left them; the next one runs them."""
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                "SELECT v.episode_id FROM verifiers v JOIN episodes e ON e.id = v.episode_id"
                " WHERE v.state = ? OR (v.end_requested = 1 AND v.verdict IS NULL AND v.state = ?)"
                " ORDER BY v.created_at",
                (VerifierState.pending.value, VerifierState.established.value),
            ).fetchall()
        return [row[0] for row in rows]

    def record_verdict(self, episode_id: str, verdict: VerifierVerdict) -> None:
        """rlide's verification of the end state: its verdict, and its reward as the episode's
        verified tests reward (in one transaction)."""
        now = time.time()
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "UPDATE verifiers SET verdict = ? WHERE episode_id = ?",
                (verdict.model_dump_json(), episode_id),
            )
            if verdict.reward is not None:
                cur.execute(
                    "INSERT INTO rewards (episode_id, source, value, comment, created_at, verified)"
                    " VALUES (?, ?, ?, ?, ?, 1)",
                    (episode_id, RewardSource.tests.value, float(verdict.reward), clip_text(verdict.line), now),
                )
            cur.execute("UPDATE episodes SET updated_at = ? WHERE id = ?", (now, episode_id))

    # -- flags ----------------------------------------------------------------------------------

    def add_flags(self, episode_id: str, flags: list[tuple[str, str | None, int | None, str]]) -> None:
        """The monitor's findings on an episode's change: (kind, path, line, detail) each."""
        now = time.time()
        with self.db.transaction(write=True) as cur:
            for kind, path, line, detail in flags:
                cur.execute(
                    "INSERT INTO episode_flags (episode_id, kind, path, line, detail, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (episode_id, kind, clip_text(path), line, clip_text(detail), now),
                )
            if flags:
                cur.execute("UPDATE episodes SET updated_at = ? WHERE id = ?", (now, episode_id))

    def flags(self, episode_id: str) -> list[Flag]:
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                "SELECT id, kind, path, line, detail, created_at, cleared_at, cleared_by FROM episode_flags"
                " WHERE episode_id = ? ORDER BY id",
                (episode_id,),
            ).fetchall()
        return [
            Flag(
                id=int(r[0]),
                episode_id=episode_id,
                kind=r[1],
                path=r[2],
                line=r[3],
                detail=r[4],
                created_at=at_epoch(r[5]),
                cleared_at=from_epoch(r[6]),
                cleared_by=r[7],
            )
            for r in rows
        ]

    def clear_flags(self, episode_id: str, *, author: str, comment: str | None = None) -> int:
        """A person looked at the flagged change and clears it for training; returns how many were
        cleared (recorded in the curation history with its author)."""
        who = check_author(author)
        check_episode_id(episode_id)
        now = time.time()
        with self.db.transaction(write=True) as cur:
            if cur.execute("SELECT 1 FROM episodes WHERE id = ?", (episode_id,)).fetchone() is None:
                raise EpisodeNotFound(episode_id)
            rows = cur.execute(
                "UPDATE episode_flags SET cleared_at = ?, cleared_by = ? WHERE episode_id = ? AND cleared_at IS NULL"
                " RETURNING id",
                (now, who, episode_id),
            ).fetchall()
            if rows:
                detail = {"author": who, "flags": len(rows), "comment": clip_text(comment)}
                record_curation(cur, episode_id, CurationAction.clear_flags, detail)
                cur.execute("UPDATE episodes SET updated_at = ? WHERE id = ?", (now, episode_id))
        return len(rows)

    def detail(self, episode_id: str) -> EpisodeDetail:
        episode = self.get_episode(episode_id)
        with self.db.transaction(write=False) as cur:
            step_rows = cur.execute(
                "SELECT id, tool, arguments, result_summary, error, duration_ms, created_at, blob_refs, result_digest"
                " FROM steps WHERE episode_id = ? ORDER BY id",
                (episode_id,),
            ).fetchall()
            refs = {r[0]: json.loads(r[7]) for r in step_rows if r[7] is not None}
            solution = cur.execute(
                "SELECT solution_digest FROM workspace_states WHERE episode_id = ? AND solution_digest IS NOT NULL"
                " ORDER BY id DESC LIMIT 1",
                (episode_id,),
            ).fetchone()
            wanted = {digest for step_refs in refs.values() for _, digest in step_refs}
            wanted |= {r[8] for r in step_rows if r[8] is not None} | ({solution[0]} if solution else set())
            blobs = _read_blobs(cur, wanted)
            reward_rows = cur.execute(
                "SELECT id, source, value, comment, created_at, verified FROM rewards WHERE episode_id = ? ORDER BY id",
                (episode_id,),
            ).fetchall()
        steps = [
            Step(
                id=r[0],
                episode_id=episode_id,
                tool=r[1],
                arguments=_arguments(episode_id, r[0], json.loads(r[2]), refs.get(r[0]), blobs),
                result_summary=r[3],
                result=r[3] if r[8] is None else blobs[r[8]],
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
                verified=bool(r[5]),
            )
            for r in reward_rows
        ]
        return EpisodeDetail(
            episode=episode,
            steps=steps,
            rewards=rewards,
            verifier=self.verifier(episode_id),
            flags=self.flags(episode_id),
            solution=blobs[solution[0]] if solution else None,
        )

    # -- workspace states: the agent's work ------------------------------------------------------

    def add_workspace_state(
        self,
        episode_id: str,
        kind: StateKind,
        *,
        commit: str,
        files: dict[str, str | None],
        omitted: list[str],
        diff: str,
        solution: str | None = None,
    ) -> int:
        """Record the served workspace at one moment of an episode (every text once per content,
        secrets redacted). Committed when this returns: a killed server keeps it."""
        check_episode_id(episode_id)
        blobs: dict[str, str] = {}

        def keep(text: str) -> str:
            digest, stored = _text_blob(redact_text(text))
            blobs[digest] = stored
            return digest

        manifest = {path: None if text is None else keep(text) for path, text in files.items()}
        row = (kind.value, commit, json_text(manifest), json_text(omitted), keep(diff))
        solution_digest = None if solution is None else keep(solution)
        with self.db.transaction(write=True) as cur:
            if cur.execute("SELECT 1 FROM episodes WHERE id = ?", (episode_id,)).fetchone() is None:
                raise EpisodeNotFound(episode_id)
            _put_blobs(cur, blobs)
            state = cur.execute(
                "INSERT INTO workspace_states (episode_id, kind, commit_id, files, omitted, diff_digest,"
                " solution_digest, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (episode_id, *row, solution_digest, time.time()),
            ).fetchone()
        return int(state[0])

    def workspace_states(self, episode_id: str) -> list[WorkspaceState]:
        """The episode's recorded workspace states, oldest first, with their texts."""
        check_episode_id(episode_id)
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                "SELECT id, kind, commit_id, files, omitted, diff_digest, solution_digest, created_at"
                " FROM workspace_states WHERE episode_id = ? ORDER BY id",
                (episode_id,),
            ).fetchall()
            manifests = [json.loads(r[3]) for r in rows]
            wanted = {d for m in manifests for d in m.values() if d} | {r[5] for r in rows}
            wanted |= {r[6] for r in rows if r[6]}
            blobs = _read_blobs(cur, wanted)
        return [
            WorkspaceState(
                id=r[0],
                episode_id=episode_id,
                kind=StateKind(r[1]),
                commit=r[2],
                files={path: None if d is None else blobs[d] for path, d in manifest.items()},
                omitted=json.loads(r[4]),
                diff=blobs[r[5]],
                solution=None if r[6] is None else blobs[r[6]],
                created_at=at_epoch(r[7]),
            )
            for r, manifest in zip(rows, manifests, strict=True)
        ]

    # -- curation: what a person does to the log ------------------------------------------------

    def delete_episode(self, episode_id: str, reason: str | None = None) -> None:
        """Delete an ended episode with its steps, rewards, turns and verifier, and every stored text
        no other step shares (a secret pasted into it is gone); the deletion itself is recorded."""
        episode = self.get_episode(episode_id)
        if not episode.status.is_terminal:
            raise StoreError(f"episode {episode_id} is open: end it (end_episode) or let it time out, then delete it")
        with self.db.transaction(write=True) as cur:
            digests: set[str] = set()
            for refs, result in cur.execute(
                "SELECT blob_refs, result_digest FROM steps WHERE episode_id = ?", (episode_id,)
            ).fetchall():
                digests |= {digest for _, digest in json.loads(refs or "[]")} | ({result} if result else set())
            for files, diff, solution in cur.execute(
                "SELECT files, diff_digest, solution_digest FROM workspace_states WHERE episode_id = ?", (episode_id,)
            ).fetchall():
                digests |= {d for d in json.loads(files).values() if d} | {diff} | ({solution} if solution else set())
            cur.execute("DELETE FROM episodes WHERE id = ?", (episode_id,))  # the rest cascades
            for digest in sorted(digests):
                if not _blob_in_use(cur, digest):
                    cur.execute("DELETE FROM blobs WHERE sha256 = ?", (digest,))
            record_curation(cur, episode_id, CurationAction.delete, {"task": episode.task[:200], "reason": reason})

    def relabel_episode(self, episode_id: str, status: EpisodeStatus, note: str | None = None) -> Episode:
        """Say how an ended episode really ended: its status, and an outcome reward to match (the
        latest outcome is the one that counts). A person says so: the same value is recorded as their
        rating too (evidence, which the agent's claims never move)."""
        if status not in OUTCOME_REWARD:
            raise ValueError(f"relabel to one of {', '.join(s.value for s in OUTCOME_REWARD)}, not {status.value}")
        episode = self.get_episode(episode_id)
        if not episode.status.is_terminal:
            raise StoreError(f"episode {episode_id} is open: end it with end_episode instead")
        comment = clip_text(f"relabelled {episode.status.value} -> {status.value}" + (f": {note}" if note else ""))
        now = time.time()
        with self.db.transaction(write=True) as cur:
            cur.execute("UPDATE episodes SET status = ?, updated_at = ? WHERE id = ?", (status.value, now, episode_id))
            for source, verified in ((RewardSource.outcome, 0), (RewardSource.feedback, 1)):
                cur.execute(
                    "INSERT INTO rewards (episode_id, source, value, comment, created_at, verified)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (episode_id, source.value, OUTCOME_REWARD[status], comment, now, verified),
                )
            detail = {"from": episode.status.value, "to": status.value, "note": clip_text(note)}
            record_curation(cur, episode_id, CurationAction.relabel, detail)
        return self.get_episode(episode_id)

    def exclude_episode(self, episode_id: str, *, excluded: bool = True, reason: str | None = None) -> Episode:
        """Keep an episode in the log but out of every export, replay and training step (or let it back in)."""
        self.get_episode(episode_id)
        action = CurationAction.exclude if excluded else CurationAction.include
        with self.db.transaction(write=True) as cur:
            cur.execute(
                "UPDATE episodes SET excluded = ?, updated_at = ? WHERE id = ?",
                (int(excluded), time.time(), episode_id),
            )
            record_curation(cur, episode_id, action, {"reason": clip_text(reason)})
        return self.get_episode(episode_id)

    def curation_log(self, episode_id: str | None = None) -> list[CurationEvent]:
        """What people did to the log, oldest first; of one episode (deleted ones included) if named."""
        where, params = ("WHERE episode_id = ?", (episode_id,)) if episode_id is not None else ("", ())
        with self.db.transaction(write=False) as cur:
            rows = cur.execute(
                f"SELECT id, episode_id, action, detail, created_at FROM curation {where} ORDER BY id", params
            ).fetchall()
        return [
            CurationEvent(
                id=r[0],
                episode_id=r[1],
                action=CurationAction(r[2]),
                detail=json.loads(r[3]),
                created_at=at_epoch(r[4]),
            )
            for r in rows
        ]

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

    def terminal_episodes(
        self, *, source: EpisodeSource | None = None, verified_only: bool | None = None, batch: int = 500
    ) -> list[Episode]:
        """Every ended episode not excluded by a person (oldest first), optionally of one source; what
        exporters, replays and the worker read. With `verified_only` (by default: unless the store was
        opened with `train_unverified`), only episodes with evidence (a measured tests reward or a
        person's rating) and no uncleared flag: claims alone never become training data. Replays ask
        for all: a replay is judged by rlide's own verifier, whatever the episode's reward."""
        where = "e.status <> 'open' AND e.excluded = 0" + (" AND e.source = ?" if source is not None else "")
        if not self.train_unverified if verified_only is None else verified_only:
            where += f" AND {TRAINABLE}"
        params: tuple[Any, ...] = (source.value,) if source is not None else ()
        out: list[Episode] = []
        offset = 0
        while True:
            with self.db.transaction(write=False) as cur:
                rows = cur.execute(
                    f"SELECT {EPISODE_COLUMNS} FROM episodes e WHERE {where} ORDER BY e.created_at, e.id"
                    " LIMIT ? OFFSET ?",
                    (*params, batch, offset),
                ).fetchall()
            out.extend(episode_from_row(r, self.weights) for r in rows)
            if len(rows) < batch:
                return out
            offset += batch
