"""The seccomp filters of every ABI, run through a BPF interpreter, and their syscall numbers
checked against the kernel's headers. In real kernels: the containment tests (x86_64, through
bwrap) and test_seccomp_kernels.py (this machine's, aarch64's and riscv64's)."""

from __future__ import annotations

import errno
import re
import struct
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from envpool.sandbox import seccomp
from envpool.sandbox.bwrap import BwrapConfig, BwrapSandbox
from envpool.sandbox.seccomp import (
    AARCH64,
    CLONE_NEW_MASK,
    DENY_ENOSYS,
    DENY_EPERM,
    RET_ALLOW,
    RET_ERRNO,
    RET_KILL_PROCESS,
    RISCV64,
    RUN_DENY_ENOSYS,
    SERVER_ALLOWED,
    SERVER_UNSHARE,
    SOCKET_FAMILIES,
    X32_SYSCALL_BIT,
    X86_64,
    Abi,
    assemble,
    build_program,
)
from tests.envpool.conftest import requires_bwrap

CLONE_NEWUSER = 0x10000000
CLONE_THREAD_FLAGS = 0x003D0F00  # what glibc's pthread_create passes: VM|FS|FILES|SIGHAND|THREAD|...
HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "generic": Path("/usr/include/asm-generic/unistd.h"),
}


def run_filter(program: bytes, arch: int, nr: int, arg0: int = 0, arg1: int = 0) -> int:
    """Evaluate a classic-BPF seccomp program on one `struct seccomp_data` (the opcodes we emit)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, arg1, 0, 0, 0, 0)
    insns = [struct.unpack_from("<HBBI", program, 8 * i) for i in range(len(program) // 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = (int(field) for field in insns[pc])
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            (acc,) = struct.unpack_from("<I", data, k)
            pc += 1
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        elif code in (0x15, 0x35, 0x45):  # BPF_JMP | JEQ / JGE / JSET, BPF_K
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)
        else:
            raise AssertionError(f"opcode {code:#x} not in this interpreter")


@pytest.mark.parametrize("abi", [X86_64, AARCH64, RISCV64], ids=["x86_64", "aarch64", "riscv64"])
def test_each_filter_denies_its_list_and_allows_the_rest(abi: Abi) -> None:
    program = assemble(build_program(abi))
    for name in DENY_EPERM:
        assert run_filter(program, abi.audit_arch, abi.numbers[name]) == RET_ERRNO | errno.EPERM, name
    for name in DENY_ENOSYS:
        assert run_filter(program, abi.audit_arch, abi.numbers[name]) == RET_ERRNO | errno.ENOSYS, name
    watched = [name for name in RUN_DENY_ENOSYS if name in abi.numbers]
    denied = {abi.numbers[name] for name in (*DENY_EPERM, *DENY_ENOSYS, *watched, "socket", "socketpair", "flock")}
    for nr in set(range(460)) - denied:  # every other syscall number, clone with harmless flags
        assert run_filter(program, abi.audit_arch, nr, CLONE_THREAD_FLAGS) == RET_ALLOW, nr
    clone = abi.numbers["clone"]
    assert run_filter(program, abi.audit_arch, clone, CLONE_THREAD_FLAGS | CLONE_NEWUSER) == RET_ERRNO | errno.EPERM
    for bit in range(32):
        if CLONE_NEW_MASK & (1 << bit):
            assert run_filter(program, abi.audit_arch, clone, 1 << bit) == RET_ERRNO | errno.EPERM, bit


@pytest.mark.parametrize("abi", [X86_64, AARCH64, RISCV64], ids=["x86_64", "aarch64", "riscv64"])
def test_runs_watch_nothing_and_their_locks_lock_nothing(abi: Abi) -> None:
    """Files every server shares would carry a run's opens and locks to a concurrent run
    (forkserver.py): watching is denied, locking returns 0 having done nothing, asking ENOLCK."""
    program = assemble(build_program(abi))
    for name in RUN_DENY_ENOSYS:
        if name in abi.numbers:
            assert run_filter(program, abi.audit_arch, abi.numbers[name]) == RET_ERRNO | errno.ENOSYS, name
    assert run_filter(program, abi.audit_arch, abi.numbers["flock"], 3, 2) == RET_ERRNO | 0
    fcntl = abi.numbers["fcntl"]
    for cmd in range(2048):
        expected = {
            **dict.fromkeys(seccomp.LOCK_SETS, RET_ERRNO | 0),
            **dict.fromkeys(seccomp.LOCK_QUERIES, RET_ERRNO | errno.ENOLCK),
            seccomp.F_NOTIFY: RET_ERRNO | errno.EINVAL,
        }.get(cmd, RET_ALLOW)
        assert run_filter(program, abi.audit_arch, fcntl, 3, cmd) == expected, cmd
    server = assemble(build_program(abi, server=True))
    for cmd in (*seccomp.LOCK_SETS, *seccomp.LOCK_QUERIES):  # the server's own calls are its own
        assert run_filter(server, abi.audit_arch, fcntl, 3, cmd) == RET_ALLOW


@pytest.mark.parametrize("abi", [X86_64, AARCH64, RISCV64], ids=["x86_64", "aarch64", "riscv64"])
def test_runs_get_unix_ip_and_netlink_sockets_only(abi: Abi) -> None:
    program = assemble(build_program(abi))
    for name in ("socket", "socketpair"):
        for family in range(64):
            expected = RET_ALLOW if family in SOCKET_FAMILIES else RET_ERRNO | errno.EAFNOSUPPORT
            assert run_filter(program, abi.audit_arch, abi.numbers[name], family) == expected, (name, family)
    assert run_filter(program, abi.audit_arch, abi.numbers["socket"], 40) == RET_ERRNO | errno.EAFNOSUPPORT  # vsock


@pytest.mark.parametrize("abi", [X86_64, AARCH64, RISCV64], ids=["x86_64", "aarch64", "riscv64"])
def test_the_server_filter_lets_the_server_make_a_runs_namespaces_and_nothing_more(abi: Abi) -> None:
    program = assemble(build_program(abi, server=True))
    unshare, mount = abi.numbers["unshare"], abi.numbers["mount"]
    assert run_filter(program, abi.audit_arch, unshare, SERVER_UNSHARE) == RET_ALLOW
    assert run_filter(program, abi.audit_arch, mount, 0) == RET_ALLOW
    for bit in range(32):
        if CLONE_NEW_MASK & (1 << bit) and not SERVER_UNSHARE & (1 << bit):  # PID, net, cgroup
            assert run_filter(program, abi.audit_arch, unshare, SERVER_UNSHARE | 1 << bit) == RET_ERRNO | errno.EPERM
    for name in set(DENY_EPERM) - set(SERVER_ALLOWED):
        assert run_filter(program, abi.audit_arch, abi.numbers[name]) == RET_ERRNO | errno.EPERM, name
    clone = abi.numbers["clone"]
    assert run_filter(program, abi.audit_arch, clone, CLONE_THREAD_FLAGS | CLONE_NEWUSER) == RET_ERRNO | errno.EPERM
    assert run_filter(program, abi.audit_arch, abi.numbers["socket"], 40) == RET_ALLOW  # the server makes none


def test_other_abis_are_killed_and_x32_is_denied() -> None:
    for abi in (X86_64, AARCH64, RISCV64):
        program = assemble(build_program(abi))
        for other in {X86_64.audit_arch, AARCH64.audit_arch, RISCV64.audit_arch, 0x40000003, 0x40000028}:
            if other != abi.audit_arch:  # the rest, i386 and 32-bit ARM included
                assert run_filter(program, other, 0) == RET_KILL_PROCESS
    x86 = assemble(build_program(X86_64))
    assert run_filter(x86, X86_64.audit_arch, X32_SYSCALL_BIT | 0) == RET_ERRNO | errno.EPERM
    assert run_filter(assemble(build_program(AARCH64)), AARCH64.audit_arch, X32_SYSCALL_BIT) == RET_ALLOW


@pytest.mark.parametrize(("abi", "header"), [(X86_64, "x86_64"), (AARCH64, "generic"), (RISCV64, "generic")])
def test_syscall_numbers_are_the_kernels(abi: Abi, header: str) -> None:
    path = HEADERS[header]
    if not path.exists():
        pytest.skip(f"{path} is not installed (Debian: linux-libc-dev)")
    defined = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR_(\w+)\s+(\d+)\b", path.read_text())}
    if "fcntl" not in defined:  # asm-generic: __NR_fcntl is __NR3264_fcntl on 64-bit ABIs
        defined["fcntl"] = int(re.search(r"#define __NR3264_fcntl\s+(\d+)", path.read_text())[1])
    watched = {name for name in RUN_DENY_ENOSYS if f"__NR_{name} " in path.read_text()}
    assert set(abi.numbers) == {*DENY_EPERM, *DENY_ENOSYS, *watched, "clone", "socket", "socketpair", "flock", "fcntl"}
    assert {name: defined.get(name) for name in abi.numbers} == abi.numbers


@pytest.mark.parametrize(
    ("machine", "abi"),
    [
        ("x86_64", X86_64),
        ("AMD64", X86_64),
        ("aarch64", AARCH64),
        ("arm64", AARCH64),
        ("riscv64", RISCV64),
        ("s390x", None),
    ],
)
def test_the_machine_picks_the_filter(monkeypatch: pytest.MonkeyPatch, machine: str, abi: Abi | None) -> None:
    monkeypatch.setattr("platform.machine", lambda: machine)
    assert seccomp.filter_bytes() == (None if abi is None else assemble(build_program(abi)))


@requires_bwrap
def test_a_machine_without_a_filter_is_logged_not_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("platform.machine", lambda: "s390x")
    with capture_logs() as logs:
        sandbox = BwrapSandbox(BwrapConfig())
    assert sandbox.fd_payload() is None
    sandbox.close()
    assert [e["machine"] for e in logs if e["event"] == "sandbox.no_seccomp_filter"] == ["s390x"]
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    sandbox = BwrapSandbox(BwrapConfig())
    assert sandbox.fd_payload() == assemble(build_program(AARCH64, server=True))
    sandbox.close()
