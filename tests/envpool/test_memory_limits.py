"""memory_mb limits what a run holds, not the address space it reserves (issue 34: a real suite with
threaded tests died with `INTERNALERROR> MemoryError` under a 1 GiB address-space cap while it held
184 MB). With a memory group per run (root, cgroup v1) the group does the limiting; without one the
address-space cap stays and says so."""

from __future__ import annotations

import os
import resource
import textwrap
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from envpool.sandbox.base import (
    RunRequest,
    RunResult,
    RunStatus,
    Sandbox,
    TestRunRequest,
    prepare_test_run,
)
from envpool.sandbox.bwrap import BwrapConfig, BwrapSandbox
from envpool.sandbox.cgroups import CGROUP_ROOT
from envpool.sandbox.docker import DockerSandbox
from tests.envpool.conftest import live_sandbox_uid_pids, requires_bwrap

requires_memory_groups = pytest.mark.skipif(
    os.geteuid() != 0 or not (CGROUP_ROOT / "memory" / "memory.limit_in_bytes").exists(),
    reason="no memory group per run: needs root and the cgroup v1 memory controller",
)

GIB = 1 << 30
THREADS = 40
"""Threads alive at once: under the default `max_processes` (64), which counts threads."""

RESERVING_THREADS = f"""
import resource, threading
# Each thread reserves a 128 MiB stack and, through malloc, a share of glibc's 64 MiB arenas, and
# touches a few KB of either: gigabytes of address space, a few MB held.
threading.stack_size(128 << 20)
started = threading.Barrier({THREADS} + 1, timeout=30)
done = threading.Event()

def work():
    scratch = bytearray(16 << 10)
    started.wait()
    done.wait(30)

threads = [threading.Thread(target=work) for _ in range({THREADS})]
for thread in threads:
    thread.start()
started.wait()
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(int(status["VmSize"].split()[0]) << 10, int(status["VmRSS"].split()[0]) << 10)
print(resource.getrlimit(resource.RLIMIT_AS)[0])
done.set()
for thread in threads:
    thread.join()
"""
"""Prints the address space reserved and the memory held (bytes), then its address-space limit."""

TOUCH_400_MB = """
block = bytearray(400 << 20)
for page in range(0, len(block), 4096):
    block[page] = 1
print("held", len(block) >> 20)
"""

THREADED_PYTEST = f"""
import threading
from concurrent.futures import ThreadPoolExecutor


def test_a_pool_of_threads_with_large_stacks():
    threading.stack_size(128 << 20)
    barrier = threading.Barrier({THREADS}, timeout=30)

    def task(n):
        scratch = bytearray(16 << 10)
        barrier.wait()  # all {THREADS} threads alive at once
        return n * 2

    with ThreadPoolExecutor(max_workers={THREADS}) as pool:
        assert sum(pool.map(task, range({THREADS}))) == {THREADS} * ({THREADS} - 1)
"""


def run(sb: Sandbox, code: str, memory_mb: int = 512) -> RunResult:
    result = sb.run(RunRequest(code=textwrap.dedent(code), timeout_s=60, memory_mb=memory_mb))
    assert live_sandbox_uid_pids() == [], "processes of a sandbox uid survived the run"
    return result


def assert_threads_pass(sb: Sandbox) -> None:
    """The threaded program runs under memory_mb=512 while reserving several GiB, unlimited."""
    result = run(sb, RESERVING_THREADS, memory_mb=512)
    assert result.status is RunStatus.OK, (result.detail, result.stderr[-2000:])
    reserved, held = map(int, result.stdout.split()[:2])
    assert reserved > 4 * GIB, "the program must reserve far more address space than memory_mb"
    assert held < 256 << 20
    assert int(result.stdout.split()[2]) == resource.RLIM_INFINITY


def assert_over_limit_is_memory_limit(sb: Sandbox) -> None:
    result = run(sb, TOUCH_400_MB, memory_mb=256)
    assert result.status is RunStatus.MEMORY_LIMIT, (result.status, result.detail, result.stderr[-2000:])
    assert "held" not in result.stdout and "memory_mb=256" in result.detail, result.detail


@pytest.fixture(params=["bwrap", "bwrap-fresh"])
def grouped_sandbox(request: pytest.FixtureRequest) -> Iterator[BwrapSandbox]:
    """The module's warm or fresh bwrap sandbox (conftest), whose runs each have a memory group."""
    yield request.getfixturevalue("sandbox" if request.param == "bwrap" else "fresh_sandbox")


@requires_bwrap
@requires_memory_groups
def test_threads_that_reserve_gigabytes_run_under_a_small_memory_limit(grouped_sandbox: BwrapSandbox) -> None:
    assert_threads_pass(grouped_sandbox)


@requires_bwrap
@requires_memory_groups
def test_a_run_that_holds_more_than_its_memory_ends_with_memory_limit(grouped_sandbox: BwrapSandbox) -> None:
    assert_over_limit_is_memory_limit(grouped_sandbox)
    assert run(grouped_sandbox, "print('alive')").stdout == "alive\n"


@requires_bwrap
@requires_memory_groups
def test_a_threaded_pytest_suite_passes_as_a_test_run(sandbox: BwrapSandbox) -> None:
    test = TestRunRequest(tests=THREADED_PYTEST, memory_mb=512, timeout_s=60)
    result = sandbox.run(prepare_test_run(test))
    assert result.status is RunStatus.OK, (result.detail, result.stdout[-3000:], result.stderr[-2000:])
    assert "1 passed" in result.stdout


def test_a_test_run_may_hold_enough_for_real_suites_by_default() -> None:
    assert prepare_test_run(TestRunRequest(tests="def test_x(): pass")).memory_mb == 2048


@requires_bwrap
def test_without_a_memory_group_the_address_space_is_capped_and_says_so() -> None:
    """The fallback (not root, no cgroups, unsafe-local): memory_mb caps each process's address
    space, and a run that hits it is told why, as is the log."""
    sb = BwrapSandbox(BwrapConfig(cgroups=False))
    try:
        with capture_logs() as logs:
            limit = run(sb, "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])", memory_mb=256)
            assert limit.status is RunStatus.OK and int(limit.stdout) == 256 << 20
            result = run(sb, TOUCH_400_MB, memory_mb=256)
        assert result.status is RunStatus.MEMORY_LIMIT and "MemoryError" in result.stderr
        assert "address-space limit memory_mb=256" in result.detail and "no memory group" in result.detail
        warnings = [entry for entry in logs if entry["event"] == "sandbox.memory_by_address_space"]
        assert len(warnings) == 1 and "no memory group" in warnings[0]["detail"]
    finally:
        sb.close()


@requires_memory_groups
@pytest.mark.usefixtures("docker_engine")
def test_the_docker_backend_limits_memory_by_its_run_groups_too() -> None:
    sb = DockerSandbox()
    try:
        assert_threads_pass(sb)
        assert_over_limit_is_memory_limit(sb)
    finally:
        sb.close()
