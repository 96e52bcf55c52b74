"""Spectrum-based fault localisation: which project functions the failing tests run and the passing
ones do not, for the prompt to show first.

A traceback names where a failure surfaced, which is often not where the bug is: a wrong value
returned by a helper fails an assertion in the test, and a decorator's wrapper is the frame every
call passes through. One sandboxed run of FAIL_TO_PASS and some PASS_TO_PASS tests (those in the
same test files first) records, for each test, the project functions it called (`sys.setprofile`
around each test's call phase, leaving out what a failure report calls, such as an operand's
`__repr__`); each function gets the Ochiai score of the failing and passing tests
that ran it, failed / sqrt(all failed * (failed + passed)), the measure that ranks best among the
classic spectrum formulas on real bugs (Abreu et al. 2007; Pearson et al., ICSE 2017).

This only orders what the prompt shows. It pays nothing: the run is no judged run, and a tree that
forges its output gets a worse prompt, never a reward.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass

from envpool.sandbox.base import RunRequest
from envpool.verifiers.project import judged_tree
from training.scenarios.bug_tasks.judge import PreparedInstance, RunsFor

MAX_PASSING = 40
"""PASS_TO_PASS tests run besides FAIL_TO_PASS: enough to tell shared code from the failing path."""
MARK = "\x1frlide-spectrum:"

PROGRAM = r"""
import json, os, sys
import pytest

ROOT = os.getcwd() + os.sep
calls, outcomes, current = {}, {}, [None, None]


S = os.sep
REPORTING = (
    f"{S}_pytest{S}assertion{S}", f"{S}_pytest{S}_io{S}", f"{S}unittest{S}util.py",
    f"{S}pprint.py", f"{S}reprlib.py", f"{S}difflib.py",
)


def reporting(frame):
    # Made by a failure report (pytest's or unittest's repr of an assertion's operands), which only
    # failing tests run: a frame between the call and the test's own code is reporting code.
    caller = frame.f_back
    while caller is not None and caller.f_code.co_filename != current[1]:
        if any(part in caller.f_code.co_filename for part in REPORTING):
            return True
        caller = caller.f_back
    return False


def profile(frame, event, arg):
    if event == "call" and current[0] is not None:
        name = frame.f_code.co_filename
        if name.startswith(ROOT) and not reporting(frame):
            calls[current[0]].add((name[len(ROOT):], frame.f_code.co_firstlineno))


class Spectrum:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        current[:] = [item.nodeid, str(item.path)]
        calls.setdefault(item.nodeid, set())
        sys.setprofile(profile)
        try:
            yield
        finally:
            sys.setprofile(None)
            current[:] = [None, None]

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.failed:
            outcomes[report.nodeid] = report.outcome


pytest.main(sys.argv[1:] + ["-q", "-p", "no:cacheprovider", "--tb=no"], plugins=[Spectrum()])
ran = {test: sorted(functions) for test, functions in calls.items()}
sys.stdout.write("\n" + MARK + json.dumps({"outcomes": outcomes, "calls": ran}) + "\n")
"""


@dataclass(frozen=True)
class Spectrum:
    """Per project function, by (path, first line of its code object): failing and passing tests that ran it."""

    failed: dict[tuple[str, int], int]
    passed: dict[tuple[str, int], int]
    total_failed: int

    def score(self, path: str, first_line: int) -> float:
        """Ochiai's suspiciousness of the function whose code starts at `first_line` of `path`."""
        failed = self.failed.get((path, first_line), 0)
        passed = self.passed.get((path, first_line), 0)
        if failed == 0 or self.total_failed == 0:
            return 0.0
        return failed / math.sqrt(self.total_failed * (failed + passed))


def read_spectrum(stdout: str, failing: set[str]) -> Spectrum | None:
    """The spectrum a run printed, or None without one. A test counts as failing when FAIL_TO_PASS
    names it and it did not pass; as passing when it passed and FAIL_TO_PASS does not name it."""
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        return None
    try:
        data = json.loads(line[len(MARK) :])
        outcomes: dict[str, str] = dict(data["outcomes"])
        calls = {str(test): [(str(path), int(first)) for path, first in ran] for test, ran in data["calls"].items()}
    except (ValueError, KeyError, TypeError):
        return None
    failed: dict[tuple[str, int], int] = defaultdict(int)
    passed: dict[tuple[str, int], int] = defaultdict(int)
    total_failed = 0
    for test, ran in calls.items():
        outcome = outcomes.get(test)
        if test in failing and outcome != "passed":
            total_failed += 1
            counts = failed
        elif test not in failing and outcome == "passed":
            counts = passed
        else:
            continue
        for function in set(ran):
            counts[function] += 1
    return Spectrum(dict(failed), dict(passed), total_failed)


def passing_sample(fail_to_pass: list[str], pass_to_pass: list[str]) -> list[str]:
    """Up to `MAX_PASSING` PASS_TO_PASS tests, those in a file a failing test is in first."""
    files = {test.split("::", 1)[0] for test in fail_to_pass}
    near = [test for test in pass_to_pass if test.split("::", 1)[0] in files]
    far = [test for test in pass_to_pass if test.split("::", 1)[0] not in files]
    return (near + far)[:MAX_PASSING]


def spectrum_run(prepared: PreparedInstance, runs_for: RunsFor) -> Spectrum | None:
    """The start state's spectrum from one sandboxed run; None when the run printed none (a
    collection error, a time limit): the prompt then keeps the traceback's order."""
    fail_to_pass, pass_to_pass = prepared.sets
    tests = [*fail_to_pass, *passing_sample(fail_to_pass, pass_to_pass)]
    files = judged_tree(prepared.start, prepared.trusted, prepared.tests)
    program = f"MARK = {MARK!r}\n" + PROGRAM + "\n"
    argv = "import sys\nsys.argv = ['pytest', *" + repr(tests) + "]\n"
    request = RunRequest(
        code=argv + program,
        files=files,
        timeout_s=min(prepared.tests.timeout_s, 120.0),
        memory_mb=prepared.tests.memory_mb,
    )
    result = runs_for(prepared.import_roots)(request)
    return read_spectrum(result.stdout, set(fail_to_pass))


__all__ = ["Spectrum", "passing_sample", "read_spectrum", "spectrum_run"]
