"""rlide's pytest plugin: each test's outcome as pytest's own hooks saw it, for a verifier to read.

A test run's reward used to be read from the text of its output ("3 passed"), which the code under
test can print itself, and then from a report file, which the code under test can rewrite at exit.
This plugin is loaded into every pytest of a test run (`-p rlide_report`) from a folder the sandbox
mounts read-only (`envpool.sandbox.sites`), before any test module is imported, so before the code
under test. It writes two lines to the run's stdout through its own copy of the descriptor (taken
at import, before pytest captures anything), each behind the run's nonce:

    start    when the session starts: a session that starts and never finishes (`os._exit` at
             import, a test that kills its interpreter) leaves the run with no report
    finish   when it ends: every collected test's id and final outcome (passed, failed, error,
             skipped, xfailed, xpassed), the exit status, what of pytest was found replaced
             since this module was imported (pytest's runner and report functions), and the
             files of every hook implementation the run could have written (not read-only):
             the verifier accepts only trusted ones (a `conftest.py`, a tests folder), so a hook
             registered from the code under test, which could rewrite each report, is found

Lines already written cannot be taken back, and a verifier keeps the worst outcome any line gives a
test, so a line printed by the code under test can only add failures. The nonce leaves the
environment at import, so a test's own subprocesses do not report.

What it cannot do: a candidate's code runs in the same process and could, with intent, find this
module and its descriptor and write a finish line of its own. The verifier's other defences (tests
and configuration from the recorded start state, fail-to-pass) leave that as the way left; see
docs/rewards.md. Standard library and pytest only; never imported outside the sandbox.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import _pytest.python
import _pytest.reports
import _pytest.runner

MARK = "rlide-test-report"
_NONCE = os.environ.pop("RLIDE_NONCE", "")
_OUT = os.dup(1) if _NONCE else -1
_SESSION = uuid.uuid4().hex
_ROOT = os.getcwd()
_WATCHED = {
    "runner.call_and_report": (_pytest.runner, "call_and_report"),
    "runner.runtestprotocol": (_pytest.runner, "runtestprotocol"),
    "runner.CallInfo.from_call": (_pytest.runner.CallInfo, "from_call"),
    "reports.TestReport.from_item_and_call": (_pytest.reports.TestReport, "from_item_and_call"),
    "python.pytest_pyfunc_call": (_pytest.python, "pytest_pyfunc_call"),
    "python.Function.runtest": (_pytest.python.Function, "runtest"),
}
# What the owner holds itself (a classmethod object, not a fresh bound method each time).
_ORIGINAL = {name: vars(owner).get(attr) for name, (owner, attr) in _WATCHED.items()}
_outcomes: dict[str, str] = {}
_collected: list[str] = []


def _emit(event: str, **fields: Any) -> None:
    if _OUT < 0:
        return
    line = json.dumps({"session": _SESSION, "event": event, **fields})
    data = f"\n{MARK}:{_NONCE}:{line}\n".encode()
    while data:
        data = data[os.write(_OUT, data) :]


def pytest_sessionstart(session: Any) -> None:
    _emit("start")


def pytest_collection_finish(session: Any) -> None:
    _collected.extend(item.nodeid for item in session.items)


def pytest_runtest_logreport(report: Any) -> None:
    if report.when == "call":
        outcome = ("xpassed" if report.passed else "xfailed") if hasattr(report, "wasxfail") else report.outcome
    elif report.failed:  # setup or teardown
        outcome = "error"
    elif report.skipped:
        outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    else:
        return
    if _outcomes.get(report.nodeid) not in ("failed", "error"):
        _outcomes[report.nodeid] = outcome


def _tampered() -> list[str]:
    return [name for name, (owner, attr) in _WATCHED.items() if vars(owner).get(attr) is not _ORIGINAL[name]]


def _writable_hooks(config: Any) -> list[str]:
    """Where the hook implementations a run could have written come from: a path relative to the
    workspace when inside it, else absolute; "<name>" when a hook has no source file."""
    found: set[str] = set()
    for name in dir(config.hook):
        get_hookimpls = getattr(getattr(config.hook, name, None), "get_hookimpls", None)
        if get_hookimpls is None:
            continue
        for impl in get_hookimpls():
            code = getattr(impl.function, "__code__", None)  # never unwrapped: __wrapped__ is settable
            path = getattr(code, "co_filename", "")
            if not os.path.isabs(path):
                found.add(path or f"<{name}>")
            elif os.access(path, os.W_OK):  # read-only: pytest, the tools site, the project's venv
                inside = os.path.commonpath([_ROOT, path]) == _ROOT
                found.add(os.path.relpath(path, _ROOT) if inside else path)
    return sorted(found)


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    _emit(
        "finish",
        exitstatus=int(exitstatus),
        collected=_collected,
        outcomes=_outcomes,
        tampered=_tampered(),
        hooks=_writable_hooks(session.config),
    )
