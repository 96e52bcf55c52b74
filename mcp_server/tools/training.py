"""Training tools: what the background worker is doing. Reads the log only; never imports torch or art."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from episodes.db import StoreError
from mcp_server.state import app_state
from training.worker.status import TrainingStatus, read_status


async def training_status(
    ctx: Context[Any, Any],
    run: Annotated[str | None, Field(max_length=200, description="Run name; omit for the latest run.")] = None,
) -> TrainingStatus:
    """Report the training worker's state: current step, recent rewards, groups trained or skipped, and
    while a worker runs, what it is doing (rollouts sampled, tokens/s, optimizer steps, loss). A run
    whose worker process is gone reads `stopped (process N gone)`, never `training`."""
    state = app_state(ctx)
    try:
        return await state.recorder.run(read_status, state.store, run)
    except StoreError as exc:
        raise ToolError(str(exc)) from exc


TOOLS = ((training_status, ToolAnnotations(title="Training status", read_only_hint=True, open_world_hint=False)),)
