"""What rlide's HTTP servers refuse from web pages, in one place: the dashboard (with its login, in
`mcp_server.dashboard.guard`) and the policy endpoint (`ApiGuard`) both apply these rules.

A page in the user's browser can reach a loopback server: a local dev server on another port, or
any site after DNS rebinding (evil.example resolved to 127.0.0.1). So:

- `rebinding_refusal`: on a loopback bind the `Host` header must name loopback; a rebound page's
  requests carry its own host name.
- `cross_site_refusal`: an `Origin` other than the server's own, or `Sec-Fetch-Site` saying the
  request comes from another site (`cross-site`) or another origin of the same site (`same-site`:
  localhost:3000 to localhost:8766), is a page acting through the user's browser.
- `secured` (a `send` wrapper): every response forbids framing (`X-Frame-Options: DENY` and CSP
  `frame-ancestors 'none'`, merged into any CSP already sent), so no page can lay the dashboard
  under an overlay and have the user click it, and `X-Content-Type-Options: nosniff`.

Request bodies are the other half: `common.json_body` (JSON only under `application/json`, which a
page cannot send across origins without a preflight these servers never grant).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from common.http_auth import LOOPBACK_HOSTS

FRAME_ANCESTORS = "frame-ancestors 'none'"
SECURITY_HEADERS = ((b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"))
_SECURITY_HEADER_NAMES = frozenset(name for name, _ in SECURITY_HEADERS)
CROSS_SITE_FETCHES = frozenset({"cross-site", "same-site"})
"""`Sec-Fetch-Site` values of a request a page on another origin made (a browser sends `same-origin`
for the page's own requests and `none` for what the user typed or opened)."""


def host_name(host_header: str) -> str:
    """The name in a `Host` header, without its port (`[::1]:8765` -> `::1`)."""
    if host_header.startswith("["):
        return host_header[1 : host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def rebinding_refusal(headers: Headers, *, loopback_only: bool) -> str | None:
    """Why a request to a server bound to loopback (`loopback_only`) names another host (None: it
    does not, or the server is bound elsewhere and a bearer token guards it)."""
    if loopback_only and host_name(headers.get("host", "")) not in LOOPBACK_HOSTS:
        return "this server answers only to a loopback Host (127.0.0.1, localhost, [::1])"
    return None


def cross_site_refusal(request: Request) -> str | None:
    """Why `request` comes from a page on another origin (None: nothing says it does)."""
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    if origin is not None and origin != own:
        return f"cross-origin request refused (Origin {origin} is not {own})"
    if request.headers.get("sec-fetch-site") in CROSS_SITE_FETCHES:
        return "cross-site request refused (a page on another origin sent it)"
    return None


def _with_frame_ancestors(csp: bytes | None) -> bytes:
    if csp is None or not csp.strip():
        return FRAME_ANCESTORS.encode()
    if b"frame-ancestors" in csp.lower():
        return csp  # the response already says who may frame it
    return csp.rstrip(b"; ") + b"; " + FRAME_ANCESTORS.encode()


def secured(send: Send) -> Send:
    """`send` that adds the security headers (module docstring) to the response it starts."""

    async def send_secured(message: Message) -> None:
        if message["type"] == "http.response.start":
            kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _SECURITY_HEADER_NAMES]
            csp = next((v for k, v in kept if k.lower() == b"content-security-policy"), None)
            kept = [(k, v) for k, v in kept if k.lower() != b"content-security-policy"]
            headers = [*kept, *SECURITY_HEADERS, (b"content-security-policy", _with_frame_ancestors(csp))]
            message = {**message, "headers": headers}
        await send(message)

    return send_secured


class ApiGuard:
    """ASGI middleware for an API no web page has any business calling (the policy endpoint): every
    response carries the security headers (`secured`); on a loopback bind a foreign `Host` is refused; a request of
    any method from another origin is refused. `refuse(status, message)` writes the refusal in the
    API's own error shape. `bind_host` None: the app is not listening on a socket (served in-process),
    so there is no Host to check."""

    def __init__(self, app: ASGIApp, *, bind_host: str | None, refuse: Callable[[int, str], Response]) -> None:
        self.app = app
        self.loopback_only = bind_host in LOOPBACK_HOSTS
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = secured(send)
        request = Request(scope)
        refusal = rebinding_refusal(request.headers, loopback_only=self.loopback_only) or cross_site_refusal(request)
        if refusal is not None:
            await self.refuse(403, refusal)(scope, receive, send)
            return
        await self.app(scope, receive, send)


__all__ = [
    "ApiGuard",
    "cross_site_refusal",
    "host_name",
    "rebinding_refusal",
    "secured",
]
