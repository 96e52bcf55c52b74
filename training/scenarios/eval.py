"""`rlide eval`: pass@k of the current policy on code-checked tasks it never trained on.

**Tasks.** The built-in HumanEval set (`--tasks humaneval`, its held-out split by default), or a
JSONL file (`--tasks PATH`, read by `training.scenarios.task_file`) of HumanEval tasks, which
become scenarios through the same function as the built-in ones (`base.humaneval_scenario`), or of
bug instances in SWE-bench's format (`training.scenarios.bug_tasks`, docs/bug-tasks.md): the model
gets the problem statement and the code involved, answers with search/replace edits or a whole
function (`training.scenarios.edits`), and the instance's own tests judge the result; its pass@1 is
the fix rate.

**Judging.** Each completion is judged by the values it returns (`envpool.verifiers.values`): the
completion's code runs only to return them; the task's check runs on the trusted side. Code written
by a model is run only through the runner the caller passes: envpool's sandbox in production;
`SubprocessRunner` (no isolation) only on a disposable machine or for trusted code. A task whose
check cannot be recorded against its canonical solution (a wrong one, a broken check) counts as
failed and is listed as `unverifiable`.

**A task without its canonical solution.** The values verifier learns which calls the check
makes by running the check against the canonical solution. Without one, those calls are recorded
from the candidate's own sandboxed run, and the verdict is still the task's check run on the
trusted side against the candidate's returned values (`training.scenarios.reference_free` says
why that stays sound). What is never done: the check run in one program with the candidate and that
program's exit status taken as the verdict (a candidate that raised `SystemExit` passed 164 of 164
HumanEval problems that way).

**Sampling and scores.** K completions per task from one call (`n=K`): greedy when K is 1 (pass@1
is then exact), else at `temperature`. pass@k for k in (1, K) is the unbiased estimator of Chen et
al. 2021 (the Codex paper), `1 - C(n-c, k) / C(n, k)` per task with c of its n samples correct,
averaged over tasks. `ci95` is a 95% confidence interval of pass@1 over tasks: the Wilson score
interval when K is 1 (each task passes or fails); when K > 1 the normal approximation over the
tasks' per-task pass@1 (mean ± 1.96·s/√N, clipped to [0, 1]; it says nothing about a single task
and collapses to a point when every task scores the same).

**Never the tasks it trained on, checked.** Before anything is sampled, the tasks are checked
against the run's ledger (`training.data.ledger`, written by every training step): a task the run
trained on (same id, or its prompt inside a trained user message) refuses the eval, naming them,
unless `skip_trained` drops them; the report lists them as `skipped_trained`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

from training.data.ledger import LedgerError, trained_overlap
from training.scenarios.base import (
    DEFAULT_TIMEOUT_S,
    ProgramRunner,
    Scenario,
    Split,
    builtin,
    humaneval_scenario,
    humaneval_verdict,
)
from training.scenarios.bug_tasks.attempt import BugTask, pose, score
from training.scenarios.bug_tasks.judge import RunsFor
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.reference_free import reference_free_verdict
from training.scenarios.task_file import TaskFileError, read_task_file
from training.scenarios.verification import ANSWER_TIMEOUT_S

log = structlog.get_logger(__name__)

BUILTIN_TASKS = "humaneval"
Z95 = 1.959963984540054
"""The standard normal's 97.5th percentile."""
SHOWN = 10
"""Most task ids an error lists."""


class EvalRefused(ValueError):
    """An eval that would not measure what its report would claim; the message says what to change."""


class CompletionPolicy(Protocol):
    """Anything that answers chat messages with `n` texts: the gateway engine, a backend, an API client."""

    def __call__(
        self, messages: list[dict[str, Any]], *, n: int, max_tokens: int, temperature: float, seed: int
    ) -> list[str]: ...


@dataclass(frozen=True)
class EvalTasks:
    """The tasks an eval runs, checked against the run's ledger (`select_tasks`)."""

    name: str
    """`humaneval`, or the task file's path as given."""
    split: str
    """The built-in set's split; `all` for a task file."""
    scenarios: list[Scenario]
    source: dict[str, str]
    """{"builtin": name} or {"path": resolved path, "sha256": of the file's bytes}."""
    skipped_trained: list[str] = field(default_factory=list)
    bugs: list[BugTask] = field(default_factory=list)
    """A task file's bug instances (then `scenarios` is empty)."""


def select_tasks(
    tasks: str,
    *,
    split: Split | None = None,
    limit: int | None = None,
    model_dir: Path | None = None,
    skip_trained: bool = False,
) -> EvalTasks:
    """The first `limit` tasks of `tasks` (`humaneval` or a task file's path), less those the run at
    `model_dir` trained on when `skip_trained`; `EvalRefused` if it trained on any otherwise (no
    `model_dir`: a policy no run trained, nothing to check). Fast: nothing is sampled or run."""
    if tasks == BUILTIN_TASKS:
        split = split or "heldout"
        bugs: list[BugTask] = []
        scenarios, source = builtin(tasks, split), {"builtin": tasks}
    else:
        if split is not None:
            raise EvalRefused("a split picks part of the built-in humaneval set; a task file is evaluated whole")
        scenarios, bugs, source = _file_tasks(Path(tasks))
    scenarios = scenarios[:limit] if limit is not None else scenarios
    bugs = bugs[:limit] if limit is not None else bugs
    prompts = [(s.id, s.verifier.data["prompt"]) for s in scenarios]
    prompts += [(b.id, b.instance.problem_statement) for b in bugs]
    trained: list[str] = []
    if model_dir is not None:
        try:
            trained = trained_overlap(model_dir, prompts)
        except LedgerError as exc:
            raise EvalRefused(f"cannot tell which tasks the run trained on: {exc}") from exc
    if trained and not skip_trained:
        raise EvalRefused(
            f"the run trained on {len(trained)} of these {len(prompts)} tasks ({_listed(trained)}): a score on them"
            " measures memory, not skill. Pass --skip-trained to leave them out (the report lists them),"
            " or evaluate on other tasks"
        )
    dropped = set(trained)
    kept = [s for s in scenarios if s.id not in dropped]
    kept_bugs = [b for b in bugs if b.id not in dropped]
    if not kept and not kept_bugs:
        raise EvalRefused(f"the run trained on every one of these {len(prompts)} tasks: nothing is left to evaluate")
    return EvalTasks(tasks, split or "all", kept, source, trained, kept_bugs)


def _file_tasks(path: Path) -> tuple[list[Scenario], list[BugTask], dict[str, str]]:
    try:
        file = read_task_file(path)
    except TaskFileError as exc:
        raise EvalRefused(
            f"{exc} (--tasks takes {BUILTIN_TASKS} or the path of a JSONL file of HumanEval tasks or bug instances)"
        ) from exc
    scenarios = [humaneval_scenario(task.model_dump(), "heldout") for _, task in file.tasks]
    bugs = [BugTask(instance, path.parent) for _, instance in file.instances]
    return scenarios, bugs, {"path": str(path.resolve()), "sha256": file.sha256}


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown if len(names) <= SHOWN else f"{shown} and {len(names) - SHOWN} more"


@dataclass
class TaskResult:
    task_id: str
    samples: int
    correct: int
    seconds: float
    detail: str = ""
    """Why a sample failed (the first failure's verifier line), or why the task could not be verified."""
    unverifiable: bool = False

    @property
    def passed(self) -> bool:
        return self.correct > 0


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from `n` samples of which `c` are correct (Chen et al. 2021)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (sound at 0 of n and n of n, unlike p ± z·se)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def normal_interval(values: list[float], z: float = Z95) -> tuple[float, float]:
    """mean ± z·s/√N over `values` in [0, 1], clipped; [0, 1] with fewer than two values."""
    if len(values) < 2:
        return 0.0, 1.0
    mean, half = statistics.fmean(values), z * statistics.stdev(values) / math.sqrt(len(values))
    return max(0.0, mean - half), min(1.0, mean + half)


@dataclass
class EvalReport:
    tasks: str
    split: str
    model: str
    checkpoint_step: int | None
    samples: int
    temperature: float
    """What the samples were drawn at (0: greedy)."""
    source: dict[str, str]
    skipped_trained: list[str] = field(default_factory=list)
    results: list[TaskResult] = field(default_factory=list)
    bug_tasks: bool = False
    """Bug instances: pass@1 is the fix rate, and the report lists each instance's outcome."""

    @property
    def n(self) -> int:
        return len(self.results)

    @property
    def set_name(self) -> str:
        """The task set as charts and the log name it: humaneval-heldout, or a task file's stem."""
        return f"humaneval-{self.split}" if self.tasks == "humaneval" else Path(self.tasks).stem

    @property
    def passed(self) -> int:
        """Tasks with at least one correct sample."""
        return sum(r.passed for r in self.results)

    def pass_at(self, k: int) -> float:
        if not self.results:
            return 0.0
        return statistics.fmean(pass_at_k(r.samples, r.correct, k) for r in self.results)

    @property
    def pass_at_1(self) -> float:
        return self.pass_at(1)

    def ci95(self) -> dict[str, Any]:
        if self.samples == 1:
            low, high = wilson_interval(self.passed, self.n)
            return {"low": low, "high": high, "method": "wilson"}
        low, high = normal_interval([pass_at_k(r.samples, r.correct, 1) for r in self.results])
        return {"low": low, "high": high, "method": "normal approximation over tasks"}

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "tasks_source": self.source,
            "split": self.split,
            "model": self.model,
            "checkpoint_step": self.checkpoint_step,
            "n": self.n,
            "samples": self.samples,
            "temperature": self.temperature,
            "passed": self.passed,
            "pass_at_1": self.pass_at_1,
            "pass_at_k": {str(k): self.pass_at(k) for k in sorted({1, self.samples})},
            "ci95": self.ci95(),
            "failed": [r.task_id for r in self.results if not r.passed],
            "unverifiable": [r.task_id for r in self.results if r.unverifiable],
            "skipped_trained": self.skipped_trained,
        } | (self._instances() if self.bug_tasks else {})

    def _instances(self) -> dict[str, Any]:
        return {
            "fix_rate": self.pass_at_1,
            "instances": [
                {
                    "instance_id": r.task_id,
                    "resolved": r.passed,
                    "resolved_samples": r.correct,
                    "samples": r.samples,
                    "unverifiable": r.unverifiable,
                    "detail": r.detail,
                }
                for r in self.results
            ],
        }


def evaluate(
    policy: CompletionPolicy,
    runner: ProgramRunner,
    tasks: EvalTasks,
    *,
    samples: int = 1,
    temperature: float = 0.8,
    max_tokens: int = 512,
    seed: int = 0,
    timeout_s: float | None = None,
    model: str = "policy",
    checkpoint_step: int | None = None,
    runs_for: RunsFor | None = None,
    on_result: Callable[[TaskResult, int, int], None] | None = None,
) -> EvalReport:
    """`samples` completions per task of `tasks` (one call each), judged in `runner`; bug instances
    in the sandboxes of `runs_for` (their tests need the repository's import roots on the path).
    `on_result(result, done, of)` hears each task's result as it is judged (progress for a person).
    `timeout_s` caps one answer's judged run (default: `DEFAULT_TIMEOUT_S` for a program,
    `ANSWER_TIMEOUT_S` for a bug instance's test run, or its project's own limit if lower)."""
    if samples < 1:
        raise ValueError("samples must be at least 1")
    drawn_at = 0.0 if samples == 1 else temperature
    report = EvalReport(
        tasks=tasks.name,
        split=tasks.split,
        model=model,
        checkpoint_step=checkpoint_step,
        samples=samples,
        temperature=drawn_at,
        source=tasks.source,
        skipped_trained=list(tasks.skipped_trained),
        bug_tasks=bool(tasks.bugs),
    )
    if tasks.bugs and runs_for is None:
        raise ValueError("bug instances run their project's tests: pass runs_for (a SandboxRuns)")
    total = len(tasks.bugs) + len(tasks.scenarios)
    for i, bug in enumerate(tasks.bugs):
        assert runs_for is not None
        report.results.append(
            _judge_bug(policy, bug, runs_for, samples, drawn_at, max_tokens, seed + i, timeout_s or ANSWER_TIMEOUT_S)
        )
        log.info("eval.instance", instance=bug.id, done=i + 1, of=len(tasks.bugs), resolved=report.results[-1].correct)
        if on_result is not None:
            on_result(report.results[-1], len(report.results), total)
    for i, scenario in enumerate(tasks.scenarios):
        started = time.perf_counter()
        completions = policy(
            list(scenario.messages), n=samples, max_tokens=max_tokens, temperature=drawn_at, seed=seed + i
        )
        if len(completions) != samples:
            raise ValueError(f"the policy answered {scenario.id} with {len(completions)} completions, not {samples}")
        report.results.append(_judge(scenario, completions, runner, timeout_s or DEFAULT_TIMEOUT_S, started))
        if on_result is not None:
            on_result(report.results[-1], len(report.results), total)
    return report


def _judge_bug(
    policy: CompletionPolicy,
    bug: BugTask,
    runs_for: RunsFor,
    samples: int,
    temperature: float,
    max_tokens: int,
    seed: int,
    timeout_s: float,
) -> TaskResult:
    started = time.perf_counter()
    try:
        posed = pose(bug, runs_for, timeout_s)
    except VerifierUnavailable as exc:  # the instance's fault or the sandbox's, never the model's
        return TaskResult(bug.id, samples, 0, time.perf_counter() - started, str(exc), True)
    completions = policy(posed.messages, n=samples, max_tokens=max_tokens, temperature=temperature, seed=seed)
    if len(completions) != samples:
        raise ValueError(f"the policy answered {bug.id} with {len(completions)} completions, not {samples}")
    correct, detail = 0, ""
    for completion in completions:
        try:
            scored = score(posed, completion, runs_for)
        except VerifierUnavailable as exc:
            return TaskResult(bug.id, samples, 0, time.perf_counter() - started, str(exc), True)
        correct += scored.resolved
        detail = detail or ("" if scored.resolved else scored.detail)
    return TaskResult(bug.id, samples, correct, time.perf_counter() - started, detail)


def _judge(
    scenario: Scenario, completions: list[str], runner: ProgramRunner, timeout_s: float, started: float
) -> TaskResult:
    correct, detail = 0, ""
    for completion in completions:
        try:
            data = scenario.verifier.data
            judged = humaneval_verdict if data.get("canonical_solution") is not None else reference_free_verdict
            verdict = judged(data, completion, runner, timeout_s)
        except VerifierUnavailable as exc:  # the task's fault or the sandbox's, never the sample's
            return TaskResult(scenario.id, len(completions), 0, time.perf_counter() - started, str(exc), True)
        correct += verdict.passed
        detail = detail or verdict.detail
    return TaskResult(scenario.id, len(completions), correct, time.perf_counter() - started, detail)


def engine_policy(engine: Any) -> CompletionPolicy:
    """Adapt a gateway `PolicyEngine` (e.g. `TransformersEngine`) to a `CompletionPolicy`."""

    def complete(
        messages: list[dict[str, Any]], *, n: int, max_tokens: int, temperature: float, seed: int
    ) -> list[str]:
        result = engine.complete(messages, n=n, max_tokens=max_tokens, temperature=temperature, seed=seed, tools=None)
        return [str(choice["message"].get("content") or "") for choice in result.choices]

    return complete


def eval_current_policy(
    backend_config: Any,
    runner: ProgramRunner,
    tasks: EvalTasks,
    *,
    samples: int = 1,
    temperature: float = 0.8,
    max_tokens: int = 256,
    committed: Callable[[], int | None] | None = None,
    upstream: str | None = None,
    runs_for: RunsFor | None = None,
    on_result: Callable[[TaskResult, int, int], None] | None = None,
    checkpoint: int | None = None,
    timeout_s: float | None = None,
) -> EvalReport:
    """pass@k of a run's policy (wired as `rlide eval`): the engine `policy serve` would use
    (`gateway.engines.policy_engine`: a cpu run's latest checkpoint or its `checkpoint` step, a GPU
    run's published server, or `upstream`); `tasks` from `select_tasks` with the run's `model_dir()`."""
    from training.gateway.engines import policy_engine

    engine = policy_engine(backend_config, committed=committed, upstream=upstream, checkpoint=checkpoint)
    engine.refresh()
    return evaluate(
        engine_policy(engine),
        runner,
        tasks,
        samples=samples,
        temperature=temperature,
        max_tokens=max_tokens,
        model=engine.model_id,
        checkpoint_step=engine.checkpoint_step,
        runs_for=runs_for,
        on_result=on_result,
        timeout_s=timeout_s,
    )
