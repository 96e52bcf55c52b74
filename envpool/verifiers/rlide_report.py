"""rlide's pytest plugin: each test's outcome as pytest's own hooks saw it, for a verifier to read.

A test run's reward used to be read from the text of its output ("3 passed"), which the code under
test can print itself. This plugin (loaded with `-p rlide_report`, from a folder of the run the
candidate's patch may not touch) appends, at the end of each pytest session, one JSON line to
`$RLIDE_REPORT`: every collected test's id and final outcome (passed, failed, error, skipped,
xfailed, xpassed), the session's exit status, and what of pytest was found replaced since the
plugin was imported (before any test module, so before the code under test): pytest's runner and
report functions. No
session (an `os._exit` at import, a command that runs no pytest) means no line: no report.

What it cannot do: a candidate's code runs in the same process and could, with intent, find this
module and write a line of its own. The verifier's other defences (tests and configuration from the
recorded start state, fail-to-pass, the nonce) make that the only way left; see docs/rewards.md.

Standard library and pytest only: it is copied into each test run as `.rlide/rlide_report.py`
(`envpool.verifiers.test_runs`), and never imported outside the sandbox.
"""

from __future__ import annotations

import json
import os
from typing import Any

import _pytest.python
import _pytest.reports
import _pytest.runner

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


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    target = os.environ.get("RLIDE_REPORT")
    if not target:
        return
    line = {
        "nonce": os.environ.get("RLIDE_NONCE", ""),
        "exitstatus": int(exitstatus),
        "collected": _collected,
        "outcomes": _outcomes,
        "tampered": _tampered(),
    }
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
