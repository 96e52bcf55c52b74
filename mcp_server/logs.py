"""Structured logs to stderr or a file, never stdout (stdout carries the stdio transport)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

from mcp_server.settings import Settings


def configure_logging(settings: Settings) -> None:
    stream: TextIO
    if settings.log_file is not None:
        settings.log_file.parent.mkdir(parents=True, exist_ok=True)
        stream = open(settings.log_file, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - lives as long as the process
    else:
        stream = sys.stderr
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if settings.log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level)
    # The SDK logs every anticipated ToolError at INFO; that is the model's business, not ours.
    logging.getLogger("mcp.server.mcpserver.server").setLevel(max(logging.WARNING, root.level))


def quiet_libraries() -> None:
    """The training libraries' chatter off, before they are imported: Hugging Face's progress bars
    ("Loading weights", "Writing model shards" on every checkpoint), their FutureWarnings about
    their own internals, and matplotlib's "generated new fontManager". A command's own progress and
    rlide's logs still go to stderr; `TRANSFORMERS_VERBOSITY` and the like, when set, win."""
    import os
    import warnings

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for module in ("transformers", "peft", "torch", "trl", "accelerate"):
        warnings.filterwarnings("ignore", category=FutureWarning, module=module)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
