"""Bearer-token auth for rlide's HTTP servers: the MCP transport and the policy endpoint.

One rule for both: loopback binds may run without a token; any other bind address needs one, and
when a token is set every request must carry `Authorization: Bearer <token>`. It lives in `common`
(helpers with no domain knowledge) so that both servers import it without the front door depending
on `training` for it; it depends on nothing but starlette's ASGI types.

A refused request gets 401 with OpenAI's error shape, so the official OpenAI client (pointed at the
policy endpoint with `api_key=<token>`) raises `AuthenticationError`, and an MCP client gets the
same readable JSON.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""Bind addresses reachable only from this machine; the only ones allowed without a token."""


class InsecureBind(Exception):
    """A server was asked to listen off loopback without a bearer token."""


def requires_token(host: str) -> bool:
    return host not in LOOPBACK_HOSTS


def check_bind(host: str, token: str | None, *, token_env: str) -> None:
    """Refuse (InsecureBind) to serve on a non-loopback `host` without a token; `token_env` names the
    variable that sets it, so the message says exactly what to do."""
    if requires_token(host) and not token:
        raise InsecureBind(
            f"refusing to serve on {host}: any bind address other than loopback needs a bearer token."
            f" Set {token_env} (e.g. `export {token_env}=$(openssl rand -hex 32)`) or bind 127.0.0.1."
        )


def unauthorized_body(token_env: str) -> bytes:
    """The 401 body: OpenAI's error shape (`error.message`, `type`, `param`, `code`)."""
    return json.dumps(
        {
            "error": {
                "message": f"missing or wrong bearer token: send Authorization: Bearer ${token_env}",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        }
    ).encode()


class BearerAuth:
    """ASGI middleware: refuses every HTTP request whose `Authorization` header is not `Bearer <token>`
    (compared in constant time). Lifespan and other non-HTTP scopes pass through."""

    def __init__(self, app: ASGIApp, token: str, *, token_env: str) -> None:
        if not token:
            raise ValueError("BearerAuth needs a non-empty token")
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._body = unauthorized_body(token_env)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            supplied = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(supplied, self._expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(self._body)).encode()),
                            (b"www-authenticate", b'Bearer realm="rlide"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": self._body})
                return
        await self.app(scope, receive, send)


def protect(app: ASGIApp, token: str | None, *, token_env: str) -> ASGIApp:
    """`app` behind `BearerAuth` when a token is set, else `app` itself (loopback without a token)."""
    return BearerAuth(app, token, token_env=token_env) if token else app


__all__ = ["LOOPBACK_HOSTS", "BearerAuth", "InsecureBind", "check_bind", "protect", "requires_token"]
