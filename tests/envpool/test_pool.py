"""The pufferlib-vectorized pool: HumanEval end to end, worker death, cancellation, env ids."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import numpy as np
import psutil
import pytest

from envpool.env import CodingEnv, decode_bytes, encode_bytes
from envpool.pool import EnvPool, PoolState, WorkerDied
from envpool.sandbox.base import RunRequest, RunStatus, TestRunRequest
from envpool.tasks import CodingTask, load_humaneval
from tests.envpool.conftest import live_sandbox_uid_pids, requires_bwrap

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster

pytestmark = [requires_bwrap]
TASKS = {t.task_id: t for t in load_humaneval()}
ACTION_BYTES = 8192


def answer_all(pool: EnvPool, answer: dict[str, str]) -> dict[str, dict[str, object]]:
    """Drive the gym interface: each env gets the answer for the task its observation shows."""
    _, infos = pool.reset()
    serving = {info["env_id"]: info["task_id"] for info in infos}
    seen: dict[str, dict[str, object]] = {}
    while len(seen) < len(TASKS):
        actions = np.stack([encode_bytes(answer[serving[e]], ACTION_BYTES) for e in sorted(serving)])
        pool.send(actions)
        _, rewards, terms, _, infos, env_ids, _ = pool.recv()
        assert terms.all() and sorted(env_ids.tolist()) == sorted(serving)
        for info, reward in zip(infos, rewards, strict=False):
            assert info["reward"] == reward
            seen.setdefault(str(info["task_id"]), info)
            serving[int(info["env_id"])] = str(info["next_task_id"])
    return seen


@pytest.fixture(scope="module")
def pool() -> Iterator[EnvPool]:
    p = EnvPool(num_envs=8, num_workers=8)  # 4x more workers than cores
    yield p
    p.close()


@pytest.mark.timeout(120)
def test_humaneval_canonical_solutions_pass(pool: EnvPool) -> None:
    seen = answer_all(pool, {tid: t.canonical_solution for tid, t in TASKS.items()})
    failed = {tid: info["status"] for tid, info in seen.items() if info["status"] != "ok"}
    assert failed == {} and len(seen) == 164
    assert {info["env_id"] for info in seen.values()} == set(range(8))


@pytest.mark.anyio
async def test_humaneval_stub_bodies_all_fail() -> None:
    with EnvPool(num_envs=4, num_workers=4) as p:
        with anyio.fail_after(120):
            results = await p.run_many([t.request(t.stub) for t in TASKS.values()])
    assert len(results) == 164
    passed = [tid for tid, r in zip(TASKS, results, strict=False) if r.status is RunStatus.OK]
    assert passed == []


@pytest.mark.anyio
async def test_async_run_and_cancellation_kills_the_run() -> None:
    with EnvPool(num_envs=2, num_workers=2) as p:
        with anyio.fail_after(20):
            result = await p.run(RunRequest(code="print(6 * 7)"))
            assert result.status is RunStatus.OK and result.stdout == "42\n"
            tested = await p.run_tests(TestRunRequest(files={"a.py": "X = 1"}, tests="import a\nassert a.X == 1"))
            assert tested.status is RunStatus.OK, tested.stderr
            with anyio.move_on_after(0.5):
                await p.run(RunRequest(code="import time; time.sleep(60)", timeout_s=120))
            # The cancelled run is killed in its sandbox, not left to time out.
            while live_sandbox_uid_pids():
                await anyio.sleep(0.02)
            results = await p.run_many([RunRequest(code=f"print({i})") for i in range(10)])
            assert [r.stdout for r in results] == [f"{i}\n" for i in range(10)]


@pytest.mark.timeout(20)  # a hang (pufferlib's own Multiprocessing) would fail here, not block CI
def test_worker_death_during_batch_raises_within_a_second() -> None:
    p = EnvPool(num_envs=4, num_workers=4)
    try:
        p.reset()
        slow = "import time\ntime.sleep(30)\n"
        p.send(np.stack([encode_bytes(slow, ACTION_BYTES)] * 4))
        victim = p.vecenv.processes[2]
        os.kill(victim.pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(WorkerDied, match="worker 2"):
            p.recv()
        assert time.monotonic() - started < 1.0
        assert p.state is PoolState.BROKEN
    finally:
        p.close()


@pytest.mark.timeout(30)
def test_master_sleeps_while_workers_run() -> None:
    """pufferlib's own Multiprocessing busy-spins in recv(); ours must not burn the master's CPU."""
    with EnvPool(num_envs=2, num_workers=2, tasks=list(load_humaneval())[:2]) as p:
        p.reset()
        p.send(np.stack([encode_bytes("import time\ntime.sleep(1.5)\n", ACTION_BYTES)] * 2))
        cpu0, wall0 = time.process_time(), time.monotonic()
        p.recv()
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    assert wall >= 1.0 and cpu < 0.1 * wall


@pytest.mark.timeout(90)
def test_a_worker_steps_all_its_envs_at_once() -> None:
    """A worker that hosts several envs keeps one run in flight per env (stepped in turn, one)."""
    with EnvPool(num_envs=4, num_workers=1, tasks=list(load_humaneval())[:4]) as p:
        p.reset()
        p.send(np.stack([encode_bytes("    import time\n    time.sleep(2)\n", ACTION_BYTES)] * 4))
        worker = psutil.Process(p.vecenv.processes[0].pid)
        most = 0
        while most < 4 and not p.vecenv.conns[0].poll(0.02):  # until the step's answer is back
            ours = {child.pid for child in worker.children(recursive=True)}
            most = max(most, len(ours.intersection(live_sandbox_uid_pids())))
        _, rewards, *_ = p.recv()
    assert most == 4 and rewards.tolist() == [0.0] * 4


@pytest.mark.anyio
async def test_worker_death_during_run_many_raises_within_a_second() -> None:
    p = EnvPool(num_envs=4, num_workers=4)
    try:
        await p.run(RunRequest(code="pass"))
        with anyio.fail_after(1.5):
            async with anyio.create_task_group() as tg:

                async def kill_soon() -> None:
                    await anyio.sleep(0.3)
                    os.kill(p.vecenv.processes[1].pid, signal.SIGKILL)

                tg.start_soon(kill_soon)
                with pytest.raises(WorkerDied):
                    await p.run_many([RunRequest(code="import time; time.sleep(20)", timeout_s=30)] * 8)
    finally:
        p.close()


def test_coding_env_serves_next_task_in_the_same_step() -> None:
    tasks = list(load_humaneval())[:3]
    env = CodingEnv(tasks=tasks, sandbox="bwrap", env_id=0, num_envs=1)
    try:
        obs, info = env.reset()
        assert decode_bytes(obs) == tasks[0].prompt and info == {"env_id": 0, "task_id": "HumanEval/0"}
        obs, reward, terminated, truncated, info = env.step(encode_bytes(tasks[0].canonical_solution, ACTION_BYTES))
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert info["status"] == "ok" and info["next_task_id"] == "HumanEval/1"
        assert decode_bytes(obs) == tasks[1].prompt
        # reset() re-reads the pending task instead of skipping it
        obs, info = env.reset()
        assert info["task_id"] == "HumanEval/1"
        _, reward, _, _, info = env.step(encode_bytes("    return 'nope'\n", ACTION_BYTES))
        assert reward == 0.0 and "assertion" in info["detail"]  # it ran (status ok): its values failed
    finally:
        env.close()


def test_full_solution_action_is_accepted() -> None:
    task: CodingTask = TASKS["HumanEval/2"]
    full = "def truncate_number(number: float) -> float:\n    return number % 1.0\n"
    assert "def truncate_number" in task.program(full)
    env = CodingEnv(tasks=[task], sandbox="bwrap")
    try:
        env.reset()
        _, reward, _, _, _ = env.step(encode_bytes(full, ACTION_BYTES))
        assert reward == 1.0
    finally:
        env.close()


def test_serial_backend_for_debugging() -> None:
    with EnvPool(num_envs=2, backend="serial", tasks=list(load_humaneval())[:4]) as p:
        _, infos = p.reset()
        assert [i["env_id"] for i in infos] == [0, 1]
        p.send(np.stack([encode_bytes("    pass\n", ACTION_BYTES)] * 2))
        _, rewards, terms, _, infos, _, _ = p.recv()
        assert rewards.tolist() == [0.0, 0.0] and terms.all()


def test_pufferlib_import_leaves_cwd_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    from envpool._puffer import pufferlib_vector

    assert pufferlib_vector().Serial is not None
    assert not (tmp_path / "resources").exists()


SCRIPT = """
import anyio
from envpool.pool import EnvPool
from envpool.sandbox.base import RunRequest

async def main() -> None:
    with EnvPool(num_envs=2, num_workers=2) as pool:
        result = await pool.run(RunRequest(code="print('x')"))
        assert result.stdout == "x\\n"

if __name__ == "__main__":
    anyio.run(main)
"""


@pytest.mark.timeout(60)
def test_pool_writes_nothing_to_stdout_and_workers_find_its_modules_imported(tmp_path: Path) -> None:
    """An MCP stdio server's stdout is its protocol stream: workers must not write to it. Its stderr
    is the IDE's log of the server: no notice from the retired `gym` that pufferlib depends on.
    Workers fork from a helper that has imported the pool's modules: Python's import profiler,
    inherited by every process, shows them imported by the program and that helper alone."""
    script = tmp_path / "use_pool.py"
    script.write_text(SCRIPT)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, cwd=tmp_path, env=env, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == ""
    assert "Gym has been unmaintained" not in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "resources").exists()
    imported = [line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert imported.count("envpool._vector") == 2  # the program and the fork-server helper
    assert imported.count("envpool.pool") == 2
    assert imported.count("pydantic") == 2


HELPER_SCRIPT = """
import psutil
import envpool

def helpers() -> list[int]:
    return [c.pid for c in psutil.Process().children() if "forkserver" in " ".join(c.cmdline())]

if __name__ == "__main__":
    envpool.start_pool_helper()
    [helper] = helpers()
    from envpool.pool import EnvPool
    with EnvPool(num_envs=2, num_workers=2) as pool:
        assert helpers() == [helper]
        assert [psutil.Process(p.pid).ppid() for p in pool.vecenv.processes] == [helper, helper]
    print("ok")
"""


@pytest.mark.timeout(60)
def test_a_helper_started_ahead_is_the_one_workers_fork_from(tmp_path: Path) -> None:
    """What the MCP server does before its first pool: start the workers' helper process, then
    import envpool.pool while the helper imports it too. The pool must use that helper."""
    script = tmp_path / "prestart.py"
    script.write_text(HELPER_SCRIPT)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, cwd=tmp_path, env=env, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "ok\n"


def test_coding_env_passes_gymnasium_env_checker() -> None:
    from gymnasium.utils.env_checker import check_env

    env = CodingEnv(tasks=list(load_humaneval())[:3])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its generic advice on Box action ranges
            check_env(env, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.timeout(120)
def test_ray_backend_runs_tasks_and_a_dead_ray_worker_raises() -> None:
    """pufferlib's Ray backend on a local Ray cluster (what `RAY_ADDRESS` would spread over machines)."""
    pytest.importorskip("ray", reason="the ray extra is not installed")

    tasks = list(load_humaneval())[:4]
    with EnvPool(num_envs=4, num_workers=2, backend="ray", tasks=tasks) as p:
        _, infos = p.reset()
        serving = {info["env_id"]: info["task_id"] for info in infos}
        assert sorted(serving) == [0, 1, 2, 3]
        by_id = {t.task_id: t for t in tasks}
        p.send(np.stack([encode_bytes(by_id[serving[e]].canonical_solution, ACTION_BYTES) for e in range(4)]))
        _, rewards, _, _, infos, env_ids, _ = p.recv()
        assert sorted(env_ids.tolist()) == [0, 1, 2, 3]
        assert rewards.tolist() == [1.0] * 4 and {i["status"] for i in infos} == {"ok"}
        p.send(np.stack([encode_bytes("    pass\n", ACTION_BYTES)] * 4))
        _, rewards, *_ = p.recv()
        assert rewards.tolist() == [0.0] * 4

        actors = [
            proc
            for proc in psutil.process_iter(["cmdline"])
            if (proc.info["cmdline"] or [""])[0].startswith("ray::Serial")
        ]
        assert len(actors) == 2, [a.info for a in actors]
        # pufferlib's Ray recv waits for the whole batch, so the death surfaces when the live
        # worker's 2 s run returns: bounded by the run, never a hang.
        p.send(np.stack([encode_bytes("import time\ntime.sleep(2)\n", ACTION_BYTES)] * 4))
        actors[0].kill()
        started = time.monotonic()
        with pytest.raises(WorkerDied, match="Ray worker died"):
            p.recv()
        assert time.monotonic() - started < 15
        assert p.state is PoolState.BROKEN
    import ray

    assert not ray.is_initialized()  # close() shut the local cluster down despite the dead actor


def serial_actor_nodes() -> dict[int, str | None]:
    """Each live pufferlib Ray actor's pid -> the node id of the raylet that spawned it, read from
    the raylet's command line (None when no raylet is among its ancestors)."""
    found: dict[int, str | None] = {}
    for proc in psutil.process_iter(["cmdline", "status"]):
        if not (proc.info["cmdline"] or [""])[0].startswith("ray::Serial"):
            continue
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue  # exited; only its raylet has yet to reap it
        try:
            raylets = [p for p in proc.parents() if p.name() == "raylet"]
            args = raylets[0].cmdline() if raylets else []
        except psutil.NoSuchProcess:
            continue
        found[proc.pid] = next((a.split("=", 1)[1] for a in args if a.startswith("--node_id=")), None)
    return found


@pytest.fixture
def ray_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Cluster, str]]:
    """An external two-raylet Ray cluster named by `RAY_ADDRESS`: a head that takes no actors
    (num_cpus=0) and a second node that must take them all. Yields the cluster and that node's id."""
    pytest.importorskip("ray", reason="the ray extra is not installed")
    from ray._common.utils import reset_ray_address
    from ray.cluster_utils import Cluster

    cluster = Cluster()
    try:
        cluster.add_node(num_cpus=0)
        node = cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        # Cluster records itself as this machine's current cluster, which a bare ray.init() would
        # join anyway: forget that, so RAY_ADDRESS is the only way to it.
        reset_ray_address()
        monkeypatch.setenv("RAY_ADDRESS", cluster.address)
        yield cluster, node.node_id
    finally:
        cluster.shutdown()


@pytest.mark.timeout(120)
def test_ray_backend_joins_an_external_multi_node_cluster_and_leaves_it_running(
    ray_cluster: tuple[Cluster, str],
) -> None:
    """The pool joins a cluster it did not start: its actors run on the node Ray picks, and
    close() ends them but leaves the cluster up."""
    import ray

    cluster, node_id = ray_cluster
    tasks = list(load_humaneval())[:2]
    by_id = {t.task_id: t for t in tasks}
    with EnvPool(num_envs=2, num_workers=2, backend="ray", tasks=tasks) as p:
        _, infos = p.reset()
        serving = {info["env_id"]: info["task_id"] for info in infos}
        assert sorted(serving) == [0, 1]
        p.send(np.stack([encode_bytes(by_id[serving[e]].canonical_solution, ACTION_BYTES) for e in range(2)]))
        _, rewards, _, _, infos, env_ids, _ = p.recv()
        assert sorted(env_ids.tolist()) == [0, 1]
        assert rewards.tolist() == [1.0] * 2 and {i["status"] for i in infos} == {"ok"}
        p.send(np.stack([encode_bytes("    pass\n", ACTION_BYTES)] * 2))
        _, rewards, *_ = p.recv()
        assert rewards.tolist() == [0.0] * 2
        # Only the second node offers CPUs: an actor under any other raylet (the head's, or one of
        # a cluster the pool started itself) fails here.
        actors = serial_actor_nodes()
        assert list(actors.values()) == [node_id] * 2, (actors, node_id)
    assert not ray.is_initialized()  # close() disconnected the driver...
    deadline = time.monotonic() + 10  # ...and Ray reaps a gone driver's actors asynchronously
    while serial_actor_nodes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert serial_actor_nodes() == {}
    assert cluster.remaining_processes_alive()
    ray.init()  # the cluster still serves a new driver, with both nodes
    try:
        assert [n["Alive"] for n in ray.nodes()] == [True, True]
    finally:
        ray.shutdown()
