"""Streamable HTTP transport: loopback by default, a bearer token required anywhere else.

The MCP endpoint is `/mcp`; the dashboard (`mcp_server.dashboard`) is served beside it at `/`.
The token rule lives in `common.http_auth`, shared with the policy endpoint; the dashboard's cookie
and cross-site rules in `mcp_server.dashboard.guard`. `McpWire`, outermost, keeps two faults of the
SDK's HTTP handling off the wire (see docs/upstream/mcp-python-sdk.md).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import structlog
import uvicorn
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import PARSE_ERROR, JSONRPCMessage
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from common.http_auth import InsecureBind as HttpConfigError
from common.json_depth import nests_deeper_than
from mcp_server.dashboard.app import guarded_app
from mcp_server.dashboard.guard import is_mcp
from mcp_server.server import RlideServer
from mcp_server.settings import Settings
from mcp_server.transports.stdio import MAX_JSON_DEPTH, too_deep_message

log = structlog.get_logger(__name__)

MIB = 1024 * 1024


class RecentEvents(EventStore):
    """The SSE events of the last `capacity` messages, kept in memory so a client whose stream
    dropped (a laptop lid, a proxy timeout) during a long run_tests reconnects with `Last-Event-ID`
    and gets what it missed. Event ids are one counter over all streams; the oldest events go first.
    A server restart forgets them (the client then retries the call)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._events: deque[tuple[int, StreamId, JSONRPCMessage | None]] = deque(maxlen=capacity)
        self._next = 0

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self._next += 1
        self._events.append((self._next, stream_id, message))
        return str(self._next)

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        if not last_event_id.isdigit():
            return None
        last = int(last_event_id)
        stream = next((s for n, s, _ in self._events if n == last), None)
        if stream is None:
            return None  # unknown, or too old: kept no longer
        for number, stream_id, message in list(self._events):
            if number > last and stream_id == stream and message is not None:
                await send_callback(EventMessage(message, str(number)))
        return stream


RETRY_MS = 2_000
"""The reconnection delay the server asks of a client whose stream dropped (SSE `retry:`)."""


REQUEST_CANCELLED = -32800


class McpWire:
    """For `/mcp` requests, in front of the guard and the SDK:

    - a body nested deeper than `MAX_JSON_DEPTH` is a parse error (-32700, HTTP 400): Python's json
      (the guard's envelope check) raised RecursionError on it, a 500 with a traceback. The body is
      looked at only as the inner app reads it, so a request refused for its token or its size is
      never read here.
    - a request the client cancelled gets no answer, as MCP says: the SDK's handshake-era transport
      ends its stream with a -32800 "Request cancelled" error, dropped here (the stream still ends).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_mcp(scope["path"]):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        too_deep = responded = False

        async def checked_receive() -> Message:
            nonlocal too_deep
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body", False) and nests_deeper_than(bytes(body), MAX_JSON_DEPTH):
                    too_deep = True
                    return {"type": "http.disconnect"}  # the inner app stops; the answer is ours
            return message

        async def quiet_send(message: Message) -> None:
            nonlocal responded
            responded = responded or message["type"] == "http.response.start"
            if message["type"] == "http.response.body" and _answers_a_cancelled_request(message.get("body", b"")):
                message = {**message, "body": b""}
            await send(message)

        await self.app(scope, checked_receive, quiet_send)
        if too_deep and not responded:
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": too_deep_message()}}
            await JSONResponse(error, 400)(scope, receive, send)


def _answers_a_cancelled_request(chunk: bytes) -> bool:
    """Whether `chunk` is an SSE event carrying a -32800 error (the SDK writes one event a chunk)."""
    if b"-32800" not in chunk:
        return False
    for line in chunk.splitlines():
        if line.startswith(b"data:"):
            try:
                data = json.loads(line[len(b"data:") :])
            except ValueError:
                return False
            error = data.get("error") if isinstance(data, dict) else None
            return isinstance(error, dict) and error.get("code") == REQUEST_CANCELLED
    return False


def build_http_app(server: RlideServer, settings: Settings) -> McpWire:
    mcp_app = server.streamable_http_app(
        host=settings.http_host,
        max_request_body_size=settings.http_max_body_mb * MIB,
        event_store=RecentEvents(),
        retry_interval=RETRY_MS,
    )
    return McpWire(guarded_app(settings, list(mcp_app.routes), mcp_app.router.lifespan_context))


def serve_http(server: RlideServer, settings: Settings) -> None:
    run_app(build_http_app(server, settings), settings, what="mcp")


def run_app(app: Any, settings: Settings, *, what: str) -> None:
    """Serve `app` with uvicorn on the settings' host and port, logging where (stderr only)."""
    base = f"http://{settings.http_host}:{settings.http_port}"
    log.info(
        "http_listening",
        url=f"{base}/mcp" if what == "mcp" else base,
        dashboard=f"{base}/",
        auth="bearer" if settings.http_token else "none (loopback)",
    )
    # log_config=None: uvicorn must not install its own handlers (its access log writes to stdout).
    uvicorn.run(app, host=settings.http_host, port=settings.http_port, log_config=None, access_log=False, lifespan="on")


__all__ = ["HttpConfigError", "McpWire", "build_http_app", "run_app", "serve_http"]
