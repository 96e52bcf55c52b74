"""Malformed input for rlide's HTTP servers (the dashboard and the policy endpoint), one table for both:
bodies, path parameters and query strings a hostile caller sends. `throw` sends each to every route
of a server and returns the answers; the servers' tests assert that each is a clean 4xx (never a 5xx,
never a traceback) and that the episode log is unchanged.

`python -m tests.common.malformed` prints the count of inputs tried per server and their answers."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

JSON = "application/json"
DEEP = 100_000


@dataclass(frozen=True)
class Body:
    name: str
    content: bytes
    content_type: str = JSON


def _object(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


# A body every action of both servers would accept in shape, sent in ways it must not be accepted.
WELL_FORMED = {"task": "t", "outcome": "success", "reward": 1, "value": 1, "author": "a", "excluded": True}

BODIES: list[Body] = [
    Body("empty", b""),
    Body("truncated", b'{"task": "t", "outcome": '),
    Body("not JSON", b"task=t&outcome=success"),
    Body("array 100,000 deep", b"[" * DEEP + b"]" * DEEP),
    Body("object 100,000 deep", b'{"a":' * DEEP + b"1" + b"}" * DEEP),
    Body("object 1,000 deep", b'{"messages":' * 1_000 + b"1" + b"}" * 1_000),
    Body("invalid UTF-8", b'{"task": "\xff\xfe", "author": "\xc3"}'),
    Body("lone surrogate", b'{"task": "a\\ud800b", "author": "\\udfff"}'),
    Body("byte order mark", b"\xef\xbb\xbf" + _object(**WELL_FORMED)),
    Body("top level array", b"[1, 2, 3]"),
    Body("top level string", b'"success"'),
    Body("top level number", b"1"),
    Body("top level null", b"null"),
    Body("NaN", b'{"task": "t", "outcome": "success", "reward": NaN, "value": NaN, "author": "a"}'),
    Body("Infinity", b'{"task": "t", "outcome": "success", "reward": Infinity, "value": -Infinity, "author": "a"}'),
    Body(
        "number past a double", b'{"task": "t", "outcome": "success", "reward": 1e400, "value": 1e400, "author": "a"}'
    ),
    Body(
        "duplicate keys",
        b'{"task": "t", "outcome": "failure", "outcome": "success", "reward": -1, "reward": 1,'
        b' "value": -1, "value": 1, "author": "a", "author": "b", "excluded": false, "excluded": true}',
    ),
    Body(
        "wrong types",
        _object(task=5, outcome=1, reward="1", value="1", author=["a"], excluded="yes", messages={"a": 1}, client=7),
    ),
    Body("bool for a number", _object(task="t", outcome="success", reward=True, value=True, author="a", excluded=1)),
    Body("out of range", _object(task="t", outcome="success", reward=2, value=-7, author="a", verdict="c", n=1000)),
    Body("unknown fields only", _object(zzz=1)),
    Body("text/plain JSON", _object(**WELL_FORMED), "text/plain"),
    Body("form", b"task=t&outcome=success&reward=1&value=1&author=a", "application/x-www-form-urlencoded"),
    Body(
        "multipart",
        b"--x\r\nContent-Disposition: form-data; name=task\r\n\r\nt\r\n--x--\r\n",
        "multipart/form-data; boundary=x",
    ),
    Body("JSON-ish type", _object(**WELL_FORMED), "application/jsonx"),
]

BAD_IDS = [
    "ep_does_not_exist",
    "..%2F..%2Fetc%2Fpasswd",
    "%00",
    "%FF%FE",
    "%ED%A0%80",  # a lone surrogate, UTF-8-encoded
    "ep_" + "a" * 5_000,
    "ep_%F0%9F%92%A5",
    "'%20OR%201=1--",
]

BAD_QUERIES = [
    "limit=-1",
    "limit=abc",
    "limit=99999999999999999999999",
    "limit=1&limit=500",
    "offset=1e10",
    "offset=-5",
    "status=bogus",
    "source=%00",
    "since=yesterday",
    "until=2026-13-45T99:99",
    "min_reward=nan",
    "max_reward=inf",
    "excluded=maybe",
    "q=" + "x" * 5_000,
    "q=%FF%FE",
    "episode=%ED%A0%80",
]


@dataclass
class Answers:
    """What one server answered: per input kind, status counts; and every answer that was not a clean 4xx."""

    tried: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    bad: list[str] = field(default_factory=list)

    def record(self, what: str, status: int, text: str) -> None:
        self.tried += 1
        self.statuses[status] += 1
        if not 400 <= status < 500 or "Traceback" in text or 'File "' in text:
            self.bad.append(f"{what} -> {status}: {text[:200]}")

    def summary(self, server: str) -> str:
        counts = ", ".join(f"{status}: {n}" for status, n in sorted(self.statuses.items()))
        return f"{self.tried} malformed inputs tried on the {server}, answers: {counts}"


@dataclass(frozen=True)
class RouteSpec:
    """A route to throw input at: its path with `{id}` where an episode id goes, a body it accepts (None:
    it takes none; sent with each bad id, so that the id is what is wrong), and whether it reads a query."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    takes_query: bool = False


def _paths(spec: RouteSpec, good_id: str) -> Iterator[tuple[str, str]]:
    """(what, path): the route with a well-formed id, then with each bad one."""
    yield "", spec.path.replace("{id}", good_id)
    if "{id}" in spec.path:
        for bad in BAD_IDS:
            yield f" id={bad[:20]}", spec.path.replace("{id}", bad)


def throw(http: TestClient, routes: list[RouteSpec], good_id: str, headers: dict[str, str], huge: int) -> Answers:
    """Send every malformed input to every route (a body of `huge` bytes too); collect the answers."""
    answers = Answers()
    bodies = [*BODIES, Body("huge", b'{"task": "' + b"x" * huge + b'"}')]
    for spec in routes:
        for what, path in _paths(spec, good_id):
            if what:  # a bad path parameter, with a well-formed request otherwise
                response = http.request(spec.method, path, json=spec.body, headers=headers)
                answers.record(f"{spec.method} {path[:60]}", response.status_code, response.text)
                continue
            if spec.body is not None:
                for body in bodies:
                    response = http.request(
                        spec.method, path, content=body.content, headers={**headers, "content-type": body.content_type}
                    )
                    answers.record(f"{spec.method} {path} {body.name}", response.status_code, response.text)
            if spec.takes_query:
                for query in BAD_QUERIES:
                    response = http.request(spec.method, f"{path}?{query}", headers=headers)
                    answers.record(f"{spec.method} {path}?{query[:40]}", response.status_code, response.text)
    return answers


def db_snapshot(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of a SQLite episode log (read through its own connection)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}


if __name__ == "__main__":
    import subprocess
    import sys

    sys.exit(
        subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
             "tests/training/gateway/test_malformed.py", "tests/mcp_server/dashboard/test_malformed.py"]
        )
    )  # fmt: skip
