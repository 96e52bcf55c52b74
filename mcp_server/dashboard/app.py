"""The local dashboard: a static page shipped in the package (no CDN, no build step) and its JSON API,
served by `rlide dashboard` alone or beside the MCP endpoint by `rlide serve --http`.

The page (`static/`) draws everything itself, charts included, and polls the API while it is
visible, so a run's new steps and a new episode appear without a reload.
"""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from common.http_auth import check_bind
from common.json_body import JsonBodyError, read_body
from episodes.store import EpisodeStore
from mcp_server.dashboard.api import DashboardApi
from mcp_server.dashboard.guard import TOKEN_ENV, HttpGuard, login_response, token_matches
from mcp_server.settings import Settings

STATIC = Path(__file__).parent / "static"
LOGIN_MAX_BYTES = 16 * 1024
"""Largest sign-in form read (a token and the page to return to)."""

_LOGIN = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>rlide: sign in</title>
<link rel="stylesheet" href="/static/app.css"></head><body class="login"><main>
<h1>rlide</h1><p>This dashboard needs the server's token (<code>$RLIDE_HTTP_TOKEN</code>).</p>
<form method="post" action="/login"><input type="hidden" name="next" value="{next}">
<label>Token <input type="password" name="token" autocomplete="current-password" autofocus></label>
<button type="submit">Sign in</button></form>{error}</main></body></html>"""


class Dashboard:
    """The dashboard's routes over one episode log (its own connection, closed by `close`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = EpisodeStore.open(settings.episode_db_url, settings.weights)
        self.api = DashboardApi(
            self.store,
            settings.home / "memory",
            str(settings.public_dict()["database_url"]),
            student=settings.training_base_model,
        )

    def routes(self, token: str | None) -> list[BaseRoute]:
        async def index(request: Request) -> Response:
            return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

        async def login(request: Request) -> Response:
            if request.method == "GET":
                return _login_page(request.query_params.get("next", "/"))
            try:
                form = parse_qs((await read_body(request, LOGIN_MAX_BYTES)).decode("utf-8", "replace"))
            except JsonBodyError as exc:
                return _login_page("/", str(exc), status=exc.status)
            supplied, target = form.get("token", [""])[0], form.get("next", ["/"])[0]
            if token is None:
                return RedirectResponse("/", 303)  # no token configured: nothing to sign in to
            if not token_matches(token, supplied):
                return _login_page(target, "That token is not this server's.", status=401)
            return login_response(token, target)

        return [
            Route("/", index),
            Route("/login", login, methods=["GET", "POST"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
            *self.api.routes(),
        ]

    def close(self) -> None:
        self.store.close()


def _login_page(target: str, error: str | None = None, *, status: int = 200) -> HTMLResponse:
    message = f'<p class="error">{html.escape(error)}</p>' if error else ""
    return HTMLResponse(_LOGIN.format(next=html.escape(target, quote=True), error=message), status)


def guarded_app(
    settings: Settings,
    extra_routes: list[BaseRoute] | None = None,
    inner_lifespan: Callable[[Any], AbstractAsyncContextManager[Any]] | None = None,
) -> HttpGuard:
    """The dashboard (and `extra_routes`: the MCP endpoint) behind `HttpGuard`; `inner_lifespan` runs
    inside the dashboard's own (the MCP session manager's). Refuses (`InsecureBind`) a non-loopback
    bind without a token, before anything is opened."""
    token = settings.http_token.get_secret_value() if settings.http_token else None
    check_bind(settings.http_host, token, token_env=TOKEN_ENV)
    dashboard = Dashboard(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            if inner_lifespan is None:
                yield
            else:
                async with inner_lifespan(app):
                    yield
        finally:
            dashboard.close()

    app = Starlette(routes=[*dashboard.routes(token), *(extra_routes or [])], lifespan=lifespan)
    return HttpGuard(
        app,
        token=token,
        token_env=TOKEN_ENV,
        bind_host=settings.http_host,
        max_mcp_body=settings.http_max_body_mb * 1024 * 1024,
    )
