"""Who may use the dashboard, and how a page on another site is kept from acting through it.

One ASGI middleware in front of everything `rlide serve --http` and `rlide dashboard` answer:

- `/mcp` keeps the MCP endpoint's rule (`common.http_auth`): with a token, `Authorization: Bearer`.
- The dashboard accepts the same bearer header or a cookie holding the token. A browser gets the
  cookie once, from `/login` (a form) or from `/?token=...` (the link `rlide dashboard --open`
  opens, as Jupyter does); the cookie is HttpOnly and SameSite=Strict, so no other site's request
  carries it. Without a token (loopback only: `check_bind` refuses anything else) there is no login.
- Every request that changes something must come from the page itself: a POST/DELETE needs the
  `X-Rlide-Request` header (a cross-origin page cannot set it without a CORS preflight, which this
  server never grants), an `Origin`, when sent, equal to the server's own, and no `Sec-Fetch-Site`
  naming another origin (`common.web_guard.cross_site_refusal`); the API reads a JSON body only
  under `Content-Type: application/json` (`common.json_body`). A form post from another origin
  fails on all of these.
- On a loopback bind the `Host` header must name loopback, so a DNS-rebinding page (evil.example
  resolved to 127.0.0.1) cannot read the API either (`common.web_guard.rebinding_refusal`).
- Every response, refusals and `/mcp` included, forbids framing and MIME sniffing
  (`common.web_guard.secured`), so no page can lay the dashboard under an overlay.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlencode

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from common.http_auth import LOOPBACK_HOSTS, unauthorized_body
from common.web_guard import cross_site_refusal, rebinding_refusal, secured
from mcp_server.envelope import envelope_problem

TOKEN_ENV = "RLIDE_HTTP_TOKEN"
"""The variable holding the token of `rlide serve --http` and `rlide dashboard`."""
COOKIE = "rlide_token"
ACTION_HEADER = "x-rlide-request"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PUBLIC_PATHS = frozenset({"/login", "/static/app.css"})
"""Reachable without the token: the login form and what it is drawn with."""


def is_mcp(path: str) -> bool:
    return path == "/mcp" or path.startswith("/mcp/")


class HttpGuard:
    """The dashboard's and the MCP endpoint's access rules (module docstring), as ASGI middleware."""

    def __init__(
        self, app: ASGIApp, *, token: str | None, token_env: str, bind_host: str, max_mcp_body: int | None = None
    ) -> None:
        self.app = app
        self.token = token or None
        self.token_env = token_env
        self.loopback_only = bind_host in LOOPBACK_HOSTS
        self.max_mcp_body = max_mcp_body

    def _bearer(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        return header.startswith("Bearer ") and token_matches(self.token, header[len("Bearer ") :])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = secured(send)
        request = Request(scope)
        refusal = self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        if is_mcp(request.url.path) and request.method == "POST":
            await self._checked_envelope(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _checked_envelope(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass an MCP POST on, unless its body is JSON but no JSON-RPC message: that is an invalid
        request (-32600) in one line, where the SDK answered invalid params (-32602) with a page of
        pydantic errors. Unparseable JSON stays the SDK's to answer (-32700)."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body.extend(message.get("body", b""))
            oversized = self._too_large(Request(scope), len(body))  # a body sent without its length
            if oversized is not None:
                await oversized(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        problem, request_id = envelope_problem(bytes(body))
        if problem is not None:
            error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32600, "message": problem}}
            await JSONResponse(error, 400)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _refusal(self, request: Request) -> Response | None:
        path = request.url.path
        if is_mcp(path):
            if self.token is not None and not self._bearer(request):
                return Response(
                    unauthorized_body(self.token_env),
                    401,
                    media_type="application/json",
                    headers={"www-authenticate": 'Bearer realm="rlide"'},
                )
            return self._too_large(request)
        rebound = rebinding_refusal(request.headers, loopback_only=self.loopback_only)
        if rebound is not None:
            return JSONResponse({"error": rebound}, 403)
        if request.method not in SAFE_METHODS:
            cross = self._cross_site(request, path)
            if cross is not None:
                return JSONResponse({"error": cross}, 403)
        if self.token is None or path in PUBLIC_PATHS or self._bearer(request):
            return None
        if token_matches(self.token, request.cookies.get(COOKIE)):
            return None
        if request.method == "GET" and not path.startswith("/api/"):
            if token_matches(self.token, request.query_params.get("token")):
                return login_response(self.token, request.url.remove_query_params("token"))
            return RedirectResponse("/login?" + urlencode({"next": path}), 303)
        return JSONResponse(
            {"error": f"sign in: send Authorization: Bearer ${self.token_env}, or open /login with that token"}, 401
        )

    def _too_large(self, request: Request, size: int | None = None) -> Response | None:
        """413 for an MCP request whose body (`size`, else as declared) is over the limit, naming the
        limit and its setting (the SDK's own check says only "Request body too large")."""
        declared = request.headers.get("content-length", "")
        size = size if size is not None else (int(declared) if declared.isdigit() else None)
        if self.max_mcp_body is None or size is None or size <= self.max_mcp_body:
            return None
        message = (
            f"request body of {size} bytes is over this server's limit of"
            f" {self.max_mcp_body // (1024 * 1024)} MiB (RLIDE_HTTP_MAX_BODY_MB): send fewer or smaller files"
            " per call, or raise the limit"
        )
        return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}, 413)

    @staticmethod
    def _cross_site(request: Request, path: str) -> str | None:
        """Why this state-changing request may come from another site (None: it is the page's own)."""
        cross = cross_site_refusal(request)
        if cross is not None:
            return cross
        if path != "/login" and request.headers.get(ACTION_HEADER) != "1":
            return f"actions need the {ACTION_HEADER.title()}: 1 header (the dashboard page sends it)"
        return None


def token_matches(expected: str | None, supplied: str | None) -> bool:
    """Whether `supplied` is the server's token (compared in constant time); never without one."""
    return expected is not None and supplied is not None and hmac.compare_digest(supplied, expected)


def login_response(token: str, to: URL | str) -> Response:
    """Redirect to `to` (a path on this server) with `token` kept in an HttpOnly, SameSite=Strict cookie."""
    target = to.path + (f"?{to.query}" if to.query else "") if isinstance(to, URL) else to
    response = RedirectResponse(target if target.startswith("/") and not target.startswith("//") else "/", 303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
    return response
