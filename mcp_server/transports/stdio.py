"""The stdio transport's reader: every line a client writes gets an answer or reaches the server.

The SDK's stdio reader hands a line that is no JSON-RPC message to the server as an exception,
which answers nothing: a client that wrote a malformed line or a batch waited forever. Here each
line is checked first, as JSON-RPC 2.0 says: not JSON (or nested deeper than `MAX_JSON_DEPTH`, or
over `MAX_LINE_BYTES`) is a parse error (-32700), JSON that is no single JSON-RPC message (a batch:
recent MCP versions have none) an invalid request (-32600), both with id null when the line has no
usable id. The SDK's `stdio_server` still owns stdout (fd 1 diverted to stderr while serving).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, BinaryIO

import anyio
import structlog
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError

from common.json_depth import nests_deeper_than
from mcp_server.envelope import message_problem

log = structlog.get_logger(__name__)

MAX_JSON_DEPTH = 100
"""Deepest nesting of a message rlide parses: MCP messages nest a few levels, and Python's json
raises RecursionError (the SDK's parser refuses) somewhere past a few hundred."""
MAX_LINE_BYTES = 64 * 1024 * 1024
"""Longest stdio line read: a message over it is refused without being held in memory whole."""


def too_deep_message(limit: int = MAX_JSON_DEPTH) -> str:
    return f"Parse error: the JSON nests deeper than {limit} levels, which no MCP message needs"


def line_error(line: bytes) -> JSONRPCError | None:
    """The answer to a stdio line that is no JSON-RPC message (None: the line is one)."""
    if nests_deeper_than(line, MAX_JSON_DEPTH):
        return _error(None, PARSE_ERROR, too_deep_message())
    try:
        data = json.loads(line.decode())
    except ValueError as exc:  # UnicodeDecodeError included
        return _error(None, PARSE_ERROR, f"Parse error: the line is not JSON ({str(exc)[:200]})")
    problem, request_id = message_problem(data)
    return None if problem is None else _error(request_id, INVALID_REQUEST, problem)


def _error(request_id: str | int | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


class CheckedLines:
    """The client's lines as the SDK's stdio reader consumes them (`async for line in ...`), minus
    the ones answered here with an error (written through the transport's own writer, so frames
    never interleave)."""

    def __init__(self, wire: BinaryIO) -> None:
        self.wire = wire
        self.answers: MemoryObjectSendStream[SessionMessage] | None = None
        self.ready = anyio.Event()  # set with `answers`: the reader may start before the transport is up

    def answer_with(self, answers: MemoryObjectSendStream[SessionMessage]) -> None:
        self.answers = answers
        self.ready.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        while line := await anyio.to_thread.run_sync(self.wire.readline, MAX_LINE_BYTES + 1, abandon_on_cancel=True):
            if not line.strip():
                continue  # a blank line (a stray "\r\n") is no message
            error: JSONRPCError | None
            if len(line) > MAX_LINE_BYTES:
                await anyio.to_thread.run_sync(self._skip_rest, abandon_on_cancel=True)
                error = _error(None, INVALID_REQUEST, f"Invalid Request: a message over {MAX_LINE_BYTES} bytes")
            else:
                error = line_error(line)
            if error is None:
                yield line.decode()
                continue
            log.info("stdio_line_refused", code=error.error.code, bytes=len(line))
            await self.ready.wait()
            assert self.answers is not None
            await self.answers.send(SessionMessage(error))

    def _skip_rest(self) -> None:
        while (chunk := self.wire.readline(MAX_LINE_BYTES)) and not chunk.endswith(b"\n"):
            pass


async def serve_stdio(run: Callable[[Any, Any], Awaitable[None]]) -> None:
    """`run(read_stream, write_stream)` over this process's stdin and stdout, every line checked.

    stdin is claimed as the SDK claims it: the wire moves to a private descriptor and fd 0 reads
    the null device, so a child process (a sandbox, a worker) cannot eat the client's messages."""
    wire = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        lines = CheckedLines(wire)
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            lines.answer_with(write_stream)
            await run(read_stream, write_stream)
    finally:
        os.dup2(wire.fileno(), 0)
        wire.close()
