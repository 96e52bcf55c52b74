"""Episode recording: one middleware sees every `tools/call` and logs it as a step.

A call lands in the episode named by its `episode_id` argument, else the session's open episode,
else a new implicit one, so tools added later are recorded without knowing about episodes. The
step is committed before the result goes back to the client: an acknowledged call is on disk.
A tool adds what its call resolved to the step's recorded arguments with `note_step` (run_tests:
the commit its workspace files were at), so the log can re-check the call later.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import structlog
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver.exceptions import MCPServerError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from episodes.db import EpisodeNotFound, StoreBusy, StoreError
from episodes.records import EpisodeStatus
from episodes.store import EpisodeStore
from mcp_server.result_size import result_chars
from mcp_server.schema import argument_problems
from training.gateway.episode_keys import episode_of, is_episode_key

log = structlog.get_logger(__name__)

SELF_READS = frozenset({"list_episodes", "index_status", "training_status"})
"""Tools that read rlide's own state. Inside an episode they are steps like any other; outside one
they start no implicit episode: each listing would otherwise add an episode to the list it pages
through, and the log would fill with episodes of nothing but looking."""

_SESSION_STATE_KEY = "rlide.session"
_T = TypeVar("_T")
_STEP_NOTES: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("rlide_step_notes", default=None)


def note_step(**fields: Any) -> None:
    """Record `fields` with the arguments of the tool call in progress (nothing outside one)."""
    notes = _STEP_NOTES.get()
    if notes is not None:
        notes.update(fields)


def _connection(ctx: ServerRequestContext[Any, Any]) -> Any:
    # mcp 2.3 keeps the per-client Connection on the session privately; its `state` dict is the
    # SDK's documented per-connection scratch space. Pinned SDK version, so the attribute is stable.
    return getattr(ctx.session, "_connection", None)


def client_name(ctx: ServerRequestContext[Any, Any]) -> str | None:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    return getattr(info, "name", None)


@dataclass
class EpisodeRecorder:
    """Maps MCP sessions to their open episode and writes steps through the store."""

    store: EpisodeStore
    workspace: str | None = None
    """The served workspace: the episodes this server starts are in it unless start_episode names
    another, so a test run recorded with only a commit can be re-checked in that repository."""
    adopted: str | None = None
    """An episode started elsewhere (the policy endpoint's, for an agent run whose model is the
    student): every session's episode until one starts its own or ends it (`Settings.episode`). A
    session's end does not end it: whoever started it does."""
    _current: dict[str, str] = field(default_factory=dict)
    _last_ended: dict[str, str] = field(default_factory=dict)
    _process_key: str = field(default_factory=lambda: f"proc-{os.getpid()}-{uuid.uuid4().hex[:8]}")

    async def run(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run a blocking store call off the event loop (SQLite may wait on another writer)."""
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    def session_key(self, ctx: ServerRequestContext[Any, Any]) -> str:
        """A stable key for the client connection behind `ctx`.

        Handshake-era connections (stdio, stateful HTTP) live across requests, so the key is kept
        in the connection's state and its episodes are aborted when it closes. The 2026-07-28
        protocol has no connection: every request stands alone, so calls share one key per server
        process and per client name; such clients should pass `episode_id` explicitly.
        """
        conn = _connection(ctx)
        if conn is None or conn.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return f"{self._process_key}-{client_name(ctx) or 'client'}"
        key: str | None = conn.state.get(_SESSION_STATE_KEY)
        if key is None:
            key = conn.state[_SESSION_STATE_KEY] = "sess-" + uuid.uuid4().hex[:16]
            conn.exit_stack.push_async_callback(self.close_session, key, "the client disconnected")
        return key

    def current(self, session_key: str) -> str | None:
        return self._current.get(session_key) or self.adopted

    def bind(self, session_key: str, episode_id: str) -> None:
        self._current[session_key] = episode_id

    def unbind(self, episode_id: str) -> None:
        for key in [k for k, v in self._current.items() if v == episode_id]:
            del self._current[key]
        if episode_id == self.adopted:  # ended through this server: later calls go elsewhere
            self.adopted = None

    def ended(self, session_key: str, episode_id: str) -> None:
        """The session ended `episode_id`: feedback that follows without an id is about it."""
        self._last_ended[session_key] = episode_id

    def last_ended(self, session_key: str) -> str | None:
        return self._last_ended.get(session_key)

    async def close_session(self, session_key: str, reason: str) -> None:
        self._last_ended.pop(session_key, None)
        episode_id = self._current.pop(session_key, None)
        if episode_id is None or episode_id == self.adopted:
            return
        # Already ended elsewhere (or gone): nothing to abort.
        with contextlib.suppress(StoreError):
            await self.run(self.store.end_episode, episode_id, EpisodeStatus.aborted, f"aborted: {reason}")

    async def close_all(self, reason: str) -> None:
        for key in list(self._current):
            await self.close_session(key, reason)

    async def ensure_episode(self, ctx: ServerRequestContext[Any, Any], tool: str) -> str:
        """The session's open episode, creating an implicit one if there is none (for tools that
        attach a reward to the episode before the middleware records their step)."""
        key = self.session_key(ctx)
        return self.current(key) or await self._implicit_episode(key, tool, client_name(ctx))

    async def _implicit_episode(self, session_key: str, tool: str, client: str | None) -> str:
        episode = await self.run(
            self.store.start_episode,
            f"(implicit) tool calls outside an explicit episode, starting with {tool}",
            workspace=self.workspace,
            client=client,
            session_key=session_key,
            implicit=True,
        )
        self.bind(session_key, episode.id)
        return episode.id

    async def record(
        self,
        ctx: ServerRequestContext[Any, Any],
        *,
        tool: str,
        arguments: dict[str, Any],
        summary: str | None,
        error: str | None,
        duration_ms: float,
        before: str | None,
    ) -> None:
        """Write the step into the first episode that exists of: the explicit `episode_id`, the
        session's episode now (start_episode just bound one), the session's episode when the call
        began (end_episode just unbound it), else a new implicit episode."""
        key = self.session_key(ctx)
        explicit = arguments.get("episode_id")
        candidates = [explicit if isinstance(explicit, str) else None, self.current(key), before]
        targets = list(dict.fromkeys(c for c in candidates if c))
        step = functools.partial(
            self.store.add_step,
            tool=tool,
            arguments=arguments,
            result_summary=summary,
            error=error,
            duration_ms=duration_ms,
        )
        for episode_id in targets:
            try:
                await self._write(step, episode_id)
                return
            except EpisodeNotFound:
                continue
        if tool in SELF_READS:
            return  # outside any episode, a look at rlide's own state is no work of the agent's
        await self._write(step, await self._implicit_episode(key, tool, client_name(ctx)))

    async def _write(self, step: Callable[..., int], episode_id: str) -> None:
        """The hot path of every tool call: an uncontended SQLite write (~70 µs) is done in place,
        since a hop to a worker thread costs more than the write; a write that would wait for
        another writer (or any PostgreSQL write) goes to a thread, so the event loop never blocks."""
        try:
            step(episode_id, wait=False)
        except StoreBusy:
            await self.run(step, episode_id)


def adopted_episode(given: str | None, policy_token: str | None, store: EpisodeStore) -> str | None:
    """The open episode `Settings.episode` names (an episode key the policy endpoint minted, or an
    id), or None, with the reason logged, when it names none: the server then records as usual."""
    if given is None:
        return None
    episode_id = episode_of(given, policy_token) if is_episode_key(given) else given
    try:
        if episode_id is None:
            raise LookupError("it is not an api_key the policy endpoint minted under RLIDE_POLICY_TOKEN")
        status = store.get_episode(episode_id).status
        if status is not EpisodeStatus.open:
            raise LookupError(f"episode {episode_id} has ended ({status.value})")
    except (LookupError, EpisodeNotFound) as exc:
        log.error("episode_not_adopted", reason=f"RLIDE_EPISODE: {exc}", then="tool calls go to implicit episodes")
        return None
    return episode_id


def summarize(result: HandlerResult) -> tuple[str | None, str | None]:
    """(result, error) of a tools/call result, as text for the log."""
    if isinstance(result, BaseModel):
        data = result.model_dump(by_alias=True, exclude_none=True)
    elif isinstance(result, dict):
        data = result
    else:
        return None, None
    texts = [str(block.get("text", "")) for block in data.get("content") or [] if isinstance(block, dict)]
    # Whole, as the agent received it: the log keeps a head in the column and the rest once per content.
    text = "\n".join(t for t in texts if t)
    if data.get("isError"):
        return None, text or "error"
    return text or None, None


@dataclass
class RecordingMiddleware:
    recorder_of: Callable[[ServerRequestContext[Any, Any]], EpisodeRecorder]

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params or {}
        tool = params.get("name")
        arguments = params.get("arguments")
        tool_name = tool if isinstance(tool, str) else "(invalid)"
        args = arguments if isinstance(arguments, dict) else {"(invalid arguments)": repr(arguments)[:200]}
        recorder = self.recorder_of(ctx)
        before = recorder.current(recorder.session_key(ctx))
        notes: dict[str, Any] = {}  # shared, not copied, if the tool runs in a child context
        token = _STEP_NOTES.set(notes)
        started = time.perf_counter()
        try:
            result = await call_next(ctx)
        except BaseException as exc:
            # Protocol faults and cancellation: recorded (shielded, so a cancelled call is still
            # logged), then re-raised unchanged.
            with anyio.CancelScope(shield=True):
                await self._record(
                    recorder, ctx, tool_name, {**args, **notes}, None, f"{type(exc).__name__}: {exc}", started, before
                )
            raise
        finally:
            _STEP_NOTES.reset(token)
        summary, error = summarize(result)
        await self._record(recorder, ctx, tool_name, {**args, **notes}, summary, error, started, before)
        return result

    @staticmethod
    async def _record(
        recorder: EpisodeRecorder,
        ctx: ServerRequestContext[Any, Any],
        tool: str,
        args: dict[str, Any],
        summary: str | None,
        error: str | None,
        started: float,
        before: str | None,
    ) -> None:
        duration_ms = (time.perf_counter() - started) * 1000
        try:
            await recorder.record(
                ctx, tool=tool, arguments=args, summary=summary, error=error, duration_ms=duration_ms, before=before
            )
        except (StoreError, MCPServerError, OSError) as exc:
            # The agent's work must not fail because the log is unwritable; the operator hears of it.
            log.error("episode_step_not_recorded", tool=tool, error=str(exc))


@dataclass
class ResultSizeLimit:
    """Replaces an oversized tool result with an error telling the model how to ask for less.

    A backstop behind each tool's own limits: a result larger than the model's context helps no
    one, and some hosts drop the connection on very large messages.
    """

    max_chars_of: Callable[[ServerRequestContext[Any, Any]], int]

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/call" or not isinstance(result, dict):
            return result
        size = result_chars(result)
        limit = self.max_chars_of(ctx)
        if size <= limit:
            return result
        tool = (ctx.params or {}).get("name")
        message = (
            f"the result of {tool} is {size} characters, over this server's limit of {limit}: call it again asking "
            "for less (a smaller limit, a narrower query or path, or an offset)"
        )
        trimmed = {k: v for k, v in result.items() if k not in ("content", "structuredContent")}
        return {**trimmed, "content": [{"type": "text", "text": message}], "isError": True}


PAGED_METHODS = frozenset({"tools/list", "prompts/list", "resources/list", "resources/templates/list"})
"""Listings rlide answers in one page: it hands out no cursor, so any cursor sent is invalid."""


@dataclass
class ProtocolFaults:
    """Protocol errors that say what was wrong: the SDK answers a request before `initialize`, or
    with params that fail its schema, with -32602 and the bare message "Invalid request parameters",
    and ignores a pagination cursor it never issued (MCP: an invalid cursor is -32602)."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params or {}
        if ctx.method in PAGED_METHODS and params.get("cursor") is not None:
            raise MCPError(
                INVALID_PARAMS,
                f"invalid cursor {str(params['cursor'])[:80]!r}: {ctx.method} returns everything in one page"
                " (no nextCursor); call it again without a cursor",
            )
        try:
            return await call_next(ctx)
        except ValidationError as exc:
            raise MCPError(INVALID_PARAMS, argument_problems(exc, f"invalid params for {ctx.method}")) from None
        except MCPError as exc:
            conn = _connection(ctx)
            if exc.error.code != INVALID_PARAMS or exc.error.message != "Invalid request parameters":
                raise
            if conn is not None and not conn.initialize_accepted:
                raise MCPError(
                    INVALID_PARAMS,
                    f"{ctx.method} before initialize: send initialize, then notifications/initialized, first",
                ) from None
            raise MCPError(INVALID_PARAMS, f"invalid params for {ctx.method}: check them against its schema") from None
