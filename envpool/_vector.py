"""An event-driven multiprocessing backend for `pufferlib.vector.make(..., backend=PipeMultiprocessing)`.

Why not `pufferlib.vector.Multiprocessing` as is (3.0.0): its master busy-spins on shared-memory
semaphores in `recv()` (a full core, on 2-core machines), its workers poll with 10 ms sleeps, a dead
worker makes `recv()` hang forever, and its infos carry no env id. Program runs take milliseconds,
so pipes cost nothing measurable here. This class keeps pufferlib's API and its env emulation
(`GymnasiumPufferEnv` per env, same spaces, same `reset/send/recv` contract and `APIUsageError`s)
and replaces only the transport: one duplex pipe per worker, one selector (made once) on
pipes *and* process sentinels, so the master sleeps while workers work and a dead worker is
reported at once (`WorkerDied`).

Workers also accept `run` jobs (a `RunRequest` for the worker's sandbox) and `cancel` messages;
`envpool.pool` uses them for its async facade.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import selectors
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from envpool import start_pool_helper
from envpool._puffer import pufferlib_vector

MsgHandler = Callable[[int, tuple[Any, ...]], None]


def stdout_to_stderr() -> None:
    """Point fd 1 at stderr in a worker: it inherits the parent's stdout, which may be an MCP stdio
    stream that a stray print or an unconfigured structlog line would corrupt."""
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr


class WorkerDied(RuntimeError):
    """A pool worker process exited unexpectedly; the pool is unusable and must be closed."""


def _worker_main(
    conn: Connection,
    creators: Sequence[Callable[..., Any]],
    env_args: Sequence[Sequence[Any]],
    env_kwargs: Sequence[dict[str, Any]],
    seed: int,
) -> None:
    import envpool.sandbox.base as base

    stdout_to_stderr()
    triples = zip(creators, env_args, env_kwargs, strict=True)
    envs = [c(*a, buf=None, seed=seed + i, **k) for i, (c, a, k) in enumerate(triples)]
    send_lock = threading.Lock()
    tokens: dict[int, base.CancelToken] = {}
    stepper = ThreadPoolExecutor(len(envs), thread_name_prefix="rlide-env") if len(envs) > 1 else None

    def send(msg: tuple[Any, ...]) -> None:
        with send_lock:  # job threads and the main loop share the pipe
            conn.send(msg)

    def run_job(job_id: int, payload: dict[str, Any], token: base.CancelToken) -> None:
        try:
            request = base.RunRequest.model_validate(payload)
            result = envs[0].env.sandbox.run(request, token)
            send(("result", job_id, result.model_dump(mode="json")))
        except Exception as exc:  # reported to the caller as a sandbox_error, never lost
            send(("result", job_id, {"status": "sandbox_error", "exit_code": None, "detail": repr(exc)}))
        finally:
            tokens.pop(job_id, None)
            token.close()

    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        kind = msg[0]
        if kind == "reset":
            obs, infos = [], []
            for i, env in enumerate(envs):
                ob, info = env.reset(seed=None if msg[1] is None else msg[1] + i)
                obs.append(ob.copy())
                infos.append(info)
            n = len(envs)
            send(("obs", np.stack(obs), np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool), infos))
        elif kind == "step":
            # A worker's envs step at once, each in a thread: they wait on their own sandboxes, so a
            # worker with k envs keeps k runs in flight (stepped in turn, it kept one).
            steps = list(stepper.map(step_env, envs, msg[1])) if stepper else [step_env(envs[0], msg[1][0])]
            send(obs_message(steps))
        elif kind == "run":
            token = base.CancelToken()
            tokens[msg[1]] = token
            threading.Thread(target=run_job, args=(msg[1], msg[2], token), daemon=True).start()
        elif kind == "cancel":
            if msg[1] in tokens:
                tokens[msg[1]].cancel()
        elif kind == "close":
            break
    if stepper is not None:
        stepper.shutdown()
    for env in envs:
        env.close()


def step_env(env: Any, action: Any) -> tuple[Any, ...]:
    ob, reward, terminated, truncated, info = env.step(action)
    env.done = False  # CodingEnv auto-resets in the same step: no reset send needed
    return ob, reward, terminated, truncated, info  # its own buffer: np.stack copies it before the next step


def obs_message(steps: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The "obs" message for a worker's envs' steps, in env order."""
    obs, rewards, terms, truncs, infos = zip(*steps, strict=True)
    return ("obs", np.stack(obs), np.asarray(rewards, np.float32), np.asarray(terms), np.asarray(truncs), list(infos))


class PipeMultiprocessing:
    """pufferlib.vector backend: same constructor and methods as `pufferlib.vector.Multiprocessing`."""

    def __init__(
        self,
        env_creators: Sequence[Callable[..., Any]],
        env_args: Sequence[Sequence[Any]],
        env_kwargs: Sequence[dict[str, Any]],
        num_envs: int,
        num_workers: int | None = None,
        batch_size: int | None = None,
        seed: int = 0,
        overwork: bool = True,  # accepted for API compatibility: waiting workers cost no CPU here
        zero_copy: bool = False,
        start_method: str = "forkserver",
        **kwargs: Any,
    ) -> None:
        pv = pufferlib_vector()
        self._pv = pv
        num_workers = num_workers or num_envs
        batch_size = batch_size or num_envs
        if num_envs % num_workers:
            raise pv.pufferlib.APIUsageError("num_envs must be divisible by num_workers")
        self.envs_per_worker = num_envs // num_workers
        if batch_size % self.envs_per_worker:
            raise pv.pufferlib.APIUsageError("batch_size must be divisible by (num_envs / num_workers)")
        self.num_workers = num_workers
        self.workers_per_batch = batch_size // self.envs_per_worker
        self.num_environments = num_envs
        self.driver_env = env_creators[0](*env_args[0], buf=None, seed=seed, **env_kwargs[0])
        self.emulated = self.driver_env.emulated
        self.num_agents = num_envs
        self.agents_per_batch = batch_size
        self.single_observation_space = self.driver_env.single_observation_space
        self.single_action_space = self.driver_env.single_action_space
        spaces = pv.pufferlib.spaces
        self.action_space = spaces.joint_space(self.single_action_space, batch_size)
        self.observation_space = spaces.joint_space(self.single_observation_space, batch_size)
        self.flag = pv.RESET
        self.initialized = False
        self.handler: MsgHandler | None = None  # receives "result" messages (async jobs)
        # "forkserver" (default): workers fork from a clean single-threaded helper that has
        # already imported envpool and pufferlib, so a pool made inside a threaded program (the
        # MCP server) cannot inherit a lock held by another thread. "fork" starts faster.
        ctx: Any = multiprocessing.get_context(start_method)  # typeshed: BaseContext lacks Process
        if start_method == "forkserver":
            start_pool_helper()
        self.conns: list[Connection] = []
        self.processes: list[multiprocessing.process.BaseProcess] = []
        for w in range(num_workers):
            lo, hi = w * self.envs_per_worker, (w + 1) * self.envs_per_worker
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=_worker_main,
                args=(child, env_creators[lo:hi], env_args[lo:hi], env_kwargs[lo:hi], seed + lo),
                daemon=True,
                name=f"rlide-envpool-{w}",
            )
            proc.start()
            child.close()
            self.conns.append(parent)
            self.processes.append(proc)
        self._waiting: list[int] = []
        self._ready: dict[int, tuple[Any, ...]] = {}
        self._batch: list[int] = []
        # Made once: `multiprocessing.connection.wait` built and filled a new one on every call
        # (16 registrations for 8 workers, each recv).
        self._selector = selectors.DefaultSelector()
        for w, (conn, proc) in enumerate(zip(self.conns, self.processes, strict=True)):
            self._selector.register(conn, selectors.EVENT_READ, ("conn", w))
            self._selector.register(proc.sentinel, selectors.EVENT_READ, ("died", w))

    @property
    def num_envs(self) -> int:
        return self.agents_per_batch

    # ---- pufferlib API --------------------------------------------------------------------
    def reset(self, seed: int | None = 0) -> tuple[Any, list[dict[str, Any]]]:
        return self._pv.reset(self, seed)  # type: ignore[no-any-return]

    def step(self, actions: Any) -> Any:
        return self._pv.step(self, actions)

    def async_reset(self, seed: int | None = 0) -> None:
        self._drain_pending()
        self.flag = self._pv.RECV
        for w, conn in enumerate(self.conns):
            conn.send(("reset", None if seed is None else seed + w * self.envs_per_worker))
        self._waiting = list(range(self.num_workers))

    def send(self, actions: Any) -> None:
        actions = self._pv.send_precheck(self, actions)
        actions = np.asarray(actions).reshape(len(self._batch), self.envs_per_worker, -1)
        for i, w in enumerate(self._batch):
            self.conns[w].send(("step", actions[i]))
            self._waiting.append(w)

    def recv(self) -> tuple[Any, ...]:
        self._pv.recv_precheck(self)
        while len(self._ready) < self.workers_per_batch:
            self.poll(None)
        batch = sorted(self._ready)[: self.workers_per_batch]
        msgs = [self._ready.pop(w) for w in batch]
        self._batch = batch
        obs = np.concatenate([m[1] for m in msgs])
        rewards = np.concatenate([m[2] for m in msgs])
        terms = np.concatenate([m[3] for m in msgs])
        truncs = np.concatenate([m[4] for m in msgs])
        infos = [info for m in msgs for info in m[5]]
        env_ids = np.concatenate([np.arange(w * self.envs_per_worker, (w + 1) * self.envs_per_worker) for w in batch])
        masks = np.ones(len(env_ids), dtype=bool)
        return obs, rewards, terms, truncs, infos, env_ids, masks

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(("close",))
        deadline = time.monotonic() + 1.0  # busy workers (mid-run) are killed; their sandboxes follow
        for proc in self.processes:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self.processes:
            if proc.is_alive():
                proc.kill()
                proc.join()
        self._selector.close()
        for conn in self.conns:
            conn.close()
        self.driver_env.close()

    # ---- transport --------------------------------------------------------------------------
    def poll(self, timeout: float | None, extra: Sequence[int] = ()) -> list[Any]:
        """Wait for worker messages, worker deaths or an `extra` fd; route messages; return what woke us."""
        for fd in extra:
            self._selector.register(fd, selectors.EVENT_READ, ("extra", fd))
        try:
            events = self._selector.select(timeout)
        finally:
            for fd in extra:
                self._selector.unregister(fd)
        ready: list[Any] = [key.fileobj for key, _ in events]
        for key, _ in events:
            kind, w = key.data
            if kind == "died":
                proc = self.processes[w]
                raise WorkerDied(f"envpool worker {w} (pid {proc.pid}) died with exit code {proc.exitcode}")
        for key, _ in events:
            kind, w = key.data
            if kind == "conn":
                obj = self.conns[w]
                try:
                    msg = obj.recv()
                except (EOFError, OSError) as exc:  # a killed worker's socket may reset first
                    proc = self.processes[w]
                    proc.join(timeout=0.2)
                    raise WorkerDied(
                        f"envpool worker {w} (pid {proc.pid}) died with exit code {proc.exitcode}"
                    ) from exc
                if msg[0] == "obs":
                    self._ready[w] = msg
                    if w in self._waiting:
                        self._waiting.remove(w)
                elif self.handler is not None:
                    self.handler(w, msg)
        return ready

    def _drain_pending(self) -> None:
        while self._waiting:
            self.poll(None)
        self._ready.clear()

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]
