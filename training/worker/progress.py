"""What a training worker (or `rlide eval`) is doing right now, for a person watching it.

`Progress` keeps the counts TRL and ART users look for (rollouts sampled of how many, tokens/s,
replays run, optimizer steps, loss), says each change in one line, and says "still ..." at least
every `heartbeat_s` during long work (a sampling batch or an optimizer step on CPU takes minutes).
Each line goes to a sink (the CLI: stderr; otherwise structlog) and the counts to `progress.json`
in the run's folder, which `training.worker.status.read_status` shows while the worker lives.

`ProgressSampler` is the backend as self-play sees it: each `sample` call is counted (choices,
tokens, seconds) and the rest goes to the backend unchanged.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel, Field

from training.backends.base import BackendConfig, TrainResult

log = structlog.get_logger(__name__)

PROGRESS_FILE = "progress.json"
HEARTBEAT_S = 5.0


class WorkerProgress(BaseModel):
    """A live worker's counts for this invocation (the file a status reader shows)."""

    pid: int
    phase: str = Field(description="What it is doing: starting, sampling, optimizer step, waiting, ...")
    detail: str = ""
    step: int = Field(description="Committed step; the step in progress trains step+1.")
    rollouts_sampled: int = 0
    rollouts_total: int = Field(default=0, description="Rollouts this step samples in all.")
    replays_run: int = Field(default=0, description="Log episodes re-solved from their start state (log scenarios).")
    tokens_sampled: int = 0
    tokens_per_s: float | None = Field(default=None, description="Sampling throughput of this invocation so far.")
    optimizer_steps: int = Field(default=0, description="Optimizer steps this invocation trained.")
    last_loss: float | None = None
    phase_seconds: float = 0.0
    line: str = Field(default="", description="The last line said to the person watching.")
    updated_at: datetime


def progress_path(model_dir: Path) -> Path:
    return model_dir / PROGRESS_FILE


def read_progress(model_dir: Path) -> WorkerProgress | None:
    """The progress file of a run's folder, or None (none here, or unreadable mid-write)."""
    try:
        return WorkerProgress.model_validate_json(progress_path(model_dir).read_text())
    except (OSError, ValueError):
        return None


def _log_line(line: str) -> None:
    log.info("training_progress", line=line)


class Progress:
    """Counts and lines of one invocation; a daemon thread says "still ..." during long phases."""

    def __init__(
        self,
        model_dir: Path | None,
        *,
        sink: Callable[[str], None] | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        step: int = 0,
    ) -> None:
        self._path = None if model_dir is None else progress_path(model_dir)
        self._sink = sink or _log_line
        self._heartbeat_s = heartbeat_s
        self._lock = threading.Lock()
        self._state = WorkerProgress(pid=os.getpid(), phase="starting", step=step, updated_at=datetime.now(UTC))
        self._phase_started = time.monotonic()
        self._last_said = 0.0
        self._sampling_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="rlide-progress", daemon=True)
        self._thread.start()

    @property
    def phase(self) -> str:
        return self._state.phase

    def begin(self, phase: str, detail: str = "", *, quiet: bool = False) -> None:
        """Enter a phase; says so unless `quiet` (the next count will)."""
        with self._lock:
            self._state.phase, self._state.detail = phase, detail
            self._phase_started = time.monotonic()
        if not quiet:
            self._say(f"{phase}: {detail}" if detail else phase)

    def plan_rollouts(self, total: int, step: int) -> None:
        with self._lock:
            self._state.step = step
            self._state.rollouts_sampled, self._state.rollouts_total, self._state.replays_run = 0, total, 0

    def sampled(self, choices: int, tokens: int, seconds: float) -> None:
        with self._lock:
            s = self._state
            s.rollouts_sampled += choices
            s.tokens_sampled += tokens
            self._sampling_s += seconds
            s.tokens_per_s = s.tokens_sampled / self._sampling_s if self._sampling_s > 0 else None
            left = s.rollouts_total - s.rollouts_sampled
            eta = ""
            if left > 0 and s.rollouts_sampled:
                eta = f", about {_duration(self._sampling_s / s.rollouts_sampled * left)} of sampling left"
        self._say(
            f"rollouts {s.rollouts_sampled}/{s.rollouts_total} sampled ({tokens} tokens in {seconds:.1f}s,"
            f" {_rate(s.tokens_per_s)}{eta})"
        )

    def replays(self, count: int) -> None:
        with self._lock:
            self._state.replays_run += count

    def stepped(self, algorithm: str, step: int, result: TrainResult, seconds: float) -> None:
        loss = next((v for k, v in result.metrics.items() if k.startswith("losses/") and "loss" in k), None)
        with self._lock:
            self._state.optimizer_steps += 1
            self._state.step = step
            self._state.last_loss = loss
        self.begin("committing", f"step {step}", quiet=True)
        shown = "-" if loss is None else f"{loss:.4f}"
        self._say(f"optimizer step {step} ({algorithm}) done in {seconds:.1f}s: loss {shown}")

    def say(self, line: str) -> None:
        self._say(line)

    def snapshot(self) -> WorkerProgress:
        with self._lock:
            return self._state.model_copy()

    def close(self) -> None:
        """Stop the heartbeat and remove the file: a worker that is gone has no progress to show."""
        self._stop.set()
        self._thread.join(timeout=2)
        if self._path is not None:
            self._path.unlink(missing_ok=True)

    def _say(self, line: str) -> None:
        with self._lock:
            self._last_said = time.monotonic()
            self._state.line = line
        self._write()  # first: a reader who saw the line finds the file saying as much
        self._sink(line)

    def _beat(self) -> None:
        while not self._stop.wait(self._heartbeat_s / 2):
            with self._lock:
                quiet_for = time.monotonic() - self._last_said
                in_phase = time.monotonic() - self._phase_started
                s = self._state
                line = f"still {s.phase}" + (f" ({s.detail})" if s.detail else "") + f": {_duration(in_phase)}"
                if s.rollouts_total and s.phase == "sampling":
                    line += f", rollouts {s.rollouts_sampled}/{s.rollouts_total} sampled"
            if quiet_for >= self._heartbeat_s and s.phase != "waiting":
                self._say(line)

    def _write(self) -> None:
        if self._path is None:
            return
        with self._lock:
            self._state.phase_seconds = round(time.monotonic() - self._phase_started, 1)
            self._state.updated_at = datetime.now(UTC)
            data = self._state.model_dump_json()
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_name(f".{self._path.name}.{os.getpid()}")
            tmp.write_text(data)
            tmp.replace(self._path)  # a reader never sees half a file
        except OSError as exc:  # progress is a courtesy: never stop training for it
            log.warning("progress_write_failed", path=str(self._path), error=str(exc))


def _rate(tokens_per_s: float | None) -> str:
    return "- tok/s" if tokens_per_s is None else f"{tokens_per_s:.1f} tok/s"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds}s" if seconds < 90 else f"{seconds // 60}m{seconds % 60:02d}s"


def _completion_tokens(choice: Any) -> int:
    """Sampled tokens of an OpenAI `Choice` (its per-token logprobs), else a word count."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if content is not None:
        return len(content)
    return len(str(getattr(getattr(choice, "message", None), "content", "") or "").split())


class ProgressSampler:
    """A `TrainingBackend` whose `sample` calls are counted in `progress`; the rest is the backend's."""

    def __init__(self, backend: Any, progress: Progress) -> None:
        self._backend = backend
        self._progress = progress
        self.name: str = backend.name
        self.config: BackendConfig = backend.config

    def start(self) -> int:
        return int(self._backend.start())

    def sample(self, messages: list[dict[str, Any]], *, n: int, max_tokens: int, **kwargs: Any) -> list[Any]:
        s = self._progress.snapshot()
        self._progress.begin(
            "sampling",
            f"{n} rollouts of up to {max_tokens} tokens, {s.rollouts_sampled}/{s.rollouts_total} done",
            quiet=s.rollouts_sampled > 0,
        )
        started = time.perf_counter()
        choices: list[Any] = self._backend.sample(messages, n=n, max_tokens=max_tokens, **kwargs)
        self._progress.sampled(len(choices), sum(_completion_tokens(c) for c in choices), time.perf_counter() - started)
        self._progress.begin("verifying", f"{len(choices)} rollouts", quiet=True)
        return choices

    def train(self, groups: Any) -> TrainResult:
        result: TrainResult = self._backend.train(groups)
        return result

    def rollback(self, step: int) -> None:
        self._backend.rollback(step)

    def close(self) -> None:
        self._backend.close()
