"""Episode tools: start, end, rate and list the episodes that every tool call is recorded into."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
import structlog
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from episodes.db import EpisodeClosed, EpisodeNotFound
from episodes.records import (
    Episode,
    EpisodeStatus,
    EpisodeVerifier,
    RewardSource,
    StateKind,
    VerifierVerdict,
)
from mcp_server.middleware import client_name, note_step
from mcp_server.result_size import clip, fit_count
from mcp_server.state import AppState, app_state
from training.recording.capture import capture
from training.recording.verification_hub import describe_verifier
from training.scenarios.snapshots import GitSnapshots, Snapshot, SnapshotUnavailable

log = structlog.get_logger(__name__)

LISTED_TEXT_CHARS = 500
"""A listed episode's task and summary are cut to this: a listing is for choosing, not reading."""

EpisodeId = Annotated[
    str | None,
    Field(
        description="Episode id from start_episode. Omit to use this session's current episode.",
        max_length=64,
    ),
]


class StartEpisodeResult(BaseModel):
    episode_id: str = Field(description="Pass this as episode_id to end_episode and give_feedback.")
    task: str = Field(description="The task as recorded (its first lines, when long).")
    status: EpisodeStatus
    verifier: str | None = Field(
        None,
        description="The project's test command that rlide runs on the end state at end_episode (its verified "
        "reward), and its state; or why the episode has none.",
    )
    note: str | None = None


class EndEpisodeResult(BaseModel):
    episode: Episode
    outcome_reward: float | None = Field(
        None, description="Reward recorded for the outcome, if any: the agent's claim, not evidence."
    )
    verification: VerifierVerdict | None = Field(
        None, description="rlide's own run of the project's tests on the end state: the verified tests reward."
    )
    note: str | None = None


class FeedbackResult(BaseModel):
    episode_id: str
    reward_id: int
    value: float
    reward_total: float | None = Field(None, description="The episode's reward now (its components combined).")
    note: str = Field(description="How the rating counts.")


class ListEpisodesResult(BaseModel):
    episodes: list[Episode]
    next_offset: int | None = Field(None, description="Call again with offset=next_offset for more.")


def _brief(episode: Episode) -> Episode:
    """`episode` with its task and summary cut to LISTED_TEXT_CHARS: what a reply echoes or lists."""
    update = {"task": clip(episode.task, LISTED_TEXT_CHARS), "summary": clip(episode.summary, LISTED_TEXT_CHARS)}
    return episode.model_copy(update=update)


def _resolve(state: AppState, ctx: Context[Any, Any], episode_id: str | None, *, or_ended: bool = False) -> str:
    """`episode_id`, else the session's open episode, else (`or_ended`) the one it ended last."""
    if episode_id:
        return episode_id
    key = state.recorder.session_key(ctx.request_context)
    current = state.recorder.current(key) or (state.recorder.last_ended(key) if or_ended else None)
    if current is None:
        raise ToolError("this session has no open episode: pass episode_id, or call start_episode first")
    return current


async def start_episode(
    task: Annotated[str, Field(min_length=1, max_length=20_000, description="What the agent is trying to do.")],
    ctx: Context[Any, Any],
    workspace: Annotated[
        str | None, Field(max_length=4096, description="Workspace root (default: the workspace this server serves).")
    ] = None,
    test_command: Annotated[
        str | None,
        Field(
            max_length=10_000,
            description="The test command you expect to show the task done. The episode is verified by the "
            "project's own test command (shown in the result), never by one an agent names: a different command "
            "shows your progress in run_tests only.",
        ),
    ] = None,
) -> StartEpisodeResult:
    """Start an episode: the tool calls that follow in this session are recorded into it and rewarded.

    Call this when you begin a task; call end_episode when it is done. rlide runs the project's tests on
    the workspace as it is now (the tests that fail are the task) and again at end_episode (the verified
    reward)."""
    if not task.strip():
        raise ToolError("task is blank: describe in a sentence what you are about to do")
    state = app_state(ctx)
    if workspace is not None and not await anyio.to_thread.run_sync(_is_folder, workspace):
        served = state.settings.served_workspace
        raise ToolError(
            f"workspace {workspace!r} does not exist on this machine (or is not a folder): pass the project's"
            f" folder, or leave it out" + (f" to use the served workspace {served}" if served else "")
        )
    recorder = state.recorder
    key = recorder.session_key(ctx.request_context)
    note = None
    previous = recorder.current(key)
    if previous is not None:
        prior = await recorder.run(state.store.get_episode, previous)
        if prior.status is EpisodeStatus.open and prior.implicit:
            await recorder.run(
                state.store.end_episode, previous, EpisodeStatus.aborted, "superseded by an explicit episode"
            )
        elif prior.status is EpisodeStatus.open:
            note = f"episode {previous} is still open; end it with end_episode(episode_id={previous!r})"
    episode = await recorder.run(
        state.store.start_episode,
        task,
        workspace=workspace or recorder.workspace,
        client=client_name(ctx.request_context),
        session_key=key,
    )
    recorder.bind(key, episode.id)
    await recorder.run(capture, state.store, state.settings.served_workspace, episode.id, StateKind.start)
    verifier = await _begin_verifier(state, episode.id, workspace)
    if test_command is not None and test_command.strip() and verifier and test_command.strip() != verifier.command:
        named = f"the episode is verified by the project's `{verifier.command}`" if verifier.command else "not adopted"
        named_command = clip(test_command.strip(), LISTED_TEXT_CHARS)  # an echo, not a copy: it is 10,000 at most
        note = " ".join(filter(None, [note, f"test_command `{named_command}`: {named}; run it with run_tests"]))
    return StartEpisodeResult(
        episode_id=episode.id,
        task=clip(episode.task, LISTED_TEXT_CHARS) or "",
        status=episode.status,
        verifier=describe_verifier(verifier),
        note=note,
    )


def _is_folder(path: str) -> bool:
    try:
        return Path(path).expanduser().is_dir()
    except (OSError, RuntimeError, ValueError):  # too long; `~user` unknown; a NUL byte: no folder here
        return False


async def _begin_verifier(state: AppState, episode_id: str, workspace: str | None) -> EpisodeVerifier | None:
    """The project's verifier for a new episode of the served workspace (none for another folder,
    or one that is not a git working tree)."""
    root = state.settings.served_workspace
    if root is None or (workspace is not None and Path(workspace).expanduser().resolve() != root):
        return None
    try:
        start = await anyio.to_thread.run_sync(GitSnapshots().working_tree, root)
    except SnapshotUnavailable as exc:  # not a git working tree, too large to send: say so with the episode
        return await state.verification.refuse(episode_id, root, str(exc))
    return await state.verification.begin(episode_id, root, start)


async def end_episode(
    outcome: Annotated[
        Literal["success", "failure", "aborted"],
        Field(description="success: the task is done; failure: it could not be done; aborted: stopped early."),
    ],
    ctx: Context[Any, Any],
    episode_id: EpisodeId = None,
    summary: Annotated[str | None, Field(max_length=20_000, description="What was done, in a few lines.")] = None,
) -> EndEpisodeResult:
    """End an episode with its outcome; success and failure are recorded as rewards of +1 and -1."""
    state = app_state(ctx)
    target = _resolve(state, ctx, episode_id)
    status = EpisodeStatus(outcome)
    end: Snapshot | None = None
    try:
        # The end state first: the episode's solution is in the log before it says it ended.
        if (await state.recorder.run(state.store.get_episode, target)).status is EpisodeStatus.open:
            await state.recorder.run(capture, state.store, state.settings.served_workspace, target, StateKind.end)
            end = await _served_tree(state)
        reward = await state.recorder.run(state.store.end_with_outcome, target, status, summary)
    except EpisodeNotFound as exc:
        raise ToolError(f"{exc}: call list_episodes to see valid ids") from exc
    except EpisodeClosed as exc:
        raise ToolError(f"{exc}; start_episode begins a new one") from exc
    state.recorder.unbind(target)
    state.recorder.ended(state.recorder.session_key(ctx.request_context), target)
    verdict = await progress_while(ctx, lambda: state.verification.verify_end(target, end), "verifying the end state")
    note = None
    if verdict is None and (await state.recorder.run(state.store.verifier, target)) is not None:
        note = "the end state's verification did not run now (the sandbox failed); the next server start runs it"
    episode = await state.recorder.run(state.store.get_episode, target)
    if status is EpisodeStatus.success and (summary or not episode.implicit):
        # An implicit episode's task is a placeholder: only its summary can say what was solved.
        await _remember(state, target)
    return EndEpisodeResult(episode=_brief(episode), outcome_reward=reward, verification=verdict, note=note)


async def _served_tree(state: AppState) -> Snapshot | None:
    root = state.settings.served_workspace
    if root is None:
        return None
    try:
        return await anyio.to_thread.run_sync(GitSnapshots().working_tree, root)
    except SnapshotUnavailable:
        return None


_T = TypeVar("_T")


async def progress_while(
    ctx: Context[Any, Any], work: Callable[[], Awaitable[_T]], label: str, total: float | None = None
) -> _T:
    """Await `work`, telling the client each second that it goes on (long runs: a test suite), out of
    `total` seconds when there is a limit. Cancelling the call cancels the work."""
    done: list[_T] = []

    async def run() -> None:
        done.append(await work())
        tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        elapsed = 0
        while True:
            await anyio.sleep(1)
            elapsed += 1
            await ctx.report_progress(min(elapsed, total or elapsed), total, f"{label} ({elapsed}s)")
    return done[0]


async def _remember(state: AppState, episode_id: str) -> None:
    """A solved episode becomes a past solution that recall_solutions finds. Best effort: the
    episode is already ended and logged; a memory failure must not turn that into an error."""
    from memory.errors import RlideMemoryError

    detail = await state.recorder.run(state.store.detail, episode_id)
    try:
        await anyio.to_thread.run_sync(state.workspaces.remember, detail)
    except (RlideMemoryError, OSError) as exc:
        log.warning("solution_not_remembered", episode_id=episode_id, error=str(exc))


async def give_feedback(
    rating: Annotated[
        float,
        Field(
            ge=-1.0,
            le=1.0,
            allow_inf_nan=False,
            description="-1 (wrong or harmful) .. 0 (neutral) .. 1 (exactly right).",
        ),
    ],
    ctx: Context[Any, Any],
    episode_id: EpisodeId = None,
    comment: Annotated[str | None, Field(max_length=20_000, description="Why, in the rater's words.")] = None,
) -> FeedbackResult:
    """Record a verdict on one of this session's episodes (open or ended) as its feedback reward: what
    the person you work with said of the result. A rating sent by an agent is recorded as a claim, not
    evidence: a person's rating in the dashboard or CLI outranks it, and an episode is trained on only
    with evidence (its verified tests, a person's rating).

    Without episode_id: the session's open episode, else the one it ended last (feedback on a task
    just finished)."""
    state = app_state(ctx)
    key = state.recorder.session_key(ctx.request_context)
    target = _resolve(state, ctx, episode_id, or_ended=True)
    try:
        owner = await state.recorder.run(state.store.session_of, target)
    except EpisodeNotFound as exc:
        raise ToolError(f"{exc}: call list_episodes to see valid ids") from exc
    if owner != key and target != state.recorder.adopted:  # the run this server was started for is its own
        raise ToolError(
            f"episode {target} was not started in this session: an agent rates only its own session's episodes"
            " (a person rates any episode in the dashboard or with `rlide episodes rate`)"
        )
    if target != episode_id and target != state.recorder.current(key):
        note_step(episode_id=target)  # this call is a step of the ended episode it rates, not of a new one
    reward = await state.recorder.run(
        state.store.add_reward, target, RewardSource.feedback, rating, comment, verified=False
    )
    episode = await state.recorder.run(state.store.get_episode, target)
    note = "recorded as the agent's claim: a person's rating outranks it, and it never makes the episode verified"
    return FeedbackResult(
        episode_id=target, reward_id=reward.id, value=reward.value, reward_total=episode.reward_total, note=note
    )


async def list_episodes(
    ctx: Context[Any, Any],
    status: Annotated[
        Literal["open", "success", "failure", "aborted", "timeout"] | None, Field(description="Only this status.")
    ] = None,
    limit: Annotated[int, Field(ge=1, le=200, description="At most this many, newest first.")] = 20,
    offset: Annotated[int, Field(ge=0, le=1_000_000)] = 0,
) -> ListEpisodesResult:
    """List recorded episodes, newest first (tasks and summaries cut to their first lines: the
    episode://{id} resource has them whole). As many as fit the reply; next_offset gives the rest."""
    state = app_state(ctx)
    episodes = await state.recorder.run(
        state.store.list_episodes, status=EpisodeStatus(status) if status else None, limit=limit + 1, offset=offset
    )
    shown = [_brief(e) for e in episodes[:limit]]

    def first(n: int) -> ListEpisodesResult:
        more = n < len(shown) or len(episodes) > limit
        return ListEpisodesResult(episodes=shown[:n], next_offset=offset + n if more else None)

    return fit_count(first, state.settings.max_result_chars, len(shown))


TOOLS = (
    (start_episode, ToolAnnotations(title="Start episode", read_only_hint=False, destructive_hint=False)),
    (
        end_episode,
        ToolAnnotations(title="End episode", read_only_hint=False, destructive_hint=False, idempotent_hint=False),
    ),
    (give_feedback, ToolAnnotations(title="Give feedback", read_only_hint=False, destructive_hint=False)),
    (list_episodes, ToolAnnotations(title="List episodes", read_only_hint=True, open_world_hint=False)),
)
