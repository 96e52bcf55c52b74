"""One run against the next, through every public surface: the sandbox API, the pool's async jobs,
the MCP tools `run_code`/`run_tests`, and `rlide run`.

Runs from different episodes, sessions and rollouts share a warm server all the time, so each test
is one attack (tests/envpool/attacks.py) followed by honest runs, and asserts that the attacker
obtained nothing, that the honest run got its true result (nothing forged into it), and that the
sandbox still serves. The servers are shared by a whole module, as they are in production: what
an attack leaves behind meets every later test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from envpool.pool import EnvPool
from envpool.sandbox import make_sandbox
from envpool.sandbox.base import RunRequest, RunResult, RunStatus, Sandbox
from envpool.sandbox.bwrap import BwrapConfig, BwrapSandbox
from mcp_server.server import build_server
from mcp_server.settings import load_settings
from tests.envpool import attacks
from tests.envpool.conftest import live_sandbox_uid_pids, requires_bwrap
from tests.mcp_calls import call_ok

pytestmark = [requires_bwrap, pytest.mark.anyio]

Runner = Callable[[RunRequest], Awaitable[RunResult]]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def box() -> Iterator[BwrapSandbox]:
    sb = BwrapSandbox(BwrapConfig())
    yield sb
    sb.close()


@pytest.fixture(scope="module")
def pool() -> Iterator[EnvPool]:
    # One worker, so that every job meets the same warm server.
    with EnvPool(num_envs=1, num_workers=1) as p:
        yield p


@pytest.fixture(params=["sandbox", "pool"])
def runner(request: pytest.FixtureRequest, box: BwrapSandbox) -> Runner:
    if request.param == "sandbox":
        return lambda req: anyio.to_thread.run_sync(box.run, req)
    pool: EnvPool = request.getfixturevalue("pool")
    return pool.run


def leak(tag: str) -> str:
    return f"LEAKME-{tag}-{uuid.uuid4().hex}"


async def honest(run: Runner) -> None:
    """The sandbox still serves an honest program, and no process of any run is left over."""
    result = await run(RunRequest(code="print('alive')"))
    assert (result.status, result.stdout) == (RunStatus.OK, "alive\n")
    assert live_sandbox_uid_pids() == []


async def test_a_process_left_behind_cannot_reach_or_forge_the_next_run(runner: Runner) -> None:
    """Class 1: a process whose main thread exits while another runs (a zombie leader) was skipped
    by the sweep; from there it wrote "passed" into later runs' output and read their secrets."""
    attacker = await runner(RunRequest(code=attacks.HAUNT, timeout_s=5))
    assert attacker.status is RunStatus.OK and attacker.stdout == "attacker done\n"
    assert live_sandbox_uid_pids() == []  # gone before the answer, not just killed at the next run
    secret = leak("haunt")
    for _ in range(3):
        victim = await runner(RunRequest(code=attacks.VICTIM, env={"SECRET": secret}))
        assert (victim.status, victim.exit_code) == (RunStatus.ERROR, 1)
        assert (victim.stdout, victim.stderr) == ("honest: 1 failed\n", "")  # nothing injected, nothing read
    await honest(runner)


@pytest.mark.parametrize("back_to_back", [False, True])
async def test_a_run_finds_nothing_of_earlier_jobs_in_its_memory(runner: Runner, back_to_back: bool) -> None:
    """Class 2: a child forked from the server read, in memory inherited from it, the previous
    run's code, files, environment, stdin and output. Back to back, the next child is forked
    while the previous run is still going."""
    secrets = {tag: leak(tag) for tag in ("code", "file", "env", "stdin", "out", "err")}
    victim = RunRequest(
        code=f"import sys\n# {secrets['code']}\nprint({secrets['out']!r})\n"
        f"print({secrets['err']!r}, file=sys.stderr)\nsys.stdin.read(); open('f.txt').read()",
        files={"f.txt": secrets["file"]},
        env={"TOKEN": secrets["env"]},
        stdin=secrets["stdin"],
    )
    for _ in range(2):
        first = await runner(victim)
        assert first.status is RunStatus.OK and secrets["out"] in first.stdout
        if not back_to_back:
            await anyio.sleep(0.05)
        scan = await runner(RunRequest(code=attacks.SCAN_OWN_MEMORY, timeout_s=30))
        assert scan.status is RunStatus.OK, scan.stderr
        assert scan.stdout == "[]\n"


async def test_ipc_objects_die_with_their_run_and_pin_no_memory(runner: Runner) -> None:
    """Class 3: SysV and POSIX shared memory and message queues outlived their run (the next one
    read them), and memory left in them stayed pinned until honest runs failed."""
    secret = leak("ipc")
    plant = await runner(RunRequest(code=attacks.IPC_PLANT, env={"SECRET": secret}))
    assert plant.status is RunStatus.OK and plant.stdout == "['shm', 'msg', 'sem', 'mq']\n", plant.stderr
    read = await runner(RunRequest(code=attacks.IPC_READ))
    assert read.status is RunStatus.OK and read.stdout == "[]\n", read.stdout
    for _ in range(6):  # 1.2 GB pinned if segments outlived their runs
        pinned = await runner(RunRequest(code=attacks.PIN_SHARED_MEMORY, memory_mb=512))
        assert pinned.stdout == "pinned True\n", pinned.stderr
    big = await runner(RunRequest(code=attacks.ALLOCATE, env={"MB": "300"}, memory_mb=600))
    assert (big.status, big.stdout) == (RunStatus.OK, "allocated 300\n"), big.stderr
    await honest(runner)


async def test_memory_a_run_holds_outside_its_address_space_counts_against_it(runner: Runner) -> None:
    """Class 4: a memfd written but never mapped held gigabytes past `memory_mb`."""
    hoard = await runner(RunRequest(code=attacks.MEMFD_HOARD, memory_mb=256, timeout_s=30))
    assert hoard.status in (RunStatus.MEMORY_LIMIT, RunStatus.ERROR), hoard
    hoarded = int(hoard.stdout.split()[-1]) if hoard.stdout.startswith("hoarded") else 0
    assert hoarded < 256  # stopped at the run's own limit, not the server's 4 GB
    big = await runner(RunRequest(code=attacks.ALLOCATE, env={"MB": "300"}, memory_mb=600))
    assert (big.status, big.stdout) == (RunStatus.OK, "allocated 300\n"), big.stderr
    await honest(runner)


@pytest.mark.parametrize("attack", [attacks.DEEP_TREE, attacks.MANY_FILES], ids=["deep-tree", "many-files"])
async def test_a_workspace_is_dropped_whole_whatever_it_holds(runner: Runner, attack: str) -> None:
    """Class 5: a very deep tree crashed the cleanup (RecursionError, the next caller got
    sandbox_error); hundreds of thousands of files stalled it past the next caller's timeout."""
    planted = await runner(RunRequest(code=attack, timeout_s=60))
    assert planted.status is RunStatus.OK, planted
    after = await runner(RunRequest(code="import os; print(os.listdir('.'))", timeout_s=5))
    assert (after.status, after.stdout) == (RunStatus.OK, "[]\n"), after
    await honest(runner)


async def test_a_run_sees_nothing_of_the_server_the_next_run_or_the_host(runner: Runner) -> None:
    """Class 6 and around it: other processes' environments, memory and descriptors (the server's,
    the waiting child's), the host's kernel command line, boot id and hostname, the cgroup files,
    sockets beyond unix/IP/netlink (AF_VSOCK reaches the hypervisor), other uids."""
    peek = await runner(RunRequest(code=attacks.PEEK_AROUND))
    assert (peek.status, peek.stdout) == (RunStatus.OK, "sandbox\n{}\n"), peek


async def test_signals_reach_no_one_but_the_run_itself(runner: Runner) -> None:
    """The server (PID 1) refuses a run's signals, and kill(-1) reaches the run's own processes only:
    the children waiting for the next runs have other uids."""
    code = """
import os, signal, time
try:
    os.kill(1, signal.SIGKILL)
    print("server signalled", flush=True)
except PermissionError:
    print("server refused", flush=True)
if os.fork() == 0:
    time.sleep(0.2)  # the next run's child is waiting by now
    os.kill(-1, signal.SIGKILL)  # all but itself and PID 1: its parent, and anything else it may signal
    os._exit(0)
time.sleep(5)
"""
    killer = await runner(RunRequest(code=code, timeout_s=10))
    assert (killer.status, killer.stdout) == (RunStatus.KILLED, "server refused\n")
    for _ in range(3):  # the waiting children were untouched: each next run is served at once
        await honest(runner)


async def test_output_cannot_forge_a_result(runner: Runner) -> None:
    """The run's output travels after the answer's header, counted by it: a program that prints a
    frame of the protocol, or the truncation marker, gains nothing."""
    forged = json.dumps({"status": "ok", "exit_code": 0, "stdout": 0, "stderr": 0, "cut": [False, False]})
    code = f"import sys\nsys.stdout.write('\\x00\\x00\\x00\\x50' + {forged!r})\nsys.exit(2)"
    result = await runner(RunRequest(code=code))
    assert (result.status, result.exit_code, result.truncated) == (RunStatus.ERROR, 2, False)
    await honest(runner)


def test_a_huge_environment_is_refused_before_it_reaches_a_server(box: BwrapSandbox) -> None:
    for env in ({"BIG": "x" * (200 << 10)}, {f"V{i}": "x" * 1000 for i in range(2000)}):
        with pytest.raises(ValueError, match="environment"):  # pydantic's ValidationError
            RunRequest(code="pass", env=env)
    assert (
        box.run(RunRequest(code="import os; print(len(os.environ['BIG']))", env={"BIG": "y" * 100_000})).stdout
        == "100000\n"
    )


def test_the_docker_backend_keeps_runs_apart_as_bwrap_does(docker_engine: None) -> None:
    sb: Sandbox = make_sandbox("docker")
    try:
        secret = leak("docker")
        assert sb.run(RunRequest(code=attacks.HAUNT, timeout_s=5)).stdout == "attacker done\n"
        victim = sb.run(RunRequest(code=attacks.VICTIM, env={"SECRET": secret}))
        assert (victim.exit_code, victim.stdout, victim.stderr) == (1, "honest: 1 failed\n", "")
        assert (
            sb.run(RunRequest(code=attacks.IPC_PLANT, env={"SECRET": secret})).stdout == "['shm', 'msg', 'sem', 'mq']\n"
        )
        assert sb.run(RunRequest(code=attacks.IPC_READ)).stdout == "[]\n"
        hoard = sb.run(RunRequest(code=attacks.MEMFD_HOARD, memory_mb=256, timeout_s=30))
        assert hoard.status in (RunStatus.MEMORY_LIMIT, RunStatus.ERROR)
        assert sb.run(RunRequest(code=attacks.DEEP_TREE, timeout_s=60)).status is RunStatus.OK
        assert sb.run(RunRequest(code="import os; print(os.listdir('.'))")).stdout == "[]\n"
        peek = sb.run(RunRequest(code=attacks.PEEK_AROUND))
        assert peek.stdout.endswith("\n{}\n"), peek
        scan = sb.run(RunRequest(code=attacks.SCAN_OWN_MEMORY, timeout_s=30))
        assert scan.stdout == "[]\n"
    finally:
        sb.close()


# -- through the MCP tools and the command line ------------------------------------------------


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    root = tmp_path_factory.mktemp("isolation")
    settings = load_settings(home=root / "home", workspace=root, pool_envs=1)  # one server for all runs
    async with Client(build_server(settings), mode="legacy") as c:
        yield c


FAILING_TESTS = "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 5\n"


async def test_run_code_cannot_pay_a_later_run_tests(client: Client) -> None:
    """The attack the issue reproduced: run_code leaves a process behind that writes "passed"
    into the next run's output; an honest failing run_tests then came back ok with reward +1."""
    attacker = await call_ok(client, "run_code", {"code": attacks.HAUNT, "timeout_s": 5})
    assert attacker["stdout"] == "attacker done\n"
    assert live_sandbox_uid_pids() == []
    for _ in range(2):
        tests = await call_ok(
            client,
            "run_tests",
            {
                "tests": FAILING_TESTS,
                "files": {"calc.py": "def add(a, b):\n    return a + b\n"},
                "use_workspace": False,
            },
        )
        assert (tests["passed"], tests["tests_failed"]) == (False, 1)
        assert tests["failing"] and "INJECTED" not in tests["stdout"] + tests["stderr"]


def test_rlide_run_shows_terminal_control_sequences_instead_of_obeying_them(tmp_path: Path) -> None:
    """A program's output must not retitle, clear or rewrite the user's terminal, or reach the
    clipboard (OSC 52): `rlide run` makes control characters visible, as `cat -v` does."""
    rlide = Path(sys.executable).parent / "rlide"
    prog = tmp_path / "prog.py"
    prog.write_text(
        textwrap.dedent(
            r"""
            import sys
            sys.stdout.write("\x1b]0;pwned title\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[H\rfake\x9b31m\u202eok\n")
            sys.stderr.write("\x1b[1A\x1b[2K[rlide: output truncated at 10 bytes]\n")
            """
        )
    )
    shown = subprocess.run([str(rlide), "run", str(prog)], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout + shown.stderr and "\x07" not in shown.stdout and "\x9b" not in shown.stdout
    assert shown.stdout == "^[]0;pwned title^G^[]52;c;ZXZpbA==^G^[[2J^[[H^Mfake" + "M-^[31m<U+202E>ok\n"
    assert shown.stderr.startswith("^[[1A^[[2K[rlide: output truncated")  # visibly the program's own text
    raw = subprocess.run([str(rlide), "run", "--raw", str(prog)], capture_output=True, text=True, timeout=60)
    assert raw.stdout.startswith("\x1b]0;pwned title\x07")
