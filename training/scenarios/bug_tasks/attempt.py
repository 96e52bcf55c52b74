"""One bug instance as an eval task: pose it (start state, prompt) and score an answer.

`pose` prepares the instance (`judge.prepare`), runs FAIL_TO_PASS on its start state (each must
fail there, or the instance is broken: unverifiable, never counted against the model), records its
spectrum (`spectrum.spectrum_run`) and writes the prompt (`prompt.bug_prompt`). `score` turns an
answer into a tree (`training.scenarios.edits`) and judges it (`judge.judge_files`): resolved when
every FAIL_TO_PASS test passes and every PASS_TO_PASS test still does. An answer with no edit that
applies is the start state: not resolved.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from envpool.verifiers.reports import PASSED
from training.scenarios.bug_tasks.instance import BugInstance
from training.scenarios.bug_tasks.judge import PreparedInstance, RunsFor, failure_run, judge_files, prepare
from training.scenarios.bug_tasks.prompt import Shown, bug_prompt
from training.scenarios.bug_tasks.spectrum import spectrum_run
from training.scenarios.edits import EditError, apply_answer
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.verification import ANSWER_TIMEOUT_S, answer_limits


@dataclass(frozen=True)
class BugTask:
    instance: BugInstance
    folder: Path
    """The JSONL file's folder (its `repo_archive` is relative to it)."""

    @property
    def id(self) -> str:
        return self.instance.instance_id


@dataclass(frozen=True)
class Posed:
    prepared: PreparedInstance
    shown: Shown

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.shown.text}]


@dataclass(frozen=True)
class Scored:
    resolved: bool
    detail: str


def pose(task: BugTask, runs_for: RunsFor, answer_timeout_s: float = ANSWER_TIMEOUT_S) -> Posed:
    """The instance ready to be answered. Raises `VerifierUnavailable` when it cannot be judged.
    An answer's judged run may take `answer_timeout_s` (or the project's limit, if lower:
    `answer_limits`)."""
    prepared = prepare(task.instance, task.folder)
    report, output = failure_run(prepared, runs_for)
    if report is None or not report.complete:
        raise VerifierUnavailable(f"{task.id}: FAIL_TO_PASS did not run to a report on the start state")
    passing = [t for t in prepared.instance.fail_to_pass if report.outcomes.get(t) in PASSED]
    if passing:
        raise VerifierUnavailable(f"{task.id}: FAIL_TO_PASS tests pass on the start state already: {passing[:3]}")
    tests = answer_limits(prepared.tests, answer_timeout_s)
    return Posed(replace(prepared, tests=tests), bug_prompt(prepared, output, spectrum_run(prepared, runs_for)))


def score(posed: Posed, answer: str, runs_for: RunsFor) -> Scored:
    try:
        files = apply_answer(posed.prepared.start, answer, posed.shown.sites)
    except EditError as exc:
        return Scored(False, f"no change applied: {exc}")
    judged = judge_files(posed.prepared, runs_for, files)
    return Scored(judged.reward == 1.0, judged.line)


__all__ = ["BugTask", "Posed", "Scored", "pose", "score"]
