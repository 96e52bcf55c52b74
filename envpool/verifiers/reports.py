"""A test run's structured report: what each test did, as pytest's hooks saw it, never its printed summary.

`envpool.sandbox.base.prepare_test_run` loads rlide's pytest plugin (`pytest_plugin/rlide_report.py`,
mounted read-only in the sandbox: `envpool.sandbox.sites`) into every pytest the command starts
(`PYTEST_ADDOPTS`); the plugin streams lines to the run's stdout behind the run's nonce: a session's
start, its collected tests, each test's outcome as pytest reports it, its finish. The run also says
whether the patch applied: a marker printed right after `patch`, before any code of the run's could
print. `read_report` reads both back. A run without a finished session earns no tests reward: the
command ran no pytest (`true`, `exit 0`, a shell loop printing "5 passed"), or a pytest session
never finished (`os._exit` at import), or collected nothing, or its report says pytest was tampered
with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envpool.verifiers import plain
from envpool.verifiers.project import ProjectTests
from envpool.verifiers.trusted import PLUGIN

PLUGIN_FOLDER = str(Path(__file__).with_name("pytest_plugin"))
"""The host folder holding only the plugin, mounted read-only into the sandbox."""
APPLIED_MARK = "rlide-patch-applied"
REPORT_MARK = "rlide-test-report"
PASSED = frozenset({"passed", "xpassed"})


@dataclass(frozen=True)
class TestReport:
    """The merged outcome of every pytest session of one run, by test id."""

    __test__ = False  # not a pytest class
    outcomes: dict[str, str]
    exitstatus: int
    unreported: tuple[str, ...] = ()
    """Tests collected that no line gave an outcome: the session stopped under them (they count as errors)."""
    opened: dict[str, str] = field(default_factory=dict)
    """Non-Python workspace files the run opened for reading, each with the workspace file whose code did."""

    @property
    def complete(self) -> bool:
        """Whether pytest ran every test it collected to an outcome and ended as a test run ends:
        all passed (0) or some failed (1); not interrupted (2), an internal error (3), a usage error
        (4) or nothing collected (5). Only a complete run of a start state can define a task."""
        return not self.unreported and self.exitstatus in (0, 1)

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


def shell_steps(nonce: str) -> list[str]:
    """The lines a test run's script runs between applying the patch and its command: announce the
    applied patch, then let the command's own exit status be the script's."""
    return [f"echo {APPLIED_MARK}:{nonce}", "set +e"]


def environment(nonce: str) -> dict[str, str]:
    return {"RLIDE_NONCE": nonce, "PYTEST_ADDOPTS": f"-p {PLUGIN} -p no:cacheprovider"}


def runner_environment(nonce: str, own_modules: list[str]) -> dict[str, str]:
    """A judged run's environment: rlide's runner loads the plugin itself (`rlide_run.py`), and
    imports `own_modules` from the workspace, every other module from the trusted sites."""
    return {"RLIDE_NONCE": nonce, "RLIDE_OWN_MODULES": ",".join(own_modules)}


_WORST = {"passed": 0, "xpassed": 0, "skipped": 1, "xfailed": 1, "failed": 2, "error": 2}


@dataclass
class _Lines:
    """What every report line of one run says, merged: a line can only add a session, a test, a
    failure or a sign of tampering, never take one back."""

    started: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    collected: set[str] = field(default_factory=set)
    outcomes: dict[str, str] = field(default_factory=dict)
    exitstatus: int = 0
    tampered: list[str] = field(default_factory=list)
    opened: dict[str, str] = field(default_factory=dict)

    def add(self, event: dict[str, Any]) -> None:
        session, kind = str(event["session"]), event["event"]
        if kind == "start":
            self.started.add(session)
        elif kind == "collected":
            self.collected.update(str(test) for test in event["tests"])
        elif kind == "outcome":
            test, outcome = str(event["test"]), event["outcome"]
            if outcome not in _WORST:
                raise ValueError(f"unknown outcome {outcome!r}")
            if test not in self.outcomes or _WORST[outcome] > _WORST[self.outcomes[test]]:
                self.outcomes[test] = outcome
        elif kind == "tampered":
            self.tampered.append(str(event["what"]))
        elif kind == "finish":
            self.finished.add(session)
            self.exitstatus = max(self.exitstatus, int(event["exitstatus"]))
            self.tampered += [str(what) for what in event["tampered"]]
            # A hook from a file the candidate writes (the code under test, /tmp) can rewrite any report.
            trusted = ProjectTests().is_test  # hooks live in conftest.py files and plugins, never in project code
            self.tampered += [f"hooks from {path}" for path in event["hooks"] if not trusted(str(path))]
            for pair in event.get("opened") or []:
                self.opened.setdefault(str(pair[0]), str(pair[1]))
        else:
            raise ValueError(f"unknown event {kind!r}")

    def final_outcomes(self) -> dict[str, str]:
        """A test collected but never reported is an error: its session stopped under it."""
        return {test: "error" for test in self.collected} | self.outcomes


def without_marks(stdout: str, nonce: str) -> str:
    """The run's output as the agent should read it: the lines rlide's plugin and script wrote for
    `read_report` left out (a report line lists every collected test, thousands of characters on a
    real suite, and says nothing the structured result does not), with the line break the plugin
    put before each (after a unit separator), so pytest's progress dots stay on one line."""
    applied, report = f"{APPLIED_MARK}:{nonce}", f"{REPORT_MARK}:{nonce}:"
    out: list[str] = []
    for line in stdout.splitlines(keepends=True):
        if line.startswith(report):
            if out and out[-1].endswith("\x1f\n"):
                out[-1] = out[-1][:-2]
            continue
        if line.rstrip("\r\n") != applied:
            out.append(line)
    return "".join(out)


def read_report(stdout: str, nonce: str) -> TestRunOutcome:
    lines = stdout.splitlines()
    applied = bool(lines) and lines[0] == f"{APPLIED_MARK}:{nonce}"
    if not applied:
        return TestRunOutcome(False, reason="the patch did not apply")
    prefix = f"{REPORT_MARK}:{nonce}:"
    seen = _Lines()
    try:
        for line in lines:
            if line.startswith(prefix):
                seen.add(plain.parse_json(line[len(prefix) :]))
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):  # Overflow: int(Infinity)
        return TestRunOutcome(True, reason="the test report was not readable")
    if not seen.started:
        return TestRunOutcome(True, reason="no pytest session ran: no test report")
    if seen.started - seen.finished:
        return TestRunOutcome(True, reason="a pytest session started and never finished (exited or was killed)")
    if seen.tampered:
        reason = f"pytest was tampered with: {', '.join(seen.tampered[:3])}"
        return TestRunOutcome(True, reason=reason, tampered=tuple(seen.tampered))
    outcomes = seen.final_outcomes()
    if not outcomes:
        return TestRunOutcome(True, reason="pytest collected no test")
    unreported = tuple(sorted(seen.collected - seen.outcomes.keys()))
    return TestRunOutcome(True, TestReport(outcomes, seen.exitstatus, unreported, seen.opened))
