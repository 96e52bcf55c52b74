"""The default Linux sandbox: bubblewrap around the fork-server.

Inside: no network (own empty net namespace), own PID/IPC/UTS namespaces, a root filesystem that
holds only read-only /usr (+ the /bin, /lib symlinks), the Python runtime at /opt/python, the
fork-server script, a fresh /proc and minimal /dev, and a size-capped tmpfs workspace at /ws.
The host's home, /etc, /work, /tmp, sockets and devices are simply not there.

Run as root (the project's machines), bwrap does not need a user namespace: the server keeps just
the capabilities it needs to set up runs (setuid/setgid/chown/kill/dac_override/fowner) and each
child drops to a leased unprivileged uid with no capabilities, so RLIMIT_NPROC works and a run
cannot signal or ptrace the server. As a normal user, bwrap uses a user namespace instead; the child
then keeps the caller's uid, RLIMIT_NPROC is not applied and the sweep is by PID namespace
(documented in docs/sandbox.md).

Around that: a seccomp deny-list (`seccomp.py`), the server as PID 1 of its namespace (its death
ends every run), and a cgroup memory+pids ceiling per server (`cgroups.py`, root only).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import structlog

from envpool.sandbox._client import FORKSERVER_SCRIPT, PAYLOAD_FD
from envpool.sandbox.base import SandboxUnavailable
from envpool.sandbox.cgroups import ServerCgroup
from envpool.sandbox.pooled import PooledForkServerSandbox
from envpool.sandbox.seccomp import filter_bytes
from envpool.sandbox.sites import PythonSites

log = structlog.get_logger(__name__)

SERVER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_KILL", "CAP_DAC_OVERRIDE", "CAP_FOWNER")
SANDBOX_PYTHON_HOME = "/opt/python"
SANDBOX_SCRIPT = "/opt/rlide/forkserver.py"
WORKSPACE = "/ws"
HOSTNAME = "sandbox"
SANDBOX_CGROUP = "/run/rlide/memory"
"""Where the server's memory cgroup (and its runs' groups) appears inside, under a folder only the
server (root) may enter."""
MASKED = ("/proc/cmdline", "/proc/sys/kernel/random/boot_id")
"""Files that would tell a run about the host (its kernel command line, its boot): a read-only
/dev/null there (a device bind: bwrap mounts plain binds `nodev`, where /dev/null would not open)."""


@dataclass(frozen=True)
class BwrapConfig(PythonSites):
    fresh: bool = False
    """True: start a new bwrap per run (about +30 ms) instead of forking from a warm server."""
    workspace_mb: int = 256
    """Size of each run's own tmpfs workspace (and of the server's, used without run namespaces)."""
    workspace_inodes: int = 65536
    """Files and folders each run's workspace may hold: it is dropped whole by the kernel when the run
    ends, and this bounds what that costs the next caller."""
    python_home: str = sys.base_prefix
    """Interpreter install bound read-only into the sandbox (the host's base Python, not a venv)."""
    bwrap: str = "bwrap"
    server_memory_mb: int = 4096
    """cgroup memory ceiling for one server and everything it forks (all processes of a run)."""
    server_pids: int = 1024
    """cgroup pids ceiling for one server (RLIMIT_NPROC per run is the first line)."""
    cgroups: bool = True
    seccomp: bool = True
    """Deny-list of risky syscalls (namespaces, mount, ptrace, bpf, ...): envpool/sandbox/seccomp.py."""
    forkserver: Path = FORKSERVER_SCRIPT
    """The fork-server script bound into the sandbox (benchmarks/forkserver_ab.py runs an older one)."""


def bwrap_available(binary: str = "bwrap") -> str | None:
    """Path of a working bwrap, or None."""
    return shutil.which(binary)


class BwrapSandbox(PooledForkServerSandbox):
    name = "bwrap"

    def __init__(self, config: BwrapConfig | None = None) -> None:
        self.config = config or BwrapConfig()
        binary = bwrap_available(self.config.bwrap)
        if binary is None:
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
        self._binary = binary
        self._privileged = os.geteuid() == 0
        self._seccomp = filter_bytes(server=True) if self.config.seccomp else None
        self._run_filter = filter_bytes() if self.config.seccomp else None
        if self.config.seccomp and self._seccomp is None:
            log.warning(
                "sandbox.no_seccomp_filter",
                machine=platform.machine(),
                detail="no syscall filter for this architecture; namespaces and limits still apply",
            )
        limits = (self.config.server_memory_mb, self.config.server_pids)
        use_cgroups = self.config.cgroups and self._privileged
        super().__init__(
            fresh=self.config.fresh,
            drop_uid=self._privileged,
            cgroup_limits=limits if use_cgroups else None,
            isolate=self._privileged,
        )

    def _python_binds(self) -> tuple[list[str], str]:
        home = os.path.realpath(self.config.python_home)
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        if home == "/usr" or home.startswith("/usr/"):
            return [], os.path.join(home, "bin", version)  # already inside the /usr bind
        binds = ["--perms", "0755", "--dir", "/opt", "--ro-bind", home, SANDBOX_PYTHON_HOME]
        if sysconfig.get_config_var("Py_ENABLE_SHARED"):
            # An interpreter built --enable-shared (pyenv's, many distributions') finds libpython
            # through a RUNPATH naming its host prefix, which the sandbox does not have: point the
            # loader at the bound copy (the server passes it on to the runs' own processes).
            binds += ["--setenv", "LD_LIBRARY_PATH", f"{SANDBOX_PYTHON_HOME}/lib"]
        return binds, f"{SANDBOX_PYTHON_HOME}/bin/{version}"

    def fd_payload(self) -> bytes | None:
        return self._seccomp

    def server_argv(self, uids: list[int], once: bool, cgroup: ServerCgroup | None) -> list[str]:
        py_binds, python = self._python_binds()
        argv = [
            self._binary,
            "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", HOSTNAME,
            # No --die-with-parent: it is PR_SET_PDEATHSIG, which fires when the *thread* that
            # started bwrap exits (thread pools do that). The server exits on EOF of its stdin
            # instead, and bwrap (PID 1 of the namespace) takes every process with it.
            "--new-session",  # no TIOCSTI into the host terminal
            # The server is PID 1 of its namespace: when it dies, for any reason, the kernel kills
            # every process in the namespace, and nothing keeps the host's pipe open. (bwrap's own
            # init would wait for orphaned runs first.) As PID 1 it also adopts and reaps orphans,
            # and runs cannot signal it at all.
            "--as-pid-1",
            "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64",
            "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/sbin", "/sbin",
            "--perms", "0755", "--dir", "/etc",  # bwrap would create it 0700 (unreadable after setuid)
            "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
            "--perms", "0755", "--dir", "/etc/ssl",
            "--ro-bind-try", "/etc/ssl/openssl.cnf", "/etc/ssl/openssl.cnf",  # node reads it at start
            "--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
            *py_binds,
            *(arg for host, inside in self.config.mounts() for arg in ("--ro-bind", host, inside)),
            "--ro-bind", str(self.config.forkserver), SANDBOX_SCRIPT,
            "--proc", "/proc",
            *(arg for path in MASKED for arg in ("--dev-bind", "/dev/null", path, "--remount-ro", path)),
            "--dev", "/dev",
            "--perms", "0755", "--tmpfs", "/tmp",  # root-owned: runs write only to their workspace
            "--size", str(self.config.workspace_mb << 20), "--perms", "0711", "--tmpfs", WORKSPACE,
            "--chdir", WORKSPACE,
        ]  # fmt: skip
        if self._privileged:
            for cap in SERVER_CAPS:
                argv += ["--cap-add", cap]
        else:
            argv += ["--unshare-user"]
        if cgroup is not None and cgroup.runs:
            private = os.path.dirname(SANDBOX_CGROUP)
            argv += ["--perms", "0700", "--dir", private, "--bind", str(cgroup.memory), SANDBOX_CGROUP]
        if self.fd_payload() is not None:
            argv += ["--seccomp", PAYLOAD_FD]
        argv += [
            "--", python, "-I", "-S", SANDBOX_SCRIPT,
            "--uids", ",".join(map(str, uids)),
            "--ws-root", WORKSPACE,
            "--sweep", "uid" if uids else "pidns", "--own-pidns", "1",
            "--once", "1" if once else "0",
            "--isolate", "1" if self.isolate else "0",
            "--workspace-mb", str(self.config.workspace_mb),
            "--workspace-inodes", str(self.config.workspace_inodes),
            *(["--cgroup", SANDBOX_CGROUP] if cgroup is not None and cgroup.runs else []),
            *(["--run-filter", self._run_filter.hex()] if self._run_filter else []),
            *self.config.server_args(),
        ]  # fmt: skip
        return argv
