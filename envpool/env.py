"""`CodingEnv`: a Gymnasium environment whose actions are programs, run in a sandbox.

observation: the current task's prompt, UTF-8 bytes zero-padded to `obs_bytes` (uint8 Box).
action:      the program (or completion) as UTF-8 bytes zero-padded to `action_bytes`.
reward:      1.0 if the answer's values pass the task's check, else 0.0 (`envpool.verifiers.values`:
             judged outside the answer's reach; the program's exit status is no verdict).
info:        env_id, task_id, status, exit_code, duration_ms, stderr tail, detail (why it failed),
             verifier_error (empty unless the verifier itself failed), next_task_id.

Each step is one whole episode, and the next task is served in the same step: `step` returns
terminated=True together with the NEXT task's prompt (auto-reset), so no send is ever spent on a
reset. `reset()` does not skip the pending task; it just re-reads it.
Env `i` of `n` serves tasks i, i+n, i+2n, ... so n envs cover a task set once per pass.

A verifier that fails (raises) on a candidate's output is an infrastructure error, never the end of
the rollout or of the pool worker that hosts the env: the step earns nothing, says why in
`verifier_error`, logs it, and the env moves on to its next task.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import structlog
from numpy.typing import NDArray

from envpool._puffer import gym_notice_silenced
from envpool.sandbox import Sandbox, make_sandbox
from envpool.sandbox.base import RunRequest, RunResult, RunStatus
from envpool.tasks.humaneval import CodingTask, load_humaneval
from envpool.verifiers.values import Run, Verdict, judge

with gym_notice_silenced():
    import gymnasium

log = structlog.get_logger(__name__)

STDERR_TAIL = 2000
VERIFIER_ERROR_CHARS = 300


def encode_bytes(text: str, size: int) -> NDArray[np.uint8]:
    raw = text.encode("utf-8")[:size]
    out = np.zeros(size, dtype=np.uint8)
    out[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return out


def decode_bytes(arr: NDArray[Any]) -> str:
    raw = np.asarray(arr, dtype=np.uint8).tobytes()
    end = raw.find(b"\x00")
    return (raw if end < 0 else raw[:end]).decode("utf-8", "replace")


class Verifier(Protocol):
    """Judges an answer to a task, running programs in the env's sandbox through `run`
    (`envpool.verifiers.values.judge` by default)."""

    def __call__(self, task: CodingTask, answer: str, run: Run, /) -> Verdict: ...


class CodingEnv(gymnasium.Env[NDArray[np.uint8], NDArray[np.uint8]]):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        tasks: Sequence[CodingTask] | str = "humaneval",
        sandbox: str | Sandbox = "bwrap",
        env_id: int = 0,
        num_envs: int = 1,
        obs_bytes: int = 4096,
        action_bytes: int = 8192,
        sandbox_options: dict[str, Any] | None = None,
        verifier: Verifier = judge,
    ) -> None:
        self.tasks: Sequence[CodingTask] = load_humaneval() if tasks == "humaneval" else tasks  # type: ignore[assignment]
        if isinstance(self.tasks, str):
            raise ValueError(f"unknown task set {tasks!r}")
        self.env_id = env_id
        self.verifier = verifier
        self.num_envs = num_envs
        self.obs_bytes = obs_bytes
        self.observation_space = gymnasium.spaces.Box(0, 255, (obs_bytes,), np.uint8)
        self.action_space = gymnasium.spaces.Box(0, 255, (action_bytes,), np.uint8)
        # The sandbox is created lazily: the pool builds one env in the master only to read spaces.
        self._sandbox_spec = sandbox
        self._sandbox_options = sandbox_options or {}
        self._sandbox: Sandbox | None = None if isinstance(sandbox, str) else sandbox
        self._cursor = env_id % max(1, len(self.tasks))

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            assert isinstance(self._sandbox_spec, str)
            self._sandbox = make_sandbox(self._sandbox_spec, **self._sandbox_options)
        return self._sandbox

    @property
    def task(self) -> CodingTask:
        return self.tasks[self._cursor]

    def _observe(self) -> NDArray[np.uint8]:
        return encode_bytes(self.task.prompt, self.obs_bytes)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[NDArray[np.uint8], dict[str, Any]]:
        super().reset(seed=seed)
        if options and "task_index" in options:
            self._cursor = int(options["task_index"]) % len(self.tasks)
        return self._observe(), {"env_id": self.env_id, "task_id": self.task.task_id}

    def _runner(self, runs: list[RunResult]) -> Run:
        """The verifier's way into this env's sandbox; every run it makes lands in `runs`."""
        memory_mb = self.task.memory_mb

        def run(program: str, timeout_s: float) -> tuple[bool, str]:
            result = self.sandbox.run(RunRequest(code=program, timeout_s=timeout_s, memory_mb=memory_mb))
            runs.append(result)
            return result.ok, result.stdout

        return run

    def step(self, action: NDArray[Any]) -> tuple[NDArray[np.uint8], float, bool, bool, dict[str, Any]]:
        task = self.task
        runs: list[RunResult] = []
        error = ""
        try:
            verdict = self.verifier(task, decode_bytes(action), self._runner(runs))
        except Exception as exc:  # the top of the trusted side: see the module doc
            error = _describe(exc)
            verdict = Verdict(False, "the verifier failed (an infrastructure error: the step earns nothing)")
            log.error("coding_env.verifier_error", env_id=self.env_id, task_id=task.task_id, error=error)
        # The answer's own run is the last one (the first of a task may record its check's calls).
        result = runs[-1] if runs else RunResult(status=RunStatus.SANDBOX_ERROR, exit_code=None)
        reward = 1.0 if verdict.passed else 0.0
        self._cursor = (self._cursor + self.num_envs) % len(self.tasks)
        info = {
            "env_id": self.env_id,
            "task_id": task.task_id,
            "status": result.status.value,
            "exit_code": result.exit_code,
            "duration_ms": result.duration_ms,
            "stderr": result.stderr[-STDERR_TAIL:],
            "detail": verdict.detail,
            "verifier_error": error,
            "reward": reward,
            "next_task_id": self.task.task_id,
        }
        return self._observe(), reward, True, False, info

    def close(self) -> None:
        if self._sandbox is not None and isinstance(self._sandbox_spec, str):
            self._sandbox.close()  # only close what we created
        self._sandbox = None


def _describe(exc: Exception) -> str:
    """One line for a verifier's exception: its type, the start of its message, and where it was
    raised (a RecursionError's message alone does not say which verifier recursed). The message may
    quote the candidate's output: control characters are escaped, so it cannot forge log lines or
    drive a terminal."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    message = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(exc)[:VERIFIER_ERROR_CHARS])
    return f"{type(exc).__name__}: {message}{where}"
