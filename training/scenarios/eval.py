"""`rlide eval --tasks humaneval --split heldout`: pass@1 of the current policy.

Each problem gets one completion (greedy by default, so pass@1 is exact rather than estimated),
judged by the values it returns (`envpool.verifiers.values`: the completion's code runs only to
return them; the problem's check runs on the trusted side). Code written by a model is run only
through the runner the caller passes: envpool's sandbox in production; `SubprocessRunner` (no
isolation) only on a disposable machine or for trusted code. A problem whose check cannot be
recorded against its canonical solution counts as failed and is listed as `unverifiable`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from training.scenarios.base import ProgramRunner, Scenario, Split, VerifierUnavailable, builtin, humaneval_verdict


class CompletionPolicy(Protocol):
    """Anything that answers chat messages with text: the gateway engine, a backend, an API client."""

    def __call__(self, messages: list[dict[str, Any]], *, max_tokens: int, temperature: float, seed: int) -> str: ...


@dataclass
class TaskResult:
    task_id: str
    passed: bool
    seconds: float
    detail: str = ""
    """Why it failed (the verifier's line), or that it could not be verified."""
    unverifiable: bool = False


@dataclass
class EvalReport:
    tasks: str
    split: str
    model: str
    checkpoint_step: int | None
    n: int
    passed: int
    results: list[TaskResult] = field(default_factory=list)

    @property
    def pass_at_1(self) -> float:
        return self.passed / self.n if self.n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "split": self.split,
            "model": self.model,
            "checkpoint_step": self.checkpoint_step,
            "n": self.n,
            "passed": self.passed,
            "pass_at_1": self.pass_at_1,
            "failed": [r.task_id for r in self.results if not r.passed],
            "unverifiable": [r.task_id for r in self.results if r.unverifiable],
        }


def evaluate(
    policy: CompletionPolicy,
    runner: ProgramRunner,
    *,
    tasks: str = "humaneval",
    split: Split = "heldout",
    limit: int | None = None,
    max_tokens: int = 512,
    temperature: float = 0.0,
    seed: int = 0,
    timeout_s: float = 10.0,
    model: str = "policy",
    checkpoint_step: int | None = None,
) -> EvalReport:
    if tasks != "humaneval":
        raise ValueError(f"unknown eval task set {tasks!r}: only 'humaneval' runs code-checked evals")
    scenarios: list[Scenario] = builtin(tasks, split)
    if limit is not None:
        scenarios = scenarios[:limit]
    report = EvalReport(
        tasks=tasks, split=split, model=model, checkpoint_step=checkpoint_step, n=len(scenarios), passed=0
    )
    for i, scenario in enumerate(scenarios):
        started = time.perf_counter()
        completion = policy(list(scenario.messages), max_tokens=max_tokens, temperature=temperature, seed=seed + i)
        try:
            verdict = humaneval_verdict(scenario.verifier.data, completion, runner, timeout_s)
            result = TaskResult(scenario.id, verdict.passed, time.perf_counter() - started, verdict.detail)
        except VerifierUnavailable as exc:
            result = TaskResult(scenario.id, False, time.perf_counter() - started, str(exc), unverifiable=True)
        report.results.append(result)
        report.passed += int(result.passed)
    return report


def engine_policy(engine: Any) -> CompletionPolicy:
    """Adapt a gateway `PolicyEngine` (e.g. `TransformersEngine`) to a `CompletionPolicy`."""

    def complete(messages: list[dict[str, Any]], *, max_tokens: int, temperature: float, seed: int) -> str:
        result = engine.complete(messages, n=1, max_tokens=max_tokens, temperature=temperature, seed=seed, tools=None)
        return str(result.choices[0]["message"].get("content") or "")

    return complete


def eval_current_policy(
    backend_config: Any,
    runner: ProgramRunner,
    *,
    tasks: str = "humaneval",
    split: Split = "heldout",
    limit: int | None = None,
    max_tokens: int = 256,
) -> EvalReport:
    """pass@1 of the latest checkpoint of a cpu-backend run (wired as `rlide eval`)."""
    from training.gateway.engines import TransformersEngine

    engine = TransformersEngine(backend_config)
    return evaluate(
        engine_policy(engine),
        runner,
        tasks=tasks,
        split=split,
        limit=limit,
        max_tokens=max_tokens,
        model=engine.model_id,
        checkpoint_step=engine.checkpoint_step,
    )
