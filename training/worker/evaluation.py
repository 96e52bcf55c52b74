"""Evaluation during training, and the best checkpoint it finds.

Every `WorkerConfig.eval_every` committed steps the worker has its policy, as it stands, answer the
held-out tasks of `eval_tasks` (`humaneval`, or a task file of HumanEval tasks or bug instances),
greedily, judged in the sandbox as `rlide eval` judges them. Tasks the run has trained on are
left out (the trained-task ledger), and a set the run trained on entirely is refused when the run
starts. Each report is kept in the log beside `rlide eval`'s (the dashboard's chart), on the run's
TensorBoard charts, and on stderr. The checkpoint with the highest pass@1 on the set is
recorded in `best.json` in the run's folder: `rlide policy serve --checkpoint best` and
`rlide eval --checkpoint best` serve it, whatever the run trains after (an RL run's last
checkpoint is not always its best).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from training.backends.base import TrainingBackend
from training.scenarios.base import ProgramRunner
from training.scenarios.bug_tasks.judge import SandboxRuns
from training.scenarios.eval import EvalReport, EvalTasks, evaluate, select_tasks

BEST_FILE = "best.json"


class BestCheckpoint(BaseModel):
    """The checkpoint that evaluated best during training (`best.json` in the run's folder)."""

    step: int
    tasks: str
    """The task set's name (`EvalReport.set_name`)."""
    pass_at_1: float
    n: int


def read_best(model_dir: Path) -> BestCheckpoint | None:
    """The run's best checkpoint, or None when no evaluation during training recorded one."""
    path = model_dir / BEST_FILE
    try:
        return BestCheckpoint.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as exc:
        raise ValueError(f"{path} is not a best-checkpoint record ({exc}): remove it, or evaluate again") from exc


def checkpoint_choice(spec: str | None, model_dir: Path) -> int | None:
    """The step `--checkpoint` names: `latest` (or None) is None (follow the newest), `best` the
    run's best (`best.json`), a number that step. ValueError saying why when there is none."""
    if spec is None or spec == "latest":
        return None
    if spec == "best":
        best = read_best(model_dir)
        if best is None:
            raise ValueError(
                f"no best checkpoint recorded under {model_dir}: train with --eval-tasks (evaluation during"
                " training records it), or pass --checkpoint latest or a step"
            )
        return best.step
    if spec.isdigit() and int(spec) > 0:
        return int(spec)
    raise ValueError(f"--checkpoint takes latest, best or a step number (1, 2, ...), not {spec!r}")


def _write_best(model_dir: Path, best: BestCheckpoint) -> None:
    tmp = model_dir / f"{BEST_FILE}.tmp"
    tmp.write_text(json.dumps(best.model_dump(), indent=2), encoding="utf-8")
    tmp.replace(model_dir / BEST_FILE)  # a crash leaves the old record or the new one, never half


def backend_policy(backend: TrainingBackend) -> Any:
    """The backend's own sampler as a `CompletionPolicy` (the policy as it stands, not a copy)."""

    def complete(
        messages: list[dict[str, Any]], *, n: int, max_tokens: int, temperature: float, seed: int
    ) -> list[str]:
        choices = backend.sample(messages, n=n, max_tokens=max_tokens, temperature=temperature, seed=seed)
        return [choice.message.content or "" for choice in choices]

    return complete


@dataclass
class Evaluated:
    report: EvalReport
    best: BestCheckpoint
    improved: bool

    def line(self) -> str:
        r = self.report
        best = "a new best" if self.improved else f"best {self.best.pass_at_1:.3f} at step {self.best.step}"
        return f"eval at step {r.checkpoint_step}: {r.set_name} pass@1 {r.pass_at_1:.3f} ({r.passed}/{r.n}); {best}"


class PeriodicEval:
    """The worker's evaluation during training: `due` after a committed step, `run` to evaluate."""

    def __init__(
        self, tasks: str, *, every: int, limit: int | None, max_tokens: int, model_dir: Path, sandbox: str = "bwrap"
    ) -> None:
        if every < 1:
            raise ValueError("eval_every must be at least 1 when eval_tasks is set")
        self.tasks = tasks
        self.every = every
        self.limit = limit
        self.max_tokens = max_tokens
        self.model_dir = model_dir
        self.sandbox = sandbox
        self._runs: SandboxRuns | None = None
        self.select()  # a missing file, a bad line or a set trained on entirely: refused at start

    def select(self) -> EvalTasks:
        return select_tasks(self.tasks, limit=self.limit, model_dir=self.model_dir, skip_trained=True)

    def due(self, step: int) -> bool:
        return step > 0 and step % self.every == 0

    def run(self, backend: TrainingBackend, runner: ProgramRunner, step: int, model: str) -> Evaluated:
        chosen = self.select()  # the ledger grows as the run trains
        if chosen.bugs and self._runs is None:
            self._runs = SandboxRuns(self.sandbox)
        report = evaluate(
            backend_policy(backend),
            runner,
            chosen,
            max_tokens=self.max_tokens,
            model=model,
            checkpoint_step=step,
            runs_for=self._runs,
        )
        best = read_best(self.model_dir)
        improved = best is None or best.tasks != report.set_name or report.pass_at_1 > best.pass_at_1
        if improved:
            best = BestCheckpoint(step=step, tasks=report.set_name, pass_at_1=report.pass_at_1, n=report.n)
            _write_best(self.model_dir, best)
        assert best is not None
        return Evaluated(report, best, improved)

    def close(self) -> None:
        if self._runs is not None:
            self._runs.close()
            self._runs = None
