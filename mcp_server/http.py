"""Streamable HTTP transport: loopback by default, a bearer token required anywhere else.

The token rule and its middleware live in `common.http_auth`, shared with the policy endpoint.
"""

from __future__ import annotations

from typing import Any

import structlog
import uvicorn

from common.http_auth import BearerAuth, check_bind, protect
from common.http_auth import InsecureBind as HttpConfigError
from mcp_server.server import RlideServer
from mcp_server.settings import Settings

log = structlog.get_logger(__name__)

TOKEN_ENV = "RLIDE_HTTP_TOKEN"


def build_http_app(server: RlideServer, settings: Settings) -> Any:
    token = settings.http_token.get_secret_value() if settings.http_token else None
    check_bind(settings.http_host, token, token_env=TOKEN_ENV)
    app = server.streamable_http_app(host=settings.http_host)
    return protect(app, token, token_env=TOKEN_ENV)


def serve_http(server: RlideServer, settings: Settings) -> None:
    app = build_http_app(server, settings)
    log.info(
        "http_listening",
        url=f"http://{settings.http_host}:{settings.http_port}/mcp",
        auth="bearer" if settings.http_token else "none (loopback)",
    )
    # log_config=None: uvicorn must not install its own handlers (its access log writes to stdout).
    uvicorn.run(app, host=settings.http_host, port=settings.http_port, log_config=None, access_log=False, lifespan="on")


__all__ = ["BearerAuth", "HttpConfigError", "build_http_app", "serve_http"]
