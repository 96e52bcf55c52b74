"""`rlide dashboard`: the local web page over the episode log, training runs and code indexes."""

from __future__ import annotations

from typing import Annotated

import typer

from mcp_server.cli.common import fail, http_settings


def dashboard(
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1; any other needs a token).")] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Port (default 8765).")] = None,
    open_browser: Annotated[bool, typer.Option("--open", help="Open it in the browser once it listens.")] = False,
) -> None:
    """Serve the dashboard alone (`rlide serve --http` serves it too, at /, beside the MCP endpoint)."""
    settings = http_settings(host, port)
    from common.http_auth import InsecureBind
    from episodes.db import StoreError
    from mcp_server.dashboard.app import guarded_app
    from mcp_server.transports.http import run_app

    token = settings.http_token.get_secret_value() if settings.http_token else None
    try:
        app = guarded_app(settings)
    except (InsecureBind, StoreError) as exc:
        raise fail(str(exc)) from exc
    url = f"http://{settings.http_host}:{settings.http_port}/"
    typer.echo(f"dashboard: {url}", err=True)
    if open_browser:
        import threading
        import webbrowser
        from urllib.parse import quote

        # The token travels once in the link and is swapped for a cookie at the first request.
        link = url + (f"?token={quote(token)}" if token else "")
        threading.Timer(1.0, webbrowser.open, args=(link,)).start()
    run_app(app, settings, what="dashboard")
