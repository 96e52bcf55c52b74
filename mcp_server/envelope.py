"""What a JSON-RPC message must look like for an MCP server to take it, checked before the SDK sees
it: both transports (stdio lines, HTTP POST bodies) answer a JSON value that is no message with
one line and code -32600, where the SDK answered a page of pydantic errors or nothing."""

from __future__ import annotations

import json
from typing import Any


def envelope_problem(body: bytes) -> tuple[str | None, str | int | None]:
    """Why `body`, when it is JSON, is no JSON-RPC message an MCP server takes (None when it is one,
    or when it is not JSON at all), and the request id to answer with."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # nested too deep for Python's parser: not JSON it can take
        return None, None
    return message_problem(data)


def message_problem(data: Any) -> tuple[str | None, str | int | None]:
    """`envelope_problem` for JSON already parsed (the stdio reader parses each line once)."""
    if not isinstance(data, dict):
        return "Invalid Request: send one JSON-RPC message, a JSON object (batches are not supported)", None
    raw_id = data.get("id")
    request_id = (
        raw_id if isinstance(raw_id, str) or (isinstance(raw_id, int) and not isinstance(raw_id, bool)) else None
    )
    if data.get("jsonrpc") != "2.0":
        return 'Invalid Request: "jsonrpc" must be "2.0"', request_id
    if "method" in data:
        if not isinstance(data["method"], str) or not data["method"]:
            return 'Invalid Request: "method" must be a non-empty string', request_id
        if "id" in data and request_id is None:
            return 'Invalid Request: "id" must be a string or an integer', None
        if "params" in data and not isinstance(data["params"], dict):
            return 'Invalid Request: "params" must be an object', request_id
        return None, request_id
    if ("result" in data or "error" in data) and request_id is not None:
        return None, request_id  # a client's response to a server request
    return 'Invalid Request: a request needs a "method" (a response, an "id" and a "result" or "error")', request_id
