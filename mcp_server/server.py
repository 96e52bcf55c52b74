"""Builds the rlide MCP server: tools, resources, the recording middleware and the lifespan."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import UnionType
from typing import Any, Union, get_args, get_origin

import anyio
import structlog
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types import Tool as MCPTool
from pydantic import ValidationError

from episodes.db import EpisodeNotFound
from episodes.records import EpisodeSource
from episodes.store import EpisodeStore
from mcp_server.execution import ExecutionHub, verification_hub
from mcp_server.logs import configure_logging
from mcp_server.middleware import (
    EpisodeRecorder,
    ProtocolFaults,
    RecordingMiddleware,
    ResultSizeLimit,
    adopted_episode,
)
from mcp_server.prompts import PROMPTS
from mcp_server.schema import argument_problems, inline_refs
from mcp_server.settings import Settings, load_settings
from mcp_server.state import AppState, app_state
from mcp_server.tools import episodes, execute, search, training
from mcp_server.transports.stdio import serve_stdio
from mcp_server.workspaces import WorkspaceHub

log = structlog.get_logger(__name__)

INSTRUCTIONS = """\
rlide records what you do as episodes so a model can learn from them.
1. Call start_episode(task) when you begin a task; keep its episode_id.
2. Use the other tools as needed: every call is recorded into the episode.
3. When a person tells you whether the result was good, call give_feedback(rating, comment).
4. Call end_episode(outcome) when the task is done (success), given up (failure) or dropped (aborted).
Calls made outside an episode are recorded into an implicit one."""


class _StringsStayStrings(FuncMetadata):
    """The SDK's argument pre-parsing, except for arguments that take a string.

    MCPServer json-decodes every string argument whose annotation is not exactly `str` (so that a
    host sending a list as a JSON string still works); an optional text (`str | None`) such as
    end_episode's summary "[1, 2]" then became a list and the call was refused. A text argument
    keeps the text it was sent."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        parsed = super().pre_parse_json(data)
        fields = self.arg_model.model_fields
        return {
            key: data[key] if key in fields and _takes_text(fields[key].annotation) else value
            for key, value in parsed.items()
        }


def _takes_text(annotation: Any) -> bool:
    return annotation is str or (get_origin(annotation) in (Union, UnionType) and str in get_args(annotation))


class _ArgumentsExplained(Tool):
    """A tool whose refused arguments read as one line per argument (`argument_problems`), not as
    the SDK's "Error executing tool X: N validation errors for XArguments" and a page of pydantic."""

    async def run(self, arguments: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().run(arguments, *args, **kwargs)
        except ToolError as exc:
            cause = exc.__cause__
            # Only the SDK's own argument check: a tool's ToolError about a request it built says more.
            if isinstance(cause, ValidationError) and cause.title == self.fn_metadata.arg_model.__name__:
                raise ToolError(argument_problems(cause, f"invalid arguments for {self.name}")) from cause
            raise


class RlideServer(MCPServer[AppState]):
    """MCPServer that publishes inlined schemas (no `$defs`/`$ref`), which every IDE host accepts,
    passes text arguments through as sent (`_StringsStayStrings`), refuses bad tool and prompt
    arguments in one line each, and reads stdio through `mcp_server.transports.stdio` (every line answered)."""

    async def get_prompt(self, name: str, *args: Any, **kwargs: Any) -> Any:
        # A caller's mistake is invalid params (-32602) saying which argument, not code 0 (or
        # -32603) with a traceback on stderr, which is what the SDK makes of it.
        prompt = self._prompt_manager.get_prompt(name)
        if prompt is None:
            known = ", ".join(p.name for p in self._prompt_manager.list_prompts())
            raise MCPError(INVALID_PARAMS, f"unknown prompt {name!r}: the prompts are {known}")
        arguments = (args[0] if args else kwargs.get("arguments")) or {}
        try:
            prompt.fn(**arguments)  # the prompt's validator (pydantic's validate_call) is its schema
        except ValidationError as exc:
            log.info("prompt_arguments_refused", prompt=name, arguments=sorted(arguments))
            raise MCPError(INVALID_PARAMS, argument_problems(exc, f"invalid arguments for prompt {name}")) from None
        return await super().get_prompt(name, *args, **kwargs)

    async def run_stdio_async(self) -> None:
        lowlevel = self._lowlevel_server
        await serve_stdio(lambda read, write: lowlevel.run(read, write, lowlevel.create_initialization_options()))

    def add_tool(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        # A docstring's own indentation is not the model's to read (every line after the first kept it).
        kwargs.setdefault("description", inspect.cleandoc(fn.__doc__ or ""))
        super().add_tool(fn, *args, **kwargs)
        name = kwargs.get("name") or fn.__name__
        tool = self._tool_manager.get_tool(name)
        assert tool is not None
        explained = _ArgumentsExplained.model_construct(**dict(tool))
        explained.fn_metadata = _StringsStayStrings.model_construct(**dict(tool.fn_metadata))
        self._tool_manager._tools[name] = explained  # the SDK builds the Tool; no hook to choose its class

    async def list_tools(self) -> list[MCPTool]:
        tools = await super().list_tools()
        return [
            tool.model_copy(
                update={
                    "input_schema": inline_refs(tool.input_schema),
                    "output_schema": None if tool.output_schema is None else inline_refs(tool.output_schema),
                }
            )
            for tool in tools
        ]


def build_server(settings: Settings | None = None) -> RlideServer:
    settings = settings or load_settings()
    if not structlog.is_configured():
        # structlog's default logger prints to stdout, which is the stdio transport's wire.
        configure_logging(settings)

    @asynccontextmanager
    async def lifespan(_: MCPServer[AppState]) -> AsyncIterator[AppState]:
        store = EpisodeStore.open(settings.episode_db_url, settings.weights)
        expired = store.expire_idle(settings.episode_idle_timeout_s, EpisodeSource.external)
        for episode_id in expired:  # its last recorded state is verified with what the last server left
            store.request_end_verification(episode_id)
        log.info("server_started", episode_log=settings.public_dict()["database_url"], expired_idle=len(expired))
        served = settings.served_workspace
        if served is None:
            log.warning("no_workspace_served", reason=settings.no_workspace_reason())
        adopted = adopted_episode(
            settings.episode.get_secret_value() if settings.episode else None,
            settings.policy_token.get_secret_value() if settings.policy_token else None,
            store,
        )
        recorder = EpisodeRecorder(store, workspace=str(served) if served is not None else None, adopted=adopted)
        workspaces = WorkspaceHub(settings)
        if settings.index_on_start:
            workspaces.index_in_background()
        execution = ExecutionHub(settings)
        verification = verification_hub(settings, store, execution)
        try:
            async with anyio.create_task_group() as background:
                verification.start(background)
                yield AppState(
                    settings=settings,
                    store=store,
                    recorder=recorder,
                    workspaces=workspaces,
                    execution=execution,
                    verification=verification,
                )
                background.cancel_scope.cancel()  # a run left pending is resumed by the next server
        finally:
            await recorder.close_all("the server stopped")
            await execution.close()
            await anyio.to_thread.run_sync(workspaces.close)
            store.close()

    from importlib.metadata import version

    server = RlideServer(
        "rlide",
        title="rlide",
        version=version("rlide"),
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        # Outermost first: the recorder logs the result the client actually receives.
        middleware=[
            ProtocolFaults(),
            RecordingMiddleware(lambda ctx: app_state(ctx).recorder),
            ResultSizeLimit(lambda ctx: app_state(ctx).settings.max_result_chars),
        ],
    )
    for fn, hints in (*episodes.TOOLS, *execute.TOOLS, *search.TOOLS, *training.TOOLS):
        server.add_tool(fn, annotations=hints, structured_output=True)
    for prompt, name, title in PROMPTS:
        server.prompt(name=name, title=title)(prompt)

    @server.resource(
        "episode://{episode_id}",
        name="episode",
        mime_type="application/json",
        description="One episode with its steps and rewards.",
    )
    async def episode_resource(episode_id: str, ctx: Context[Any, Any]) -> str:
        state = app_state(ctx)
        try:
            detail = await state.recorder.run(state.store.detail, episode_id)
        except EpisodeNotFound as exc:
            raise ResourceNotFoundError(f"{exc}; list_episodes shows valid ids") from exc
        return json.dumps(detail.model_dump(mode="json"), ensure_ascii=False)

    return server
