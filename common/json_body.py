"""Reading a JSON request body from a caller that may be hostile: rlide's HTTP servers (the dashboard's
API and the policy endpoint) read every body through `read_json`, so each refuses the same things the
same way, with a 4xx and a sentence saying what to send, before any handler sees the value.

Refused:

- a body under any media type other than `application/json` (415). A page on another site can post
  a form or `text/plain` without asking the server first (a CORS "simple request"); a JSON body
  forces a preflight, which these servers never grant. Real API clients (the OpenAI client, curl
  with `-H content-type`, agent scaffolds) send `application/json`.
- a body over the server's limit, as declared or as streamed (413).
- what is not JSON: invalid UTF-8, a lone surrogate, NaN or Infinity, a number too large for a
  double (orjson decodes, and refuses all of these without recursion: a body nested 100,000 deep
  is a 400, not Python's RecursionError).
- nesting deeper than `MAX_DEPTH`: handlers, pydantic, redaction and chat templates recurse in
  Python; real requests (a tool's JSON schema included) stay far below.
- an object that names one key twice, unless the caller opts out: `{"value": -1, "value": 1}`
  means one thing to a proxy that keeps the first and another to us.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.requests import Request

from common.json_depth import nests_deeper_than

MAX_DEPTH = 64
"""Deepest nesting of objects and lists accepted in a request body."""
JSON_MEDIA_TYPE = "application/json"


class JsonBodyError(ValueError):
    """A request body refused, with the HTTP status to answer (400, 413 or 415) and why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def is_json_media_type(content_type: str | None) -> bool:
    """Whether a Content-Type header names JSON (`application/json`, any parameters, any case)."""
    return (content_type or "").split(";", 1)[0].strip().lower() == JSON_MEDIA_TYPE


async def read_json(request: Request, max_bytes: int, *, unique_keys: bool = True) -> Any:
    """The request's body as JSON, read no further than `max_bytes`, or `JsonBodyError`."""
    if not is_json_media_type(request.headers.get("content-type")):
        raise JsonBodyError(f"send the body as JSON with the header Content-Type: {JSON_MEDIA_TYPE}", 415)
    return parse_json(await read_body(request, max_bytes), unique_keys=unique_keys)


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request's body, or `JsonBodyError` (413) past `max_bytes`, as declared or as streamed."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise JsonBodyError(_too_large(int(declared), max_bytes), 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise JsonBodyError(_too_large(size, max_bytes), 413)
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(body: bytes, *, unique_keys: bool = True) -> Any:
    """`body` decoded as strict JSON (module docstring), or `JsonBodyError` (400) saying why not."""
    if nests_deeper_than(body, MAX_DEPTH):
        raise JsonBodyError(f"the request body nests objects and lists more than {MAX_DEPTH} deep")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise JsonBodyError(f"the request body is not valid JSON: {exc}") from exc
    if unique_keys:
        # orjson keeps the last of two equal keys silently; the standard parser shows every pair.
        json.loads(body, object_pairs_hook=_unique_pairs)
    return value


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                break
            seen.add(key)
        raise JsonBodyError(f"the request body names the key {key!r} more than once in one object")
    return value


def _too_large(size: int, max_bytes: int) -> str:
    return f"the request body is {size} bytes or more; this endpoint takes at most {max_bytes}"


__all__ = ["MAX_DEPTH", "JsonBodyError", "is_json_media_type", "parse_json", "read_body", "read_json"]
