"""The seccomp filters in real kernels: this machine's, and (under qemu) aarch64's and riscv64's.

Each run makes every denied syscall, by the number in the guest's own C headers, with the filter
installed, and checks what must still work (fork, threads through glibc's clone3 fallback, plain
clone) and, on aarch64, that a 32-bit ARM program is killed. The foreign kernels need
`scripts/setup_seccomp_kernels.sh` (root: qemu, cross compilers, two pinned kernels); without it
they are skipped with that reason.
"""

from __future__ import annotations

import dataclasses
import errno
import platform
import shutil
from pathlib import Path

import pytest

from envpool.sandbox import seccomp
from tests.envpool.seccomp_kernels import (
    GUESTS,
    compile_static,
    guest_filter,
    kernel_image,
    missing_tools,
    run_in_guest,
    run_on_host,
)

SETUP = "as root, run `bash scripts/setup_seccomp_kernels.sh` (`make setup` does)"


def _host_abi(tmp_path: Path) -> seccomp.Abi:
    """This machine's ABI, where it has a filter and gcc can build the probe statically."""
    abi = seccomp.native_abi()
    if abi is None:
        pytest.skip(f"rlide has no seccomp filter for {platform.machine()}")
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to build the probe (apt-get install gcc libc6-dev)")
    empty = tmp_path / "empty.c"
    empty.write_text("int main(void) { return 0; }\n")
    try:
        compile_static("gcc", empty, tmp_path / "empty")
    except RuntimeError as exc:
        pytest.skip(f"gcc cannot link statically (apt-get install libc6-dev): {exc}")
    return abi


def test_the_host_filter_denies_every_listed_call_in_this_kernel(tmp_path: Path) -> None:
    abi = _host_abi(tmp_path)
    report = run_on_host(seccomp.assemble(seccomp.build_program(abi)), tmp_path)
    assert report.problems() == [], report.output
    assert report.calls["unshare"] == (errno.EPERM, errno.EINVAL, errno.EPERM)  # -1: unknown flags
    assert report.checks["clone_newuser_denied"] == "ok"


def test_a_wrong_number_in_a_table_is_caught_by_the_probe(tmp_path: Path) -> None:
    """The probe takes its numbers from the C headers, not from rlide's tables: a filter built
    from a table with one wrong entry lets that call through, and the report says so."""
    abi = _host_abi(tmp_path)
    wrong = dataclasses.replace(abi, numbers={**abi.numbers, "bpf": abi.numbers["bpf"] + 1000})
    report = run_on_host(seccomp.assemble(seccomp.build_program(wrong)), tmp_path)
    expected, control, filtered = report.calls["bpf"]
    assert filtered == control != expected
    assert report.problems() == [f"bpf: errno {control} under the filter, expected {expected} (unfiltered: {control})"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(GUESTS))
def test_the_filter_works_in_a_kernel_of_its_own_abi(name: str, tmp_path: Path) -> None:
    guest = GUESTS[name]
    if missing := missing_tools(guest):
        pytest.skip(f"{', '.join(missing)} not installed: {SETUP}")
    image = kernel_image(guest)
    if image is None:
        pytest.skip(f"the pinned {name} kernel is not cached: {SETUP}")
    report = run_in_guest(guest, image, guest_filter(guest), tmp_path)
    assert report.problems() == [], report.output[-4000:]
    assert set(report.calls) == {*seccomp.DENY_EPERM, *seccomp.DENY_ENOSYS}
    for check in ("install", "clone_newuser_denied", "plain_clone_runs", "pthread_create", "fork"):
        assert report.checks[check] == "ok", check
    if guest.foreign_cc is not None:  # the 32-bit ABI ran before the filter and was killed under it
        assert report.checks["foreign_abi_runs_unfiltered"] == "ok"
        assert report.checks["foreign_abi_killed"] == "ok"
