"""Streamable HTTP transport: loopback by default, a bearer token required anywhere else.

The MCP endpoint is `/mcp`; the dashboard (`mcp_server.dashboard`) is served beside it at `/`.
The token rule lives in `common.http_auth`, shared with the policy endpoint; the dashboard's cookie
and cross-site rules in `mcp_server.dashboard.guard`.
"""

from __future__ import annotations

from typing import Any

import structlog
import uvicorn

from common.http_auth import BearerAuth, check_bind
from common.http_auth import InsecureBind as HttpConfigError
from mcp_server.dashboard.app import guarded_app
from mcp_server.server import RlideServer
from mcp_server.settings import Settings

log = structlog.get_logger(__name__)

TOKEN_ENV = "RLIDE_HTTP_TOKEN"
MIB = 1024 * 1024


def build_http_app(server: RlideServer, settings: Settings) -> Any:
    token = settings.http_token.get_secret_value() if settings.http_token else None
    check_bind(settings.http_host, token, token_env=TOKEN_ENV)
    mcp_app = server.streamable_http_app(host=settings.http_host, max_request_body_size=settings.http_max_body_mb * MIB)
    return guarded_app(settings, list(mcp_app.routes), mcp_app.router.lifespan_context)


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


__all__ = ["BearerAuth", "HttpConfigError", "build_http_app", "run_app", "serve_http"]
