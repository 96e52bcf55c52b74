"""The seccomp-BPF deny-lists of the sandboxes: one for the fork-server, one for each run.

Why: the namespaces hide the host, but every syscall still reaches the host kernel. The run filter
removes the riskiest kernel surface a program has no business with: creating namespaces (user
namespaces would give the run capabilities over new kernel objects), mounting, ptrace, keyrings,
BPF, perf, io_uring, module loading, kexec, socket families other than unix, IPv4, IPv6 and
netlink (`AF_VSOCK` would reach the hypervisor, which no network namespace hides), and the
non-native syscall ABIs (i386 `int 0x80`, x32, 32-bit ARM) that could sidestep a filter written
for the native one (x86_64, aarch64, riscv64). Denied calls fail with EPERM (ENOSYS for
clone3/io_uring so libc and libuv fall back to clone/epoll; EAFNOSUPPORT for a socket family)
rather than killing the process, so programs that merely probe for a feature keep working.

The run filter also denies file watching (inotify, fanotify: ENOSYS; fcntl F_NOTIFY: EINVAL) and
makes locks lock nothing (flock and fcntl's lock-setting commands return 0; F_GETLK and F_OFD_GETLK
ENOLCK): files every server shares would carry what a run opens or locks to a concurrent run, and a
filter cannot tell a shared file from the run's own (forkserver.py says what that costs).

Two filters, stacked: `bwrap --seccomp` puts the *server* filter on the fork-server and everything
it forks; it is the run filter less what the server needs to give each run namespaces of its own
(`unshare` of a user, mount, IPC, UTS and network namespace, and `mount` for the run's tmpfs, which a user
namespace confines to filesystems an unprivileged user may mount). Each run's child installs the
*run* filter itself before the program starts, so a program gets the intersection: everything
both deny. Other architectures get no filter (logged): the namespaces and limits still apply.
Every filter is checked against the kernel's headers and run through a BPF interpreter in the
tests; the x86_64 ones run in every containment test, and the aarch64 and riscv64 run filters in
Debian kernels of theirs under qemu (tests/envpool/test_seccomp_kernels.py, set up by `make setup`
as root).
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass
from typing import Any

# BPF opcodes (linux/filter.h, linux/bpf_common.h)
LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
JSET_K = 0x45
RET_K = 0x06

RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL_PROCESS = 0x80000000
X32_SYSCALL_BIT = 0x40000000
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0, OFFSET_ARG1 = 0, 4, 16, 24
CLONE_NEWUSER = 0x10000000

DENY_EPERM = (
    "ptrace", "personality", "pivot_root", "chroot", "acct", "mount", "umount2", "swapon", "swapoff",
    "reboot", "init_module", "delete_module", "quotactl", "lookup_dcookie", "kexec_load", "add_key",
    "request_key", "keyctl", "unshare", "perf_event_open", "name_to_handle_at", "open_by_handle_at",
    "setns", "process_vm_readv", "process_vm_writev", "finit_module", "kexec_file_load", "bpf",
    "userfaultfd", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "pidfd_getfd",
    "mount_setattr",
)  # fmt: skip
DENY_ENOSYS = ("io_uring_setup", "clone3")  # callers fall back when these are "missing"
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (NEWTIME exists only via clone3/unshare)
CLONE_NEW_MASK = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
SERVER_UNSHARE = 0x10000000 | 0x00020000 | 0x08000000 | 0x04000000 | 0x40000000
"""CLONE_NEWUSER | NEWNS | NEWIPC | NEWUTS | NEWNET: the namespaces the fork-server's child makes for its run."""
SERVER_ALLOWED = ("unshare", "mount", "setns")
"""Denied to runs, allowed to the fork-server: `unshare` only with `SERVER_UNSHARE` flags, `setns`
only into a user namespace (a slot's, forkserver.py)."""
RUN_DENY_ENOSYS = ("inotify_init", "inotify_init1", "fanotify_init")
"""File watching, denied to runs as if the kernel had none (aarch64 and riscv64 have no `inotify_init`):
a watch on the read-only trees every server shares would show a run what files a concurrent run in
another server opens."""
F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW, F_NOTIFY = 5, 6, 7, 36, 37, 38, 1026
LOCK_SETS = (F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW)
"""fcntl commands that take or drop a lock: for a run, like `flock`, they succeed and lock nothing."""
LOCK_QUERIES = (F_GETLK, F_OFD_GETLK)
"""fcntl commands that ask who holds a lock: ENOLCK for a run (no lock table to ask)."""
SOCKET_FAMILIES = (1, 2, 10, 16)
"""AF_UNIX, AF_INET, AF_INET6, AF_NETLINK: the socket families a run may create; any other (AF_VSOCK,
AF_PACKET, AF_ALG, AF_BLUETOOTH...) fails with EAFNOSUPPORT."""


X86_64_NUMBERS = {  # asm/unistd_64.h
    "ptrace": 101, "personality": 135, "pivot_root": 155, "chroot": 161, "acct": 163, "mount": 165,
    "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "init_module": 175,
    "delete_module": 176, "quotactl": 179, "lookup_dcookie": 212, "kexec_load": 246, "add_key": 248,
    "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_getfd": 438, "mount_setattr": 442, "io_uring_setup": 425, "clone3": 435, "clone": 56,
    "socket": 41, "socketpair": 53, "inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300,
    "flock": 73, "fcntl": 72,
}  # fmt: skip
GENERIC_NUMBERS = {  # asm-generic/unistd.h, which arm64 (and riscv64) use
    "ptrace": 117, "personality": 92, "pivot_root": 41, "chroot": 51, "acct": 89, "mount": 40,
    "umount2": 39, "swapon": 224, "swapoff": 225, "reboot": 142, "init_module": 105,
    "delete_module": 106, "quotactl": 60, "lookup_dcookie": 18, "kexec_load": 104, "add_key": 217,
    "request_key": 218, "keyctl": 219, "unshare": 97, "perf_event_open": 241, "name_to_handle_at": 264,
    "open_by_handle_at": 265, "setns": 268, "process_vm_readv": 270, "process_vm_writev": 271,
    "finit_module": 273, "kexec_file_load": 294, "bpf": 280, "userfaultfd": 282, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_getfd": 438, "mount_setattr": 442, "io_uring_setup": 425, "clone3": 435, "clone": 220,
    "socket": 198, "socketpair": 199, "inotify_init1": 26, "fanotify_init": 262, "flock": 32, "fcntl": 25,
}  # fmt: skip


@dataclass(frozen=True)
class Abi:
    """A native syscall ABI: its `AUDIT_ARCH_*` value and the numbers of the syscalls the filters
    look at (every name in DENY_EPERM and DENY_ENOSYS; `clone`, whose flags come first; `socket`
    and `socketpair`, whose family comes first; those of RUN_DENY_ENOSYS it has; `flock`, and
    `fcntl`, whose command comes second)."""

    audit_arch: int
    numbers: dict[str, int]
    x32_bit: bool = False  # x86_64: a number with X32_SYSCALL_BIT set is the x32 ABI, denied


# AUDIT_ARCH_* (linux/audit.h): the ELF machine | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
X86_64 = Abi(0xC000003E, X86_64_NUMBERS, x32_bit=True)
AARCH64 = Abi(0xC00000B7, GENERIC_NUMBERS)
RISCV64 = Abi(0xC00000F3, GENERIC_NUMBERS)
ABIS = {
    "x86_64": X86_64,
    "amd64": X86_64,
    "aarch64": AARCH64,
    "arm64": AARCH64,
    "riscv64": RISCV64,
}  # platform.machine()


@dataclass(frozen=True)
class Insn:
    code: int
    k: int
    jt: int | str = 0  # int: relative jump; str: label resolved by `assemble`
    jf: int | str = 0


def build_program(abi: Abi, *, server: bool = False) -> list[Insn | str]:
    """The run filter for `abi` (or, with `server`, the fork-server's) as instructions and labels
    (a str entry marks a label)."""
    prog: list[Insn | str] = [
        Insn(LD_W_ABS, OFFSET_ARCH),
        Insn(JEQ_K, abi.audit_arch, jt=1, jf=0),
        Insn(RET_K, RET_KILL_PROCESS),  # i386, 32-bit ARM or any other ABI: never allowed
        Insn(LD_W_ABS, OFFSET_NR),
    ]
    if abi.x32_bit:
        prog.append(Insn(JGE_K, X32_SYSCALL_BIT, jt="eperm"))
    denied = [name for name in DENY_EPERM if not (server and name in SERVER_ALLOWED)]
    for nr in sorted(abi.numbers[name] for name in denied):
        prog.append(Insn(JEQ_K, nr, jt="eperm"))
    for nr in sorted(abi.numbers[name] for name in DENY_ENOSYS):
        prog.append(Insn(JEQ_K, nr, jt="enosys"))
    if server:
        prog += [
            Insn(JEQ_K, abi.numbers["setns"], jf="unshare"),
            Insn(LD_W_ABS, OFFSET_ARG1),  # the namespace type
            Insn(JEQ_K, CLONE_NEWUSER, jt="allow", jf="eperm"),
            "unshare",
            Insn(JEQ_K, abi.numbers["unshare"], jf="clone"),
            Insn(LD_W_ABS, OFFSET_ARG0),  # unshare flags
            Insn(JSET_K, CLONE_NEW_MASK & ~SERVER_UNSHARE, jt="eperm", jf="allow"),
        ]
    else:
        watches = sorted(abi.numbers[name] for name in RUN_DENY_ENOSYS if name in abi.numbers)
        prog += [
            *(Insn(JEQ_K, nr, jt="enosys") for nr in watches),
            Insn(JEQ_K, abi.numbers["flock"], jt="nolock"),
            Insn(JEQ_K, abi.numbers["fcntl"], jf="socket"),
            Insn(LD_W_ABS, OFFSET_ARG1),  # the fcntl command
            *(Insn(JEQ_K, cmd, jt="nolock") for cmd in LOCK_SETS),
            *(Insn(JEQ_K, cmd, jt="enolck") for cmd in LOCK_QUERIES),
            Insn(JEQ_K, F_NOTIFY, jt="einval", jf="allow"),  # dnotify: file watching again
            "socket",
            Insn(JEQ_K, abi.numbers["socket"], jt="family"),
            Insn(JEQ_K, abi.numbers["socketpair"], jf="clone"),
            "family",
            Insn(LD_W_ABS, OFFSET_ARG0),  # the socket family
            *(Insn(JEQ_K, family, jt="allow") for family in SOCKET_FAMILIES),
            Insn(RET_K, RET_ERRNO | errno.EAFNOSUPPORT),
        ]
    prog += [
        "clone",
        Insn(JEQ_K, abi.numbers["clone"], jf="allow"),
        Insn(LD_W_ABS, OFFSET_ARG0),  # clone flags (low 32 bits)
        Insn(JSET_K, CLONE_NEW_MASK, jt="eperm"),
        "allow",
        Insn(RET_K, RET_ALLOW),
        "eperm",
        Insn(RET_K, RET_ERRNO | errno.EPERM),
        "enosys",
        Insn(RET_K, RET_ERRNO | errno.ENOSYS),
    ]
    if not server:
        prog += [
            "nolock",
            Insn(RET_K, RET_ERRNO | 0),  # the call returns 0, having done nothing
            "enolck",
            Insn(RET_K, RET_ERRNO | errno.ENOLCK),
            "einval",
            Insn(RET_K, RET_ERRNO | errno.EINVAL),
        ]
    return prog


def assemble(prog: list[Insn | str]) -> bytes:
    """Resolve labels to relative jumps and pack `struct sock_filter` entries."""
    labels: dict[str, int] = {}
    index = 0
    for item in prog:
        if isinstance(item, str):
            labels[item] = index
        else:
            index += 1
    out = bytearray()
    index = 0
    for item in prog:
        if isinstance(item, str):
            continue
        jumps = []
        for target in (item.jt, item.jf):
            rel = labels[target] - index - 1 if isinstance(target, str) else target
            if not 0 <= rel <= 255:
                raise ValueError(f"jump out of range at instruction {index}")
            jumps.append(rel)
        out += struct.pack("<HBBI", item.code, jumps[0], jumps[1], item.k)
        index += 1
    return bytes(out)


def native_abi() -> Abi | None:
    """This machine's syscall ABI, or None where we have no filter for it."""
    return ABIS.get(platform.machine().lower())


def filter_bytes(*, server: bool = False) -> bytes | None:
    """The compiled run filter (or the fork-server's) for this machine, or None where we have no
    filter for its ABI."""
    abi = native_abi()
    return None if abi is None else assemble(build_program(abi, server=server))


DOCKER_ARCHES = {"x86_64": "SCMP_ARCH_X86_64", "amd64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64",
                 "arm64": "SCMP_ARCH_AARCH64", "riscv64": "SCMP_ARCH_RISCV64"}  # fmt: skip


def docker_profile() -> dict[str, Any] | None:
    """The fork-server's filter as a Docker seccomp profile (`--security-opt seccomp=FILE`), in
    place of Docker's default one, which refuses the namespaces a run's child makes for itself.
    Denials match `build_program(server=True)`; syscalls of another ABI are refused by
    libseccomp (only the native one is listed). Runs still install the run filter themselves."""
    arch = DOCKER_ARCHES.get(platform.machine().lower())
    if arch is None:
        return None
    eperm = {"action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}
    rules: list[dict[str, Any]] = [
        {"names": sorted(set(DENY_EPERM) - set(SERVER_ALLOWED)), **eperm},
        {"names": list(DENY_ENOSYS), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
    ]
    for bit in (1 << b for b in range(32) if CLONE_NEW_MASK & (1 << b)):
        masked = [{"index": 0, "value": bit, "valueTwo": bit, "op": "SCMP_CMP_MASKED_EQ"}]
        rules.append({"names": ["clone"], "args": masked, **eperm})
        if not SERVER_UNSHARE & bit:
            rules.append({"names": ["unshare"], "args": masked, **eperm})
    other_type = [{"index": 1, "value": CLONE_NEWUSER, "op": "SCMP_CMP_NE"}]
    rules.append({"names": ["setns"], "args": other_type, **eperm})
    return {"defaultAction": "SCMP_ACT_ALLOW", "architectures": [arch], "syscalls": rules}
