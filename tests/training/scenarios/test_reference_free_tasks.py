"""`rlide eval --tasks FILE` with HumanEval tasks that have no `canonical_solution`: accepted, and
judged by the candidate's returned values against the task's check on the trusted side, never by
the exit status of a program holding the candidate. Real sandbox."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.envpool.tricks import HUMANEVAL_TRICKS
from training.scenarios.eval import evaluate, select_tasks

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")

TASK = {
    "task_id": "nocanon/reverse",
    "prompt": 'def reverse(s):\n    """Return s reversed."""\n',
    "test": "def check(candidate):\n    assert candidate('abc') == 'cba'\n    assert candidate('') == ''\n",
    "entry_point": "reverse",
}
FORGED_CALLS = (  # prints an empty recording and leaves before the check could call it
    "    pass\nimport sys\nprint('RLIDE-CALLS []')\nsys.exit(0)\n"
)
ANSWERS = {
    "right": "    return s[::-1]\n",
    "wrong": "    return s\n",
    "exit-0": HUMANEVAL_TRICKS["exit-0"],
    "os-exit-0": HUMANEVAL_TRICKS["os-exit-0"],
    "equal-to-everything": HUMANEVAL_TRICKS["equal-to-everything"],
    "forged-calls": FORGED_CALLS,
}


class Fixed:
    def __init__(self, answer: str) -> None:
        self.answer = answer

    def __call__(
        self, messages: list[dict[str, Any]], *, n: int, max_tokens: int, temperature: float, seed: int
    ) -> list[str]:
        return [self.answer] * n


@pytest.fixture
def sandbox() -> Any:
    from training.scenarios.sandbox_runner import SandboxRunner

    runner = SandboxRunner()
    yield runner
    runner.close()


@pytest.mark.parametrize("name", list(ANSWERS))
def test_a_task_without_canonical_solution_is_judged_by_its_values(tmp_path: Path, sandbox: Any, name: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(TASK) + "\n", encoding="utf-8")
    tasks = select_tasks(str(path))  # accepted: no refusal for the missing canonical_solution
    report = evaluate(Fixed(ANSWERS[name]), sandbox, tasks).to_dict()
    assert report["unverifiable"] == []
    assert report["passed"] == (1 if name == "right" else 0), report
