"""Record types shared by every part of rlide: episodes, steps and rewards.

The MCP server writes them, the CLI shows them, the training worker reads them. They are
pydantic models because they cross process and storage boundaries.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class EpisodeStatus(StrEnum):
    open = "open"
    success = "success"
    failure = "failure"
    aborted = "aborted"
    timeout = "timeout"

    @property
    def is_terminal(self) -> bool:
        return self is not EpisodeStatus.open


class EpisodeSource(StrEnum):
    """Who acted: the IDE's own model (no tokens) or our student through the policy endpoint."""

    external = "external"
    policy = "policy"


class RewardSource(StrEnum):
    tests = "tests"
    """Evidence: rlide's run of the project's tests on the end state (verified)."""
    feedback = "feedback"
    """Evidence: a person's rating (the dashboard, `rlide episodes rate`)."""
    judge = "judge"
    outcome = "outcome"
    """A claim: how the agent says the episode ended."""
    self_rating = "self_rating"
    """A claim: an agent's rating of its own episode (`give_feedback`). Stored as an unverified
    `feedback` row (the log's schema knows four sources); a component of its own when combined."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def from_epoch(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def at_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class Episode(BaseModel):
    id: str
    task: str
    workspace: str | None = None
    client: str | None = None
    source: EpisodeSource = EpisodeSource.external
    status: EpisodeStatus = EpisodeStatus.open
    summary: str | None = None
    implicit: bool = Field(False, description="Created by the server for calls made outside any episode.")
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None = None
    step_count: int = Field(0, description="Tool calls recorded (through the MCP server).")
    turn_count: int = Field(0, description="Completions recorded through the policy endpoint (policy episodes).")
    reward_components: dict[RewardSource, float] = Field(
        default_factory=dict,
        description="The latest value of each reward component it has: tests (verified), outcome, feedback, judge.",
    )
    reward_total: float | None = Field(
        None,
        description="Reward in [-1, 1]: the weighted mean of its components (episodes.rewards); None without any.",
    )
    excluded: bool = Field(False, description="Excluded by a person: never exported, replayed or trained on.")
    verified: bool = Field(
        False,
        description="Its reward has evidence beyond claims: a tests reward rlide's verifier measured, or a "
        "person's rating. Without it, only its outcome and an agent's own rating speak for it: not trained on.",
    )
    flags: int = Field(0, description="Monitor flags no person has cleared yet: not trained on until cleared.")
    batch: str | None = Field(
        None, description="The agent run (`rlide agent run`) it is one attempt of: attempts at one start state."
    )
    batch_size: int | None = Field(None, description="How many attempts that agent run made.")


RECORDER_NOTES = frozenset({"commit", "repo", "changed"})
"""Keys the MCP server adds to a `run_tests` step's arguments (the workspace it ran on, for replays);
the tool itself takes none of them, so a conversation rebuilt for training leaves them out."""


class Step(BaseModel):
    id: int
    episode_id: str
    tool: str
    arguments: dict[str, Any]
    result_summary: str | None = None
    result: str | None = Field(None, description="The result whole, as the agent received it (secrets redacted).")
    error: str | None = None
    duration_ms: float
    created_at: datetime


class Reward(BaseModel):
    id: int
    episode_id: str
    source: RewardSource
    value: float = Field(ge=-1.0, le=1.0)
    comment: str | None = None
    created_at: datetime
    verified: bool = Field(
        False,
        description="Evidence, not a claim: a tests reward the episode's own verifier measured (fail-to-pass), "
        "or a person's rating (dashboard, CLI).",
    )


class VerifierState(StrEnum):
    pending = "pending"
    """The start state's run has not been made yet (or is running)."""
    established = "established"
    """FAIL_TO_PASS and PASS_TO_PASS are fixed from a complete run of the start state."""
    unavailable = "unavailable"
    """No verifier: no test configuration, no failing test at the start, or the start state's run
    crashed or hit a limit (`reason` says which)."""


class VerifierVerdict(BaseModel):
    """rlide's own run of the verifier on an episode's end state."""

    reward: float | None = Field(description="The verified tests reward it gave; None when it could not judge.")
    line: str = Field(description="What happened, for people and the agent.")
    still_failing: list[str] = Field(default_factory=list, description="FAIL_TO_PASS tests that do not pass.")
    broken: list[str] = Field(default_factory=list, description="PASS_TO_PASS tests that no longer pass.")
    authored_tests: list[str] = Field(
        default_factory=list, description="Test files the agent added or changed: shown, never the judge."
    )
    checked_at: datetime


class EpisodeVerifier(BaseModel):
    """What an episode's tests reward is judged by: the project's test command at the commit the
    episode started at, and the tests that failed on a run of its start state (FAIL_TO_PASS) and
    passed then (PASS_TO_PASS)."""

    command: str
    fail_to_pass: list[str] | None = None
    pass_to_pass: list[str] | None = None
    trusted_files: dict[str, str | None] = Field(
        default_factory=dict,
        description="The start commit's test files (None: must not exist): every judged run gets them back.",
    )
    state: VerifierState = VerifierState.established
    reason: str | None = Field(None, description="Why the verifier is unavailable, or who named it.")
    project: dict[str, Any] | None = Field(
        None, description="The project's test configuration (envpool.verifiers.project.ProjectTests as JSON)."
    )
    commit: str | None = Field(None, description="The commit its test files and configuration come from.")
    environment: str | None = Field(
        None, description="A fingerprint of the project's virtualenv at the start: a change is not trusted."
    )
    end_requested: bool = Field(False, description="The episode ended and its end state waits to be verified.")
    verdict: VerifierVerdict | None = None


class Flag(BaseModel):
    """Something in an episode's change a person should look at before it is trained on (the monitor:
    `envpool.verifiers.monitor`), or a reason not to trust its measurement."""

    id: int
    episode_id: str
    kind: str
    path: str | None = None
    line: int | None = None
    detail: str
    created_at: datetime
    cleared_at: datetime | None = None
    cleared_by: str | None = None


class StateKind(StrEnum):
    start = "start"
    run_tests = "run_tests"
    end = "end"


class WorkspaceState(BaseModel):
    """The served workspace at one moment of an episode: its commit and every file that differs from it."""

    id: int
    episode_id: str
    kind: StateKind
    commit: str = Field(description="HEAD's id; empty before a first commit.")
    files: dict[str, str | None] = Field(
        description="Each path that differs from the commit: its text, None if deleted."
    )
    omitted: list[str] = Field(description="Changed paths left out, with why (installed files, binary, too large).")
    diff: str = Field(description="The unified diff of `files` against the commit.")
    solution: str | None = Field(None, description="At the end: the diff from the episode's first state to this one.")
    created_at: datetime


class CurationAction(StrEnum):
    delete = "delete"
    relabel = "relabel"
    exclude = "exclude"
    include = "include"
    rate = "rate"
    prefer = "prefer"
    clear_flags = "clear_flags"


class CurationEvent(BaseModel):
    """What a person did to an episode (`rlide episodes delete|relabel|exclude|include|rate|prefer`,
    or the dashboard), kept after a deletion."""

    id: int
    episode_id: str
    action: CurationAction
    detail: dict[str, Any]
    created_at: datetime


class EpisodeDetail(BaseModel):
    episode: Episode
    steps: list[Step]
    rewards: list[Reward]
    verifier: EpisodeVerifier | None = None
    flags: list[Flag] = Field(default_factory=list, description="The monitor's flags, cleared or not.")
    solution: str | None = Field(
        None, description="The agent's work: the diff of the served workspace from its first state to its end state."
    )


class Verdict(StrEnum):
    """A person's choice between two episodes of one situation."""

    a = "a"
    b = "b"
    both_bad = "both_bad"


class Preference(BaseModel):
    """A human preference: which of two comparable episodes was better (or neither), by whom, when."""

    id: int
    episode_a: str
    episode_b: str
    verdict: Verdict
    author: str
    comment: str | None = None
    created_at: datetime

    @property
    def chosen_rejected(self) -> tuple[str, str] | None:
        """(better, worse), or None when both were bad."""
        if self.verdict is Verdict.a:
            return self.episode_a, self.episode_b
        if self.verdict is Verdict.b:
            return self.episode_b, self.episode_a
        return None


class EvalRecord(BaseModel):
    """One `rlide eval` report of a run's checkpoint, as the log keeps it."""

    id: int
    run: str
    step: int | None
    tasks: str = Field(description="The task set: humaneval-heldout, or a task file's name.")
    model: str
    n: int
    passed: int
    pass_at_1: float
    report: dict[str, Any]
    created_at: datetime
