"""A test run's structured report: what each test did, as pytest's hooks saw it, never its printed summary.

`envpool.sandbox.base.prepare_test_run` writes rlide's pytest plugin (`rlide_report.py`) into the
run's `.rlide/` folder, loads it into every pytest the command starts (`PYTEST_ADDOPTS`), and after
the command prints, on one line behind a marker, what the plugin wrote. It also says whether the
patch applied: a marker printed right after `patch`, before any code of the run's could print.
`read_report` reads both back. A run without a report earns no tests reward: the command ran no
pytest (`true`, `exit 0`, a shell loop printing "5 passed"), or pytest never finished its session
(`os._exit` at import), or collected nothing, or its report says pytest was tampered with.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLUGIN_SOURCE = Path(__file__).with_name("rlide_report.py").read_text(encoding="utf-8")
PLUGIN_FILE = ".rlide/rlide_report.py"
REPORT_FILE = ".rlide/report.jsonl"
APPLIED_MARK = "rlide-patch-applied"
REPORT_MARK = "rlide-test-report"
PASSED = frozenset({"passed", "xpassed"})


@dataclass(frozen=True)
class TestReport:
    """The merged outcome of every pytest session of one run, by test id."""

    __test__ = False  # not a pytest class
    outcomes: dict[str, str]
    exitstatus: int

    @property
    def passed(self) -> int:
        return sum(1 for outcome in self.outcomes.values() if outcome in PASSED)

    @property
    def failed(self) -> int:
        return sum(1 for outcome in self.outcomes.values() if outcome in ("failed", "error"))

    def ids(self, *outcomes: str) -> set[str]:
        return {test for test, outcome in self.outcomes.items() if outcome in outcomes}


@dataclass(frozen=True)
class TestRunOutcome:
    """What a test run says for a verifier: whether its patch applied, and its report, or why none."""

    __test__ = False
    applied: bool
    report: TestReport | None = None
    reason: str = ""
    """Why there is no report: the patch did not apply, no pytest ran, nothing was collected..."""
    tampered: tuple[str, ...] = field(default=())


def shell_steps(nonce: str) -> tuple[list[str], list[str]]:
    """The lines a test run's script runs before and after its command: announce the applied patch;
    then print the report, base64 on one line, and exit with the command's status."""
    before = [f"echo {APPLIED_MARK}:{nonce}", "set +e"]
    after = [
        "status=$?",
        f'printf "\\n{REPORT_MARK}:{nonce}:%s\\n" "$(base64 -w0 {REPORT_FILE} 2>/dev/null)"',
        'exit "$status"',
    ]
    return before, after


def environment(nonce: str) -> dict[str, str]:
    return {
        "RLIDE_NONCE": nonce,
        "RLIDE_REPORT": REPORT_FILE,
        "PYTEST_ADDOPTS": "-p rlide_report -p no:cacheprovider",
    }


_WORST = {"passed": 0, "xpassed": 0, "skipped": 1, "xfailed": 1, "failed": 2, "error": 2}


def _merge(sessions: list[dict[str, Any]]) -> tuple[dict[str, str], int, tuple[str, ...]]:
    """One outcome per test over every session of the run: the worst it had; a test collected but
    never reported is an error (its session stopped under it)."""
    outcomes: dict[str, str] = {}
    collected: set[str] = set()
    exitstatus = 0
    tampered: list[str] = []
    for session in sessions:
        exitstatus = max(exitstatus, int(session.get("exitstatus", 0)))
        tampered += [str(t) for t in session.get("tampered") or []]
        collected.update(str(test) for test in session.get("collected") or [])
        for test, outcome in (session.get("outcomes") or {}).items():
            if outcome not in _WORST:
                raise ValueError(f"unknown outcome {outcome!r}")
            if test not in outcomes or _WORST[outcome] > _WORST[outcomes[test]]:
                outcomes[str(test)] = outcome
    for test in collected - outcomes.keys():
        outcomes[test] = "error"
    return outcomes, exitstatus, tuple(tampered)


def read_report(stdout: str, nonce: str) -> TestRunOutcome:
    lines = stdout.splitlines()
    applied = bool(lines) and lines[0] == f"{APPLIED_MARK}:{nonce}"
    if not applied:
        return TestRunOutcome(False, reason="the patch did not apply")
    marks = [line for line in lines if line.startswith(f"{REPORT_MARK}:{nonce}:")]
    payload = marks[-1].split(":", 2)[2] if marks else ""
    try:
        raw = base64.b64decode(payload, validate=True).decode("utf-8")
        sessions = [json.loads(line) for line in raw.splitlines() if line.strip()]
        sessions = [s for s in sessions if isinstance(s, dict) and s.get("nonce") == nonce]
        outcomes, exitstatus, tampered = _merge(sessions)
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError, AttributeError):
        return TestRunOutcome(True, reason="the test report was not readable")
    if not sessions:
        return TestRunOutcome(True, reason="no pytest session ran to its end: no test report")
    if tampered:
        return TestRunOutcome(True, reason=f"pytest was tampered with: {', '.join(tampered[:3])}", tampered=tampered)
    if not outcomes:
        return TestRunOutcome(True, reason="pytest collected no test")
    return TestRunOutcome(True, TestReport(outcomes, exitstatus))
