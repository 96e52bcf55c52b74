"""A HumanEval task without `canonical_solution`, judged by the values the candidate returns.

`envpool.verifiers.values` records which calls a task's check makes by running the check against
the canonical solution; the rest of its judgement never needs one. Without a canonical solution
the calls are recorded from the candidate's own run (in the sandbox), and the judgement is the same:
the candidate's function is called on those arguments in a second sandboxed run that returns plain
values, and the task's check runs again on the trusted side against a table of those values.

Why this stays sound: nothing the recording run prints or does is believed but the list of calls,
and the trusted check must make every one of its calls from that list (a call the list lacks
fails), so a candidate that exits early, forges the list or raises `SystemExit` records fewer calls
or none and fails. What is lost: a check that calls the entry point by its own name (HumanEval/33's
`sort_third(...)`) gets the prompt's stub, which returns None, so such a task fails for every
candidate (a false negative, never a false positive).
"""

from __future__ import annotations

from typing import Any

from envpool.tasks.humaneval import CodingTask
from envpool.verifiers import plain
from envpool.verifiers.values import (
    CALLS_MARK,
    Verdict,
    candidate_program,
    parse_outputs,
    recording_program,
    verdict,
)
from training.scenarios.base import ProgramRunner, extract_code


def _calls(stdout: str) -> list[Any] | None:
    lines = [line for line in stdout.splitlines() if line.startswith(CALLS_MARK)]
    if not lines:
        return None
    try:
        calls = plain.parse_json(lines[-1][len(CALLS_MARK) :])
    except plain.NotPlain:
        return None
    return calls if type(calls) is list and calls else None


def reference_free_verdict(
    problem: dict[str, Any], completion: str, runner: ProgramRunner, timeout_s: float
) -> Verdict:
    """Whether `completion` solves `problem` (no canonical solution), judged by its values."""
    answer = extract_code(completion)
    task = CodingTask(
        task_id=str(problem.get("task_id", problem["entry_point"])),
        prompt=problem["prompt"],
        entry_point=problem["entry_point"],
        tests=problem["test"],
        canonical_solution="",
        timeout_s=timeout_s,
    )
    # The recording program defines the function as prompt + canonical solution: here, the candidate's.
    recorder = CodingTask(
        task_id=task.task_id, prompt=task.source(answer), entry_point=task.entry_point, tests=task.tests,
        canonical_solution="", timeout_s=timeout_s,
    )  # fmt: skip
    recorded = runner.run_python(recording_program(recorder), timeout_s=timeout_s)
    calls = _calls(recorded.stdout)
    if calls is None:
        return Verdict(False, "the check's calls could not be recorded: the candidate did not run to the end")
    outputs = runner.run_python(candidate_program(task, answer, calls), timeout_s=timeout_s)
    results = parse_outputs(outputs.stdout, len(calls))
    if results is None:
        return Verdict(False, "no well-formed results: it did not run to the end, or printed over them")
    return verdict(task, calls, results)


__all__ = ["reference_free_verdict"]
