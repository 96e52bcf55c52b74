"""`EnvPool`: many `CodingEnv`s vectorized with `pufferlib.vector`, plus an async job facade.

Two ways in, one pool:
- RL: `reset()`, `send(actions)`, `recv()` exactly as a pufferlib vecenv (`pool.vecenv`).
- Jobs: `await pool.run(request)` / `await pool.run_many(requests)` (anyio) run `RunRequest`s on
  the workers' sandboxes; cancelling the awaiting task kills the run in its sandbox.
Use one mode at a time (a lifecycle state guards it).

Backends: "multiprocessing" (default; `envpool._vector.PipeMultiprocessing`, pufferlib's API with an
event-driven transport), "serial" (pufferlib's own Serial, in-process, for debugging; it spends one
send per episode on a reset), "ray" (pufferlib's Ray backend, optional: `ray.init()` joins the
cluster that `RAY_ADDRESS` names, or starts a local one; a dead Ray worker raises `WorkerDied`, but
only once the rest of its batch has returned, since pufferlib's Ray `recv` waits for the batch).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import structlog

from envpool._puffer import pufferlib_vector
from envpool._vector import PipeMultiprocessing, WorkerDied
from envpool.env import CodingEnv, Verifier
from envpool.sandbox import make_sandbox
from envpool.sandbox.base import (
    RunRequest,
    RunResult,
    RunStatus,
    SandboxError,
    TestRunRequest,
    prepare_test_run,
)
from envpool.verifiers.values import judge

log = structlog.get_logger(__name__)

__all__ = ["EnvPool", "PoolState", "WorkerDied", "make_coding_env"]


class PoolState(StrEnum):
    READY = "ready"
    STEPPING = "stepping"  # used through reset/send/recv
    SERVING = "serving"  # used through run/run_many
    BROKEN = "broken"  # a worker died
    CLOSED = "closed"


def make_coding_env(buf: Any = None, seed: int = 0, **kwargs: Any) -> Any:
    """pufferlib env creator: a CodingEnv wrapped in pufferlib's Gymnasium emulation."""
    pv = pufferlib_vector()
    return pv.GymnasiumPufferEnv(env=CodingEnv(**kwargs), buf=buf, seed=seed)


@dataclass
class _Job:
    job_id: int
    payload: dict[str, Any]
    done: Callable[[RunResult | BaseException], None]
    worker: int | None = None


@dataclass
class _Dispatcher:
    """Owns the worker pipes while serving jobs; all pipe traffic happens on its thread."""

    vec: PipeMultiprocessing
    slots_per_worker: int
    pending: list[_Job] = field(default_factory=list)
    running: dict[int, _Job] = field(default_factory=dict)
    cancels: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    error: BaseException | None = None
    stopping: bool = False

    def __post_init__(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        self.load = [0] * self.vec.num_workers
        self.vec.handler = self._on_message
        self.thread = threading.Thread(target=self._loop, name="rlide-envpool-dispatch", daemon=True)
        self.thread.start()

    def submit(self, job: _Job) -> None:
        with self.lock:
            if self.error is not None:
                raise self.error
            self.pending.append(job)
        os.write(self._wake_w, b"j")

    def cancel(self, job_id: int) -> None:
        with self.lock:
            self.cancels.append(job_id)
        os.write(self._wake_w, b"c")

    def stop(self) -> None:
        self.stopping = True
        os.write(self._wake_w, b"s")
        self.thread.join(timeout=5)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _on_message(self, worker: int, msg: tuple[Any, ...]) -> None:
        if msg[0] != "result":
            return
        job = self.running.pop(msg[1], None)
        if job is None:
            return
        self.load[worker] -= 1
        try:
            job.done(RunResult.model_validate(msg[2]))
        except Exception as exc:  # a malformed result must not stop the dispatcher
            job.done(SandboxError(f"bad result from worker {worker}: {exc}"))

    def _loop(self) -> None:
        while not self.stopping:
            try:
                self._assign()
                # Sleep on worker pipes, worker deaths, and our wake-up pipe together.
                if self._wake_r in self.vec.poll(None, extra=[self._wake_r]):
                    os.read(self._wake_r, 4096)
            except WorkerDied as exc:
                self._fail_all(exc)
                return

    def _assign(self) -> None:
        with self.lock:
            cancels, self.cancels = self.cancels, []
            for job_id in cancels:
                job = self.running.get(job_id)
                if job is not None and job.worker is not None:
                    self.vec.conns[job.worker].send(("cancel", job_id))
                else:
                    for queued in [j for j in self.pending if j.job_id == job_id]:
                        self.pending.remove(queued)
            while self.pending:
                worker = min(range(len(self.load)), key=self.load.__getitem__)
                if self.load[worker] >= self.slots_per_worker:
                    break
                job = self.pending.pop(0)
                job.worker = worker
                self.load[worker] += 1
                self.running[job.job_id] = job
                self.vec.conns[worker].send(("run", job.job_id, job.payload))

    def _fail_all(self, exc: BaseException) -> None:
        with self.lock:
            self.error = exc
            jobs = list(self.running.values()) + self.pending
            self.running.clear()
            self.pending.clear()
        for job in jobs:
            job.done(exc)


class EnvPool:
    def __init__(
        self,
        num_envs: int = 8,
        num_workers: int | None = None,
        batch_size: int | None = None,
        backend: str = "multiprocessing",
        sandbox: str = "bwrap",
        tasks: Sequence[Any] | str = "humaneval",
        jobs_per_worker: int = 1,
        seed: int = 0,
        start_method: str = "forkserver",
        sandbox_options: dict[str, Any] | None = None,
        verifier: Verifier = judge,
    ) -> None:
        """`sandbox_options` go to each worker's `make_sandbox` (e.g. bwrap's `project_site`);
        `verifier` judges each env's answers (it must pickle: a module-level function or class)."""
        options = dict(sandbox_options or {})
        # Fail here, with the backend's own reason, rather than as a WorkerDied from every worker.
        make_sandbox(sandbox, **options).close()
        pv = pufferlib_vector()
        # pufferlib.vector.make() refuses unknown kwargs, so our backend's own option rides on a partial.
        ours = functools.partial(PipeMultiprocessing, start_method=start_method)
        backends: dict[str, Any] = {"multiprocessing": ours, "serial": pv.Serial}
        if backend == "ray":
            backends["ray"] = pv.Ray  # optional: needs `ray`; prints to stdout (not for MCP stdio)
        if backend not in backends:
            raise ValueError(f"unknown pool backend {backend!r}: multiprocessing, serial or ray")
        creators = [
            functools.partial(
                make_coding_env,
                tasks=tasks,
                sandbox=sandbox,
                sandbox_options=options,
                verifier=verifier,
                env_id=i,
                num_envs=num_envs,
            )
            for i in range(num_envs)
        ]
        kwargs: dict[str, Any] = {}
        if backend != "serial":
            kwargs = {"num_workers": num_workers or num_envs, "batch_size": batch_size or num_envs}
            kwargs["overwork"] = True  # workers wait on sandboxes, not on CPUs
        self.backend = backend
        self.vecenv = pv.make(
            creators,
            env_args=[[] for _ in range(num_envs)],
            env_kwargs=[{} for _ in range(num_envs)],
            backend=backends[backend],
            num_envs=num_envs,
            seed=seed,
            **kwargs,
        )
        self.state = PoolState.READY
        self.num_envs = num_envs
        self._jobs_per_worker = jobs_per_worker
        self._dispatcher: _Dispatcher | None = None
        self._ids = itertools.count()

    # ---- RL interface (pufferlib vecenv) ------------------------------------------------------
    def reset(self, seed: int | None = 0) -> tuple[Any, list[dict[str, Any]]]:
        self._enter(PoolState.STEPPING)
        return self._guard(lambda: self.vecenv.reset(seed))  # type: ignore[no-any-return]

    def send(self, actions: Any) -> None:
        self._expect(PoolState.STEPPING)
        self._guard(lambda: self.vecenv.send(actions))

    def recv(self) -> tuple[Any, ...]:
        self._expect(PoolState.STEPPING)
        return self._guard(self.vecenv.recv)  # type: ignore[no-any-return]

    # ---- job interface (async) ----------------------------------------------------------------
    async def run(self, request: RunRequest) -> RunResult:
        """Run one request on a worker's sandbox. Cancelling the caller kills the run."""
        dispatcher = self._serving()
        token = anyio.lowlevel.current_token()
        finished = anyio.Event()
        box: list[RunResult | BaseException] = []

        def done(outcome: RunResult | BaseException) -> None:
            box.append(outcome)
            with contextlib.suppress(RuntimeError):  # the caller's event loop is gone: nobody waits
                anyio.from_thread.run_sync(finished.set, token=token)

        job = _Job(next(self._ids), request.model_dump(mode="json"), done)
        dispatcher.submit(job)
        try:
            await finished.wait()
        except anyio.get_cancelled_exc_class():
            dispatcher.cancel(job.job_id)
            raise
        outcome = box[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def run_tests(self, test: TestRunRequest) -> RunResult:
        """Files + optional unified diff + test command (or test code), as one sandboxed run."""
        return await self.run(await anyio.to_thread.run_sync(prepare_test_run, test))

    async def run_many(self, requests: Sequence[RunRequest]) -> list[RunResult]:
        """Run all requests concurrently; results in request order. The first failure is raised
        as itself (e.g. `WorkerDied`), not wrapped in an ExceptionGroup."""
        results: list[RunResult | None] = [None] * len(requests)
        errors: list[BaseException] = []

        async def one(i: int, req: RunRequest) -> None:
            try:
                results[i] = await self.run(req)
            except Exception as exc:  # collected and re-raised below, unwrapped
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for i, req in enumerate(requests):
                tg.start_soon(one, i, req)
        if errors:
            raise errors[0]
        return [r if r is not None else _lost() for r in results]

    # ---- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        if self.state is PoolState.CLOSED:
            return
        if self._dispatcher is not None:
            self._dispatcher.stop()
        try:
            self.vecenv.close()
        except Exception as exc:
            if not (self.backend == "ray" and _is_ray_worker_death(exc)):
                raise
            import ray  # pufferlib's close asks every actor first, and a dead one fails that

            ray.shutdown()
        self.state = PoolState.CLOSED

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serving(self) -> _Dispatcher:
        if not isinstance(self.vecenv, PipeMultiprocessing):
            raise SandboxError("run()/run_many() need the multiprocessing backend")
        if self._dispatcher is None:
            self._enter(PoolState.SERVING)
            self._dispatcher = _Dispatcher(self.vecenv, self._jobs_per_worker)
        self._expect(PoolState.SERVING)
        return self._dispatcher

    def _enter(self, state: PoolState) -> None:
        if self.state not in (PoolState.READY, state):
            raise SandboxError(f"pool is {self.state.value}; cannot switch to {state.value}")
        self.state = state

    def _expect(self, state: PoolState) -> None:
        if self.state is not state:
            raise SandboxError(f"pool is {self.state.value}, expected {state.value} (call reset() first?)")

    def _guard(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except WorkerDied:
            self.state = PoolState.BROKEN
            raise
        except Exception as exc:
            if self.backend == "ray" and _is_ray_worker_death(exc):
                self.state = PoolState.BROKEN
                raise WorkerDied(f"a Ray worker died: {type(exc).__name__}: {exc}") from exc
            raise


def _is_ray_worker_death(exc: Exception) -> bool:
    """Ray's own error when an actor's process is gone (ray is imported only by the ray backend)."""
    from ray.exceptions import RayActorError

    return isinstance(exc, RayActorError)


def _lost() -> RunResult:
    return RunResult(status=RunStatus.SANDBOX_ERROR, exit_code=None, detail="result lost")
