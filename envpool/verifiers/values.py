"""Judging a function by the values it returns, out of the candidate's reach (HumanEval-style tasks).

The task's own check (`check(candidate)` with its asserts) used to run in one program with the
candidate, and the program's exit status was the verdict: a candidate that raised `SystemExit`
passed 164 of 164 HumanEval problems, one that returned an object equal to everything 157. Here
only one step runs the candidate's code, and nothing it does but return values counts:

1. **calls** (once per task, cached): the check runs in the sandbox against the canonical solution
   wrapped in a recorder, `random` seeded; the arguments of every call are kept, as plain values.
2. **outputs**: in the sandbox, the candidate's function is called on each recorded call's
   arguments; each return value is encoded as a plain value (`envpool.verifiers.plain`: exact
   built-in types only), or the exception's name. Whatever else the program prints, exits with or
   defines is ignored; output that is not one well-formed list of as many results fails.
3. **verdict**, on the trusted side, in this process: the check runs again, `random` seeded the
   same, against a table of those decoded values. It passes only if every assertion of the task
   holds on the candidate's own values; a call the recording never made fails.

The check and the prompt's helpers are the task's (trusted data, never the candidate's); the
values are plain, so the verdict runs no code of the candidate's.
"""

from __future__ import annotations

import copy
import json
import random
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envpool.tasks.humaneval import CodingTask
from envpool.verifiers import plain

OUTPUTS_MARK = "RLIDE-OUTPUTS "
CALLS_MARK = "RLIDE-CALLS "
CHECK_SEED = 0

Run = Callable[[str, float], tuple[bool, str]]
"""Runs a Python program in the sandbox with a timeout: (exited 0 in time, its stdout)."""

_RECORD = """
import json, random
_codec = {{}}
exec({codec!r}, _codec)
{source}
{tests}
_calls = []
def _recorder(*args, **kwargs):
    _calls.append(_codec["encode"]([list(args), kwargs]))
    return {entry}(*args, **kwargs)
random.seed({seed})
check(_recorder)
print({mark!r} + json.dumps(_calls))
"""

_CANDIDATE = """
import json, sys
_codec = {{}}
exec({codec!r}, _codec)
_calls = [_codec["decode"](call) for call in json.loads({calls!r})]
{source}
_results = []
for _args, _kwargs in _calls:
    try:
        _results.append({{"value": _codec["encode"]({entry}(*_args, **_kwargs))}})
    except _codec["NotPlain"] as _exc:
        _results.append({{"error": "NotPlain"}})
    except BaseException as _exc:
        _results.append({{"error": type(_exc).__name__}})
sys.stdout.write("\\n" + {mark!r} + json.dumps(_results) + "\\n")
"""


class CallsUnavailable(RuntimeError):
    """The task's check could not be recorded against its canonical solution (a task problem)."""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    detail: str
    """Why it failed, in a line: the first failed assertion, an exception the candidate raised, no
    well-formed outputs (timeout, exit before the end, a value that is not plain)."""


def _last_marked(stdout: str, mark: str) -> Any:
    lines = [line for line in stdout.splitlines() if line.startswith(mark)]
    if not lines:
        return None
    try:
        return plain.parse_json(lines[-1][len(mark) :])
    except plain.NotPlain:
        return None


def recording_program(task: CodingTask) -> str:
    source = task.prompt + task.canonical_solution
    return _RECORD.format(
        codec=plain.SOURCE, source=source, tests=task.tests, entry=task.entry_point, seed=CHECK_SEED, mark=CALLS_MARK
    )


def candidate_program(task: CodingTask, answer: str, calls: list[Any]) -> str:
    return _CANDIDATE.format(
        codec=plain.SOURCE,
        calls=json.dumps(calls),
        source=task.source(answer),
        entry=task.entry_point,
        mark=OUTPUTS_MARK,
    )


def parse_outputs(stdout: str, calls: int) -> list[dict[str, Any]] | None:
    """The candidate program's results, or None unless there is exactly one for each call, each
    either {"value": <plain>} or {"error": <name>}."""
    results = _last_marked(stdout, OUTPUTS_MARK)
    if type(results) is not list or len(results) != calls:
        return None
    for result in results:
        if type(result) is not dict or len(result) != 1:
            return None
        ((key, value),) = result.items()
        if key == "value":
            try:
                plain.decode(value)
            except plain.NotPlain:
                return None
        elif key != "error" or type(value) is not str:
            return None
    return results


_VERDICT_LOCK = threading.Lock()  # the check uses the process's `random`, seeded for its run


class _CandidateRaised(Exception):
    pass


@dataclass(frozen=True)
class _Check:
    """What a verdict needs of a task that never changes: its check compiled, and the table keys of
    its recorded calls. Made once per task and process, not at every step of every pool worker:
    a HumanEval verdict's CPU time went from 0.36-0.45 ms to 0.12-0.16 ms (compiling was most of it)."""

    calls: list[Any]  # a copy of those the keys were made from
    code: types.CodeType
    keys: tuple[str, ...]


_CHECKS: dict[str, _Check] = {}  # task key -> its check
_CHECKS_LOCK = threading.Lock()


def _check(task: CodingTask, calls: list[Any]) -> _Check:
    key = _task_key(task)
    with _CHECKS_LOCK:
        known = _CHECKS.get(key)
    if known is not None and known.calls == calls:
        return known
    # The canonical solution too: a check may call the entry point by its name (HumanEval/33
    # compares the candidate with `sort_third(...)`), and that must not be the candidate.
    source = task.prompt + task.canonical_solution + "\n" + task.tests
    made = _Check(
        copy.deepcopy(calls),
        compile(source, f"<{task.task_id} check>", "exec"),
        tuple(json.dumps(call, sort_keys=True) for call in calls),
    )
    with _CHECKS_LOCK:
        _CHECKS[key] = made
    return made


def verdict(task: CodingTask, calls: list[Any], results: list[dict[str, Any]]) -> Verdict:
    """Run the task's check against the candidate's recorded values (trusted code, plain data)."""
    check = _check(task, calls)
    table = dict(zip(check.keys, results, strict=True))

    def lookup(*args: Any, **kwargs: Any) -> Any:
        key = json.dumps(plain.encode([list(args), kwargs]), sort_keys=True)
        if key not in table:
            raise AssertionError("the check called the function with arguments the recording never saw")
        result = table[key]
        if "error" in result:
            raise _CandidateRaised(result["error"])
        return plain.decode(result["value"])

    namespace: dict[str, Any] = {"__name__": "rlide_check"}
    with _VERDICT_LOCK:
        state = random.getstate()
        try:
            exec(check.code, namespace)  # a fresh namespace each time: the check's own globals
            random.seed(CHECK_SEED)
            namespace["check"](lookup)
        except _CandidateRaised as exc:
            return Verdict(False, f"the function raised {exc}")
        except AssertionError as exc:
            return Verdict(False, f"an assertion of the check failed{': ' + str(exc) if str(exc) else ''}")
        except Exception as exc:  # the check itself failed on the candidate's values (a TypeError, ...)
            return Verdict(False, f"the check failed on the returned values: {type(exc).__name__}")
        finally:
            random.setstate(state)
    return Verdict(True, "")


_RECORDED: dict[str, list[Any]] = {}  # task key -> its calls: a task's recording never changes
_RECORDED_LOCK = threading.Lock()


def _task_key(task: CodingTask) -> str:
    return json.dumps([task.task_id, task.prompt, task.canonical_solution, task.tests, task.entry_point])


def recorded_calls(task: CodingTask, run: Run) -> list[Any]:
    """The arguments of every call the task's check makes (step 1), recorded once per process."""
    key = _task_key(task)
    with _RECORDED_LOCK:
        known = _RECORDED.get(key)
    if known is not None:
        return known
    ok, stdout = run(recording_program(task), max(task.timeout_s, 30.0))
    calls = _last_marked(stdout, CALLS_MARK) if ok else None
    if type(calls) is not list or not calls:
        raise CallsUnavailable(f"{task.task_id}: its check could not be recorded against its canonical solution")
    with _RECORDED_LOCK:
        _RECORDED[key] = calls
    return calls


def judge(task: CodingTask, answer: str, run: Run) -> Verdict:
    """Whether `answer` solves `task`, judged by its values (steps 2 and 3); thread-safe."""
    calls = recorded_calls(task, run)
    _, stdout = run(candidate_program(task, answer, calls), task.timeout_s)
    results = parse_outputs(stdout, len(calls))
    if results is None:
        return Verdict(False, "no well-formed results: it did not run to the end, or printed over them")
    return verdict(task, calls, results)
