"""The resources a running server shares between its tools, built once by the lifespan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from episodes.store import EpisodeStore
from mcp_server.execution import ExecutionHub
from mcp_server.middleware import EpisodeRecorder
from mcp_server.settings import Settings
from mcp_server.workspaces import WorkspaceHub
from training.recording.verification_hub import VerificationHub


@dataclass
class AppState:
    settings: Settings
    store: EpisodeStore
    recorder: EpisodeRecorder
    workspaces: WorkspaceHub
    execution: ExecutionHub
    verification: VerificationHub


def app_state(ctx: Context[Any, Any] | ServerRequestContext[Any, Any]) -> AppState:
    """The server's shared state, from a tool's `Context` or a middleware's request context."""
    request = ctx.request_context if isinstance(ctx, Context) else ctx
    state = request.lifespan_context
    if not isinstance(state, AppState):
        raise ToolError("the rlide server is not initialised yet; retry in a moment")
    return state
