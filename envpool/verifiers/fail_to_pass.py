"""Fail-to-pass: a task's tests reward, judged as the SWE-bench harness judges an instance.

A task's verifier is a test command and two sets of test ids from a run of it on the start state:
FAIL_TO_PASS, the tests that failed (what the work must fix), and PASS_TO_PASS, the tests that
passed (what it must not break). A later run of the same command, on the candidate's work, earns

    -1                     if any PASS_TO_PASS test does not pass
    +1                     if every FAIL_TO_PASS test passes ("resolved", as SWE-bench says)
    -1                     otherwise, for an episode (`partial=False`)
    2 * fixed / total - 1  otherwise, for a replay (`partial=True`), `fixed` of the `total` passing

so the untouched start state earns -1 and the whole fix +1. An episode earns nothing for part of
its FAIL_TO_PASS: an agent that breaks more tests before `start_episode` (they then fail at the
start) and repairs them afterwards would be paid for work it made up. A replay's start state comes
from the log, where the student cannot add to it, so part of the work earns part of the reward (the
variance GRPO learns from). A test missing from the run (deselected, renamed, not collected) does
not pass; a skipped or xfailed one does not pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from envpool.verifiers.reports import PASSED, TestReport


@dataclass(frozen=True)
class Judgement:
    reward: float
    line: str
    """What was judged, for the agent: how many FAIL_TO_PASS tests pass, which PASS_TO_PASS broke."""


def start(report: TestReport) -> tuple[set[str], set[str]] | None:
    """(FAIL_TO_PASS, PASS_TO_PASS) from a run of the start state, or None if no test failed."""
    failing = report.ids("failed", "error")
    return (failing, report.ids(*PASSED)) if failing else None


def judge(report: TestReport, fail_to_pass: list[str], pass_to_pass: list[str], *, partial: bool) -> Judgement:
    broken = [test for test in pass_to_pass if report.outcomes.get(test) not in PASSED]
    fixed = [test for test in fail_to_pass if report.outcomes.get(test) in PASSED]
    line = f"{len(fixed)} of {len(fail_to_pass)} failing tests pass"
    if broken:
        more = f" and {len(broken) - 3} more" if len(broken) > 3 else ""
        return Judgement(-1.0, f"{line}, but {len(broken)} that passed no longer do: {', '.join(broken[:3])}{more}")
    if partial or len(fixed) == len(fail_to_pass):
        return Judgement(2.0 * len(fixed) / len(fail_to_pass) - 1.0, f"{line}, none that passed broke")
    part = " (an episode is paid for the whole fix only)" if fixed else ""
    return Judgement(-1.0, f"{line}{part}, none that passed broke")
