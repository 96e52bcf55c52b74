"""Ordered, named schema migrations for the episode log, applied when a store opens.

Each migration runs once, inside the same write transaction that records it in `_migrations`, so
two processes opening a fresh log at once cannot both apply it. Never edit a migration that has
shipped: add a new one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from episodes.db import Cursor, Database, StoreError


@dataclass(frozen=True)
class Migration:
    name: str
    statements: tuple[str, ...]


_ID = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgresql": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"}

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "0001_episodes_steps_rewards",
        (
            """CREATE TABLE episodes (
                id TEXT PRIMARY KEY,
                task TEXT NOT NULL,
                workspace TEXT,
                client TEXT,
                status TEXT NOT NULL DEFAULT 'open'
                    CHECK (status IN ('open', 'success', 'failure', 'aborted', 'timeout')),
                summary TEXT,
                session_key TEXT,
                implicit INTEGER NOT NULL DEFAULT 0,
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL,
                ended_at DOUBLE PRECISION
            )""",
            "CREATE INDEX episodes_status_updated ON episodes (status, updated_at)",
            "CREATE INDEX episodes_created ON episodes (created_at)",
            """CREATE TABLE steps (
                id {id},
                episode_id TEXT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
                tool TEXT NOT NULL,
                arguments TEXT NOT NULL,
                result_summary TEXT,
                error TEXT,
                duration_ms DOUBLE PRECISION NOT NULL,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX steps_episode ON steps (episode_id, id)",
            """CREATE TABLE rewards (
                id {id},
                episode_id TEXT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
                source TEXT NOT NULL CHECK (source IN ('tests', 'feedback', 'judge', 'outcome')),
                value DOUBLE PRECISION NOT NULL CHECK (value >= -1 AND value <= 1),
                comment TEXT,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX rewards_episode ON rewards (episode_id, id)",
        ),
    ),
    # Training needs to tell the IDE's own model (external) from our student (policy).
    Migration(
        "0002_episode_source",
        (
            "ALTER TABLE episodes ADD COLUMN source TEXT NOT NULL DEFAULT 'external'"
            " CHECK (source IN ('external', 'policy'))",
            "CREATE INDEX episodes_source_status ON episodes (source, status)",
        ),
    ),
    # Policy episodes: every completion our student produced, with the exact sampled tokens and
    # logprobs (RL needs them), plus the training worker's cursor, its per-step history and the
    # groups it has consumed (so a restarted worker resumes at the right step and never trains twice).
    Migration(
        "0003_policy_turns_and_training",
        (
            """CREATE TABLE policy_turns (
                id {id},
                episode_id TEXT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
                model TEXT NOT NULL,
                checkpoint_step INTEGER,
                request TEXT NOT NULL,
                choice TEXT NOT NULL,
                prompt_token_ids TEXT,
                completion_token_ids TEXT,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX policy_turns_episode ON policy_turns (episode_id, id)",
            """CREATE TABLE training_runs (
                name TEXT PRIMARY KEY,
                backend TEXT NOT NULL,
                base_model TEXT NOT NULL,
                step INTEGER NOT NULL DEFAULT 0,
                state TEXT NOT NULL DEFAULT 'idle',
                message TEXT,
                config TEXT,
                groups_trained INTEGER NOT NULL DEFAULT 0,
                groups_skipped_zero_variance INTEGER NOT NULL DEFAULT 0,
                groups_skipped_stale INTEGER NOT NULL DEFAULT 0,
                created_at DOUBLE PRECISION NOT NULL,
                updated_at DOUBLE PRECISION NOT NULL
            )""",
            """CREATE TABLE training_steps (
                run TEXT NOT NULL REFERENCES training_runs (name) ON DELETE CASCADE,
                step INTEGER NOT NULL,
                reward_mean DOUBLE PRECISION,
                reward_std DOUBLE PRECISION,
                groups_trained INTEGER NOT NULL,
                groups_skipped_zero_variance INTEGER NOT NULL,
                groups_skipped_stale INTEGER NOT NULL,
                metrics TEXT,
                created_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (run, step)
            )""",
            """CREATE TABLE training_groups (
                run TEXT NOT NULL REFERENCES training_runs (name) ON DELETE CASCADE,
                group_key TEXT NOT NULL,
                step INTEGER NOT NULL,
                outcome TEXT NOT NULL CHECK (outcome IN ('trained', 'zero_variance', 'stale')),
                created_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (run, group_key)
            )""",
        ),
    ),
    # SFT on the IDE's own successful episodes: which external episodes each run has imitated (the
    # worker's SFT cursor: each episode is used once, across restarts), and why a run's backend
    # skipped them when it has no supervised step.
    Migration(
        "0004_sft_cursor",
        (
            """CREATE TABLE training_sft_episodes (
                run TEXT NOT NULL REFERENCES training_runs (name) ON DELETE CASCADE,
                episode_id TEXT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
                step INTEGER NOT NULL,
                outcome TEXT NOT NULL CHECK (outcome IN ('trained', 'unusable')),
                created_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (run, episode_id)
            )""",
            "ALTER TABLE training_runs ADD COLUMN sft_skipped INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE training_runs ADD COLUMN sft_skip_reason TEXT",
        ),
    ),
    # Self-play on scenarios from the log: how many picked scenarios a run had to skip because their
    # verifier could not run (repository gone, commit missing, no runner), and the latest reason.
    Migration(
        "0005_unavailable_scenarios",
        (
            "ALTER TABLE training_runs ADD COLUMN scenarios_unavailable INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE training_runs ADD COLUMN scenario_unavailable_reason TEXT",
        ),
    ),
    # A policy turn stores what it adds to an earlier turn of its episode instead of the whole
    # conversation again: without this an agent's log grew with the square of its length (each turn
    # repeated every message and prompt id before it). `episodes.policy_turns.TurnPrefix` says what
    # the columns mean; rows without a prefix (all rows written before this) are whole.
    Migration(
        "0006_policy_turn_prefixes",
        (
            "ALTER TABLE policy_turns ADD COLUMN prefix_turn_id BIGINT",
            "ALTER TABLE policy_turns ADD COLUMN prefix_messages INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE policy_turns ADD COLUMN prefix_tokens INTEGER NOT NULL DEFAULT 0",
        ),
    ),
    # A step stores each long string of its arguments (the workspace files an agent sends with
    # every run_tests) once per content, in `blobs`; `steps.blob_refs` says where they go back
    # (`episodes.codec.split_blobs`). Steps without refs (all steps written before this) are whole.
    Migration(
        "0007_step_blobs",
        (
            "CREATE TABLE blobs (sha256 TEXT PRIMARY KEY, text TEXT NOT NULL)",
            "ALTER TABLE steps ADD COLUMN blob_refs TEXT",
        ),
    ),
    # Rewards that can be trusted: a tests reward is `verified` when the episode's own verifier
    # judged it (fail-to-pass, from a structured test report); every tests reward written before
    # (a pass share read from printed output) stays unverified and no longer counts. An episode's
    # verifier: the command of its first failing run_tests (or the one named at start_episode),
    # the tests that failed then (FAIL_TO_PASS) and passed (PASS_TO_PASS), as JSON lists, and the
    # test and configuration files of that run (JSON: path -> text), which its later runs get back.
    Migration(
        "0008_verified_rewards",
        (
            "ALTER TABLE rewards ADD COLUMN verified INTEGER NOT NULL DEFAULT 0",
            """CREATE TABLE verifiers (
                episode_id TEXT PRIMARY KEY REFERENCES episodes(id) ON DELETE CASCADE,
                command TEXT NOT NULL,
                fail_to_pass TEXT,
                pass_to_pass TEXT,
                trusted_files TEXT,
                created_at DOUBLE PRECISION NOT NULL
            )""",
        ),
    ),
    Migration(
        "0009_curation",
        (
            "ALTER TABLE episodes ADD COLUMN excluded INTEGER NOT NULL DEFAULT 0",
            # No foreign key: a deleted episode's record outlives it.
            """CREATE TABLE curation (
                id {id},
                episode_id TEXT NOT NULL,
                action TEXT NOT NULL,
                detail TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX curation_episode ON curation (episode_id)",
        ),
    ),
    # The agent's work: a tool result kept whole (the text in `blobs`, the column keeps a head), and
    # the served workspace at start_episode, each run_tests and end_episode: its commit and the files
    # that differ from it (path -> blob digest, null when deleted), the diff against the commit, and
    # at the end the episode's solution (the diff from its first state).
    Migration(
        "0010_workspace_states",
        (
            "ALTER TABLE steps ADD COLUMN result_digest TEXT",
            """CREATE TABLE workspace_states (
                id {id},
                episode_id TEXT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
                kind TEXT NOT NULL,
                commit_id TEXT NOT NULL,
                files TEXT NOT NULL,
                omitted TEXT NOT NULL,
                diff_digest TEXT NOT NULL,
                solution_digest TEXT,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX workspace_states_episode ON workspace_states (episode_id, id)",
        ),
    ),
    # Why the worker set an external episode aside (no conversation, longer than the trainer's
    # max_seq_len, nothing to learn from): `rlide train status` shows it, not only a log line.
    Migration("0011_sft_skip_reason", ("ALTER TABLE training_sft_episodes ADD COLUMN reason TEXT",)),
    # The run's DPO cursor: each preference pair (chosen episode, rejected episode) is used once.
    Migration(
        "0012_dpo_cursor",
        (
            """CREATE TABLE training_dpo_pairs (
                run TEXT NOT NULL REFERENCES training_runs (name) ON DELETE CASCADE,
                chosen TEXT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
                rejected TEXT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
                step INTEGER NOT NULL,
                outcome TEXT NOT NULL CHECK (outcome IN ('trained', 'unusable')),
                reason TEXT,
                created_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (run, chosen, rejected)
            )""",
        ),
    ),
    # A person comparing two episodes of one situation (the dashboard's "compare", `rlide episodes
    # prefer`): which was better, or both bad; DPO uses these before reward-margin pairs. And each
    # `rlide eval` report, so the dashboard charts pass@1 over a run's checkpoints.
    Migration(
        "0013_preferences_evals",
        (
            """CREATE TABLE preferences (
                id {id},
                episode_a TEXT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
                episode_b TEXT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
                verdict TEXT NOT NULL CHECK (verdict IN ('a', 'b', 'both_bad')),
                author TEXT NOT NULL,
                comment TEXT,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX preferences_a ON preferences (episode_a)",
            "CREATE INDEX preferences_b ON preferences (episode_b)",
            """CREATE TABLE evals (
                id {id},
                run TEXT NOT NULL,
                step INTEGER,
                tasks TEXT NOT NULL,
                model TEXT NOT NULL,
                n INTEGER NOT NULL,
                passed INTEGER NOT NULL,
                pass_at_1 DOUBLE PRECISION NOT NULL,
                report TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL
            )""",
            "CREATE INDEX evals_run ON evals (run, id)",
            "CREATE INDEX episodes_source_created ON episodes (source, created_at)",
            # Other attempts at the same task (the dashboard's "compare with"): a lookup, not a scan.
            "CREATE INDEX episodes_task ON episodes (task)",
        ),
    ),
    # The verifier comes from the project, not from the agent's first run: its state (pending until
    # rlide ran the start state itself, then established or unavailable, with why), the project's
    # test configuration (JSON), the commit its test files come from, a fingerprint of the project's
    # virtualenv, whether the end state waits to be verified, and that verification's verdict (JSON).
    # And the monitor's flags on an episode's change, which a person clears.
    Migration(
        "0014_project_verifiers",
        (
            "ALTER TABLE verifiers ADD COLUMN state TEXT",
            "ALTER TABLE verifiers ADD COLUMN reason TEXT",
            "ALTER TABLE verifiers ADD COLUMN project TEXT",
            "ALTER TABLE verifiers ADD COLUMN commit_id TEXT",
            "ALTER TABLE verifiers ADD COLUMN environment TEXT",
            "ALTER TABLE verifiers ADD COLUMN end_requested INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE verifiers ADD COLUMN verdict TEXT",
            """CREATE TABLE episode_flags (
                id {id},
                episode_id TEXT NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
                kind TEXT NOT NULL,
                path TEXT,
                line INTEGER,
                detail TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                cleared_at DOUBLE PRECISION,
                cleared_by TEXT
            )""",
            "CREATE INDEX episode_flags_episode ON episode_flags (episode_id)",
        ),
    ),
    # The attempts of one `rlide agent run`: N agents at the same start state, which form one GRPO
    # group of their own size once all N have ended.
    Migration(
        "0015_attempt_batches",
        (
            "ALTER TABLE episodes ADD COLUMN batch TEXT",
            "ALTER TABLE episodes ADD COLUMN batch_size INTEGER",
        ),
    ),
)


def _ensure_table(cur: Cursor) -> None:
    cur.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")


def applied(db: Database) -> list[str]:
    with db.transaction(write=True) as cur:
        _ensure_table(cur)
        return [row[0] for row in cur.execute("SELECT name FROM _migrations ORDER BY name").fetchall()]


def migrate(db: Database, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[str]:
    """Apply every migration not yet recorded; return the names applied now."""
    done_now: list[str] = []
    with db.transaction(write=True) as cur:
        if db.dialect == "postgresql":
            # Serialise concurrent openers; SQLite's BEGIN IMMEDIATE already does.
            cur.execute("SELECT pg_advisory_xact_lock(7316081)")
        _ensure_table(cur)
        seen = {row[0] for row in cur.execute("SELECT name FROM _migrations").fetchall()}
        known = {m.name for m in migrations}
        unknown = seen - known
        if unknown:
            raise StoreError(
                f"the episode log at {db.url} was written by a newer rlide (migrations {sorted(unknown)}):"
                " upgrade rlide"
            )
        for migration in migrations:
            if migration.name in seen:
                continue
            for statement in migration.statements:
                cur.execute(statement.replace("{id}", _ID[db.dialect]))
            cur.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (migration.name, time.time()))
            done_now.append(migration.name)
    return done_now
