"""Real attacks against the default sandbox: each must end with the right status, host untouched."""

from __future__ import annotations

import json
import os
import signal
import socket
import textwrap
import threading
import uuid
from pathlib import Path

import anyio
import pytest

from envpool.sandbox.base import RunRequest, RunResult, RunStatus
from envpool.sandbox.bwrap import BwrapConfig, BwrapSandbox
from tests.envpool.conftest import live_sandbox_uid_pids, requires_bwrap

pytestmark = [requires_bwrap, pytest.mark.anyio]


async def run(sb: BwrapSandbox, code: str, bound_s: float = 20.0, **kw: object) -> RunResult:
    with anyio.fail_after(bound_s):
        result = await anyio.to_thread.run_sync(sb.run, RunRequest(code=textwrap.dedent(code), **kw))
    assert live_sandbox_uid_pids() == [], "processes of a sandbox uid survived the run"
    return result


async def assert_still_serving(sb: BwrapSandbox) -> None:
    result = await run(sb, "print('alive')", bound_s=10)
    assert result.status is RunStatus.OK and result.stdout == "alive\n"


async def test_trivial_program(sandbox: BwrapSandbox) -> None:
    result = await run(sandbox, "import sys; print('hi'); print('err', file=sys.stderr)")
    assert result.status is RunStatus.OK and result.exit_code == 0
    assert result.stdout == "hi\n" and result.stderr == "err\n"


async def test_nonzero_exit_is_error(sandbox: BwrapSandbox) -> None:
    result = await run(sandbox, "raise SystemExit(3)")
    assert result.status is RunStatus.ERROR and result.exit_code == 3
    result = await run(sandbox, "1/0")
    assert result.status is RunStatus.ERROR and "ZeroDivisionError" in result.stderr


async def test_a_failing_program_shows_its_own_traceback(sandbox: BwrapSandbox) -> None:
    """What `python3 main.py` prints: the program's frames from the top, none of the sandbox's."""
    result = await run(sandbox, "def f(x):\n    return 1 / x\n\nf(0)\n")
    assert result.stderr.startswith('Traceback (most recent call last):\n  File "main.py", line 4, in <module>\n')
    assert result.stderr.endswith("ZeroDivisionError: division by zero\n") and "forkserver" not in result.stderr
    result = await run(sandbox, "def f(:\n    pass\n")
    assert result.stderr.startswith('  File "main.py", line 1\n    def f(:\n')  # no traceback: nothing ran
    assert result.stderr.endswith("SyntaxError: invalid syntax\n")


async def test_loopback_socket_to_host_process(sandbox: BwrapSandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    abstract = f"\0rlide-test-{uuid.uuid4().hex}"
    unix_listener = socket.socket(socket.AF_UNIX)
    unix_listener.bind(abstract)
    unix_listener.listen(1)
    unix_listener.settimeout(0.2)
    code = f"""
        import socket
        s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
        s.sendall(b"escaped")
    """
    result = await run(sandbox, code)
    assert result.status is RunStatus.ERROR
    assert "ConnectionRefusedError" in result.stderr or "OSError" in result.stderr
    code = f"""
        import socket
        s = socket.socket(socket.AF_UNIX)
        s.connect({abstract!r})
    """
    result = await run(sandbox, code)
    assert result.status is RunStatus.ERROR
    for srv in (listener, unix_listener):
        with pytest.raises(TimeoutError):
            srv.accept()  # nobody ever reached the host's listeners
        srv.close()
    # No route anywhere: the sandbox's network namespace has loopback only (and it is down).
    result = await run(sandbox, "import socket; print(sorted(name for _, name in socket.if_nameindex()))")
    assert result.status is RunStatus.OK and result.stdout.strip() == "['lo']"


async def test_read_host_home_and_environment(sandbox: BwrapSandbox) -> None:
    secret = uuid.uuid4().hex
    path = Path.home() / f".rlide-secret-{uuid.uuid4().hex[:8]}"
    path.write_text(secret)
    os.environ["RLIDE_TEST_SECRET"] = secret
    try:
        code = f"""
            import glob, os
            for p in [{str(path)!r}, "/etc/passwd", "/etc/shadow", {str(Path.cwd() / "pyproject.toml")!r}]:
                try:
                    print(open(p).read())
                except OSError as e:
                    print("denied", p, type(e).__name__)
            for p in glob.glob("/proc/*/environ"):
                try:
                    print(open(p, "rb").read())
                except OSError:
                    pass
            print(dict(os.environ))
            print(os.listdir("/"))
        """
        result = await run(sandbox, code)
    finally:
        path.unlink()
        del os.environ["RLIDE_TEST_SECRET"]
    assert result.status is RunStatus.OK
    assert secret not in result.stdout and secret not in result.stderr
    assert result.stdout.count("denied") == 4
    assert "home" not in result.stdout and "root'" not in result.stdout


async def test_write_outside_workspace(sandbox: BwrapSandbox, tmp_path: Path) -> None:
    host_target = tmp_path / "pwned"
    # The workspace is /ws itself (a tmpfs of the run's own): everything else must refuse.
    targets = ["/tmp/x", "/usr/x", "/opt/python/x", "/opt/rlide/forkserver.py", "/run/x", "/etc/x",
               "/x", "/dev/shm/x", str(host_target), "/proc/sys/kernel/hostname", "/proc/cmdline"]  # fmt: skip
    code = f"""
        import os
        for p in {targets!r}:
            try:
                with open(p, "w") as fh:
                    fh.write("pwned")
                print("WROTE", p)
            except OSError as e:
                print("refused", p, type(e).__name__)
        open("inside.txt", "w").write("fine")
        print(open("inside.txt").read())
    """
    result = await run(sandbox, code)
    assert result.status is RunStatus.OK, result.stderr
    assert "WROTE" not in result.stdout and result.stdout.endswith("fine\n")
    assert not host_target.exists()
    # The next run gets a new, empty workspace: nothing carries over.
    result = await run(sandbox, "import os; print(sorted(os.listdir('.')))")
    assert result.stdout == "[]\n"


async def test_fork_bomb(sandbox: BwrapSandbox) -> None:
    code = """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    result = await run(sandbox, code, timeout_s=2, max_processes=32)
    assert result.status is RunStatus.TIMEOUT
    await assert_still_serving(sandbox)


async def test_shell_fork_bomb(sandbox: BwrapSandbox) -> None:
    result = await run(sandbox, "", timeout_s=1)  # warm up
    req = RunRequest(language="shell", code="b(){ b | b & }; b", timeout_s=2, max_processes=32)
    with anyio.fail_after(20):
        result = await anyio.to_thread.run_sync(sandbox.run, req)
    assert result.status in (RunStatus.TIMEOUT, RunStatus.ERROR, RunStatus.OK)
    assert live_sandbox_uid_pids() == []
    await assert_still_serving(sandbox)


async def test_memory_bomb(sandbox: BwrapSandbox) -> None:
    result = await run(sandbox, "x = bytearray(8 * 1024**3)", memory_mb=256)
    assert result.status is RunStatus.MEMORY_LIMIT
    code = """
        chunks = []
        while True:
            chunks.append(b"x" * (16 * 1024 * 1024))
    """
    result = await run(sandbox, code, memory_mb=256)
    assert result.status is RunStatus.MEMORY_LIMIT
    await assert_still_serving(sandbox)


async def test_many_processes_times_memory_hit_the_cgroup_ceiling() -> None:
    sb = BwrapSandbox(BwrapConfig(server_memory_mb=768))
    try:
        if sb.cgroup_limits is None:
            pytest.skip("cgroup v1 memory/pids controllers are not usable here (not root?)")
        code = """
            import os, time
            pids = []
            for i in range(6):  # 6 x 300 MB, each under its own 512 MB rlimit, over 768 MB together
                pid = os.fork()
                if pid == 0:
                    x = bytearray(300 * 1024 * 1024)
                    for j in range(0, len(x), 4096):
                        x[j] = 1
                    time.sleep(0.5)
                    os._exit(0)
                pids.append(pid)
            raise SystemExit(sum(os.waitpid(p, 0)[1] != 0 for p in pids))
        """
        result = await run(sb, code, memory_mb=512, timeout_s=20)
        assert result.status is RunStatus.MEMORY_LIMIT, result
        await assert_still_serving(sb)
    finally:
        sb.close()


async def test_infinite_loop_wall_and_cpu(sandbox: BwrapSandbox) -> None:
    result = await run(sandbox, "while True: pass", timeout_s=1.0)
    assert result.status is RunStatus.TIMEOUT and 900 <= result.duration_ms < 3000
    result = await run(sandbox, "while True: pass", timeout_s=10.0, cpu_s=1.0)
    assert result.status is RunStatus.TIMEOUT and result.duration_ms < 5000


async def test_output_flood(sandbox: BwrapSandbox) -> None:
    result = await run(sandbox, "while True: print('x' * 1000)", max_output_bytes=64 * 1024)
    assert result.status is RunStatus.OUTPUT_LIMIT and result.truncated
    assert "[rlide: output truncated at 65536 bytes]" in result.stdout
    assert len(result.stdout) < 70 * 1024


async def test_sleep_past_timeout(sandbox: BwrapSandbox) -> None:
    result = await run(sandbox, "import time; time.sleep(100)", timeout_s=0.5)
    assert result.status is RunStatus.TIMEOUT and result.duration_ms < 2000


async def test_kill_the_parent(sandbox: BwrapSandbox) -> None:
    code = """
        import os, signal
        for target in (os.getppid(), 1, 2):  # the server is PID 1 of the namespace
            try:
                os.kill(target, signal.SIGKILL)
                print("KILLED", target)
            except OSError as e:
                print("refused", target, type(e).__name__)
        try:
            os.kill(-1, signal.SIGKILL)  # everything this uid may signal: nothing but itself, in here
        except ProcessLookupError:
            print("nothing to kill")
        print("still here")
    """
    result = await run(sandbox, code)
    assert "KILLED" not in result.stdout
    assert result.status in (RunStatus.OK, RunStatus.KILLED)
    result = await run(sandbox, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert result.status is RunStatus.KILLED and result.exit_code == -9
    await assert_still_serving(sandbox)


async def test_leftover_processes_are_killed(sandbox: BwrapSandbox) -> None:
    code = """
        import os, subprocess
        subprocess.Popen(["sleep", "1000"], start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                import time
                time.sleep(1000)
            os._exit(0)
        print("parent done")
    """
    result = await run(sandbox, code)  # `run` asserts no sandbox-uid process is left on the host
    assert result.status is RunStatus.OK and result.stdout == "parent done\n"


FORKS_A_SLEEPER = """
    import os, threading, time
    def fork_a_sleeper():
        if os.fork() == 0:
            time.sleep(1000)
            os._exit(0)
    {starter}
    time.sleep(0.2)
    print("main done")
"""


@pytest.mark.parametrize(
    "starter",
    ["fork_a_sleeper()", "threading.Thread(target=lambda: (fork_a_sleeper(), time.sleep(60)), daemon=True).start()"],
)
async def test_a_process_the_program_leaves_is_killed_when_it_ends(sandbox: BwrapSandbox, starter: str) -> None:
    # The server answers a finished program without scanning /proc when neither it nor the run's
    # child holds other processes. The child's own children count, and a process forked by a
    # thread is on that thread's children list, not the main thread's: both must be found.
    code = textwrap.dedent(FORKS_A_SLEEPER).format(starter=starter)
    for _ in range(3):
        result = await run(sandbox, code)  # `run` asserts no sandbox-uid process is left on the host
        assert result.status is RunStatus.OK and result.stdout == "main done\n"


ALIVE = """
import os
def alive(pid):
    # Runs user code still: not a zombie, not exiting, no SIGKILL pending, in any of its threads.
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            status = dict(l.split(":", 1) for l in open(f"/proc/{pid}/task/{tid}/status") if ":" in l)
            flags = int(open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()[6])
        except OSError:
            continue
        pending = int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)
        if status["State"].split()[0] not in "ZX" and not flags & 4 and not pending & (1 << 8):
            return True
    return False
print(alive(TARGET), os.getpid() != TARGET)
"""


async def test_a_finished_runs_process_is_gone_before_the_next_run(sandbox: BwrapSandbox) -> None:
    # The server answers as soon as a Python run reports its exit code, while the kernel still
    # tears the child down (the next run, of another uid, may start meanwhile): by then it is
    # killed and runs no code. Threads still running when the program ends (daemon threads) die
    # with it.
    code = """
        import os, threading, time
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        print(os.getpid())
    """
    first = await run(sandbox, code)
    pid = int(first.stdout)
    second = await run(sandbox, ALIVE.replace("TARGET", str(pid)))
    assert first.status is RunStatus.OK and second.stdout == "False True\n", second.stderr
    failed = await run(sandbox, "import sys; sys.exit(3)")
    assert failed.status is RunStatus.ERROR and failed.exit_code == 3  # the reported code is the result's


async def test_a_program_that_reports_its_own_exit_ends_its_run(sandbox: BwrapSandbox) -> None:
    # The report is the child's to write, so the program can write it too: that ends its run with
    # that code at once, as os._exit would. It gains nothing: it is killed, its code is its own.
    code = """
        import os, struct, time
        print("before", flush=True)
        os.write(4, struct.pack(">i", 7))
        time.sleep(30)
        print("after", flush=True)
    """
    result = await run(sandbox, code, timeout_s=10)
    assert (result.status, result.exit_code, result.stdout) == (RunStatus.ERROR, 7, "before\n")


async def test_namespaces_and_ptrace_are_denied_threads_still_work(sandbox: BwrapSandbox) -> None:
    code = """
        import ctypes, subprocess, threading
        libc = ctypes.CDLL(None, use_errno=True)
        for name, call in [("userns", lambda: libc.unshare(0x10000000)), ("mountns", lambda: libc.unshare(0x20000)),
                           ("ptrace", lambda: libc.ptrace(16, 1, 0, 0))]:
            print(name, call(), ctypes.get_errno())
        t = threading.Thread(target=print, args=("thread ok",))
        t.start(); t.join()
        print(subprocess.run(["echo", "subprocess ok"], capture_output=True, text=True).stdout.strip())
    """
    result = await run(sandbox, code)
    assert result.status is RunStatus.OK, result.stderr
    assert result.stdout.splitlines() == ["userns -1 1", "mountns -1 1", "ptrace -1 1", "thread ok", "subprocess ok"]
    shell = RunRequest(language="shell", code="unshare -Ur id")
    result = await anyio.to_thread.run_sync(sandbox.run, shell)
    assert result.status is RunStatus.ERROR and "Operation not permitted" in result.stderr


async def test_file_size_limit(sandbox: BwrapSandbox) -> None:
    result = await run(sandbox, "open('big', 'wb').write(b'x' * (3 * 1024 * 1024))", max_file_mb=1)
    assert result.status is RunStatus.ERROR and "File too large" in result.stderr


async def test_fresh_sandbox_per_run(fresh_sandbox: BwrapSandbox) -> None:
    result = await run(fresh_sandbox, "import os; print(os.getuid() != 0)")
    assert result.status is RunStatus.OK and result.stdout == "True\n"
    result = await run(fresh_sandbox, "while True: pass", timeout_s=0.5)
    assert result.status is RunStatus.TIMEOUT


async def test_concurrent_runs_use_separate_servers(sandbox: BwrapSandbox) -> None:
    results: list[RunResult] = []

    def worker() -> None:
        results.append(sandbox.run(RunRequest(code="import time; time.sleep(0.3); print('ok')")))

    with anyio.fail_after(10):
        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        await anyio.to_thread.run_sync(lambda: [t.join() for t in threads])
    assert [r.status for r in results] == [RunStatus.OK] * 3


async def test_async_cancellation_kills_the_run(sandbox: BwrapSandbox) -> None:
    from envpool.sandbox.aio import run_async

    with anyio.fail_after(10):
        with anyio.move_on_after(0.3):
            await run_async(sandbox, RunRequest(code="import time; time.sleep(60)", timeout_s=120))
        while live_sandbox_uid_pids():  # the run is killed, not left to its 120 s timeout
            await anyio.sleep(0.02)
        result = await run_async(sandbox, RunRequest(code="print('next')"))
    assert result.stdout == "next\n"


def _sandbox_pythons(sb: BwrapSandbox, name: str = "python") -> dict[int, int]:
    """pid -> parent pid of every process called `name` in the sandbox's process tree: the
    fork-server (python), or the children it keeps forked for the next runs (rlide-spare)."""
    from envpool.sandbox.cgroups import process_tree

    server = sb._live[0].server
    assert server.proc is not None
    found = {}
    for pid in process_tree(server.proc.pid):
        try:
            if name in Path(f"/proc/{pid}/comm").read_text():
                found[pid] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    return found


async def test_server_death_is_a_sandbox_error_and_recovers() -> None:
    sb = BwrapSandbox(BwrapConfig())
    try:
        sb.warm(1)
        pythons = _sandbox_pythons(sb)
        server_pid = next(pid for pid, parent in pythons.items() if parent not in pythons)

        async def kill_server_soon() -> None:
            await anyio.sleep(0.3)
            os.kill(server_pid, signal.SIGKILL)  # the fork-server inside the sandbox dies mid-run

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_server_soon)
                req = RunRequest(code="import time; time.sleep(30)", timeout_s=60)
                result = await anyio.to_thread.run_sync(sb.run, req)
        assert result.status is RunStatus.SANDBOX_ERROR and "server" in result.detail
        assert live_sandbox_uid_pids() == []  # the namespace died with its server
        await assert_still_serving(sb)
    finally:
        sb.close()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


async def test_a_spare_child_that_dies_while_waiting_is_replaced() -> None:
    sb = BwrapSandbox(BwrapConfig())
    try:
        sb.warm(1)
        await assert_still_serving(sb)
        with anyio.fail_after(10):  # the child for the next run is forked as a run ends (CI once looked too soon)
            while not (spares := list(_sandbox_pythons(sb, "rlide-spare"))):
                await anyio.sleep(0.01)
        assert len(spares) == 1, spares  # one, and it waits
        os.kill(spares[0], signal.SIGKILL)
        with anyio.fail_after(5):  # SIGKILL lands asynchronously: wait until it is a zombie
            while _state(spares[0]) not in ("Z", ""):
                await anyio.sleep(0.01)
        await assert_still_serving(sb)  # its dead pipe is noticed; a fresh child runs the program
        await assert_still_serving(sb)
        assert spares[0] not in _sandbox_pythons(sb, "")  # reaped, not left a zombie
    finally:
        sb.close()


PLANT_FOR_THE_NEXT_RUN = """
import glob, os, time
time.sleep(0.2)  # let the next run's child appear
mine = {str(os.getpid()), "self", "thread-self"}
reached = []
for path in glob.glob("/proc/*/root/ws") + glob.glob("/proc/*/cwd") + glob.glob("/ws/*/"):
    if path.split("/")[2] in mine:
        continue
    try:
        with open(os.path.join(path, "planted.py"), "w") as fh:
            fh.write("print('planted')")
        reached.append(path)
    except OSError:
        pass
open("planted.py", "w").write("print('planted')")  # its own workspace: gone with it
print(reached)
"""


async def test_a_run_cannot_plant_files_in_the_next_runs_workspace(sandbox: BwrapSandbox) -> None:
    # A request that follows the last answer at once has the next run's child forked, with its
    # workspace, while its program runs: a tmpfs in a mount namespace of its own, which no other
    # run can reach (not through /proc/<pid>/root or cwd either). Back to back in one thread.
    def back_to_back() -> tuple[RunResult, RunResult]:
        sandbox.run(RunRequest(code="pass"))
        plant = sandbox.run(RunRequest(code=PLANT_FOR_THE_NEXT_RUN))
        return plant, sandbox.run(RunRequest(code="import os; print(sorted(os.listdir('.')))"))

    for _ in range(3):
        plant, after = await anyio.to_thread.run_sync(back_to_back)
        assert plant.status is RunStatus.OK and plant.stdout == "[]\n", plant
        assert after.stdout == "[]\n"


async def test_limits_that_hit_before_the_child_is_set_up_still_kill_it(sandbox: BwrapSandbox) -> None:
    """Regression: a cancel or timeout landing before the child's setsid()/uid drop must kill it."""
    from envpool.sandbox.base import CancelToken

    result = await run(sandbox, "import time; time.sleep(5)", bound_s=2, timeout_s=0.001)
    assert result.status is RunStatus.TIMEOUT
    token = CancelToken()
    token.cancel()
    with anyio.fail_after(2):
        req = RunRequest(code="import time; time.sleep(5)")
        result = await anyio.to_thread.run_sync(sandbox.run, req, token)
    token.close()
    assert result.status is RunStatus.KILLED


UNPRIVILEGED_SCRIPT = """
import json
from envpool.sandbox.bwrap import BwrapConfig, BwrapSandbox
from envpool.sandbox.base import RunRequest
sb = BwrapSandbox(BwrapConfig(python_home="/usr"))
out = {"privileged": sb._privileged}
out["uid"] = sb.run(RunRequest(code="import os; print(os.getuid())")).stdout.strip()
leftover = "import subprocess; subprocess.Popen(['sleep', '1000'], start_new_session=True)"
out["leftover"] = sb.run(RunRequest(code=leftover)).status.value
out["loop"] = sb.run(RunRequest(code="while True: pass", timeout_s=0.5)).status.value
out["net"] = sb.run(RunRequest(code="import socket; socket.create_connection(('127.0.0.1', 22), 1)")).status.value
sb.close()
print(json.dumps(out))
"""


async def test_unprivileged_user_mode(tmp_path: Path) -> None:
    """The fallback for non-root hosts: bwrap in a user namespace, no uid drop, PID-namespace sweep."""
    import shutil
    import subprocess
    import sys

    system_python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if os.geteuid() != 0 or shutil.which("runuser") is None or not os.path.exists(system_python):
        pytest.skip("needs root (to become nobody), runuser and a system python of the same version")
    root = Path(__file__).resolve().parents[2]
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": f"{root}:{site}"}
    tmp_path.chmod(0o777)
    runuser = shutil.which("runuser")
    assert runuser is not None
    cmd = [runuser, "-u", "nobody", "--", system_python, "-c", UNPRIVILEGED_SCRIPT]
    with anyio.fail_after(60):
        proc = await anyio.run_process(cmd, env=env, cwd=tmp_path, check=False)
    if proc.returncode != 0 and b"setting up uid map" in proc.stderr:
        pytest.skip("unprivileged user namespaces are disabled on this kernel")
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert out == {"privileged": False, "uid": "65534", "leftover": "ok", "loop": "timeout", "net": "error"}
    nobody_sleeps = subprocess.run(["pgrep", "-u", "nobody", "sleep"], capture_output=True, text=True).stdout
    assert nobody_sleeps == ""
