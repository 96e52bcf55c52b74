"""The warm fork-server that lives INSIDE a sandbox (bwrap, docker, or unsafe-local).

Standard library only: it runs under the sandbox's bare interpreter (`python3 -I -S`), with no
access to the host's site-packages. The host talks to it over its stdin/stdout: a frame is a
4-byte big-endian length and a JSON header; a run's header is followed by its job (the request:
code, files, environment, stdin) as raw bytes, and the answer's header by the run's raw stdout and
stderr. It never prints: fd 1 is the protocol channel.

Per run it uses one child forked from an interpreter that already imported the common stdlib, so
a trivial Python program costs a few milliseconds instead of a 20 ms interpreter start. The child
for the next run is forked ahead, while the current one runs when requests come back to back (and
there is a uid to drop to), otherwise right after the answer. It does everything that does not
depend on the request while it waits: new session, its pipes, its namespaces and workspace (below),
and pointing Python's stdio objects and environment (made once, in the server: see
`PythonProgram`) at them. When the job arrives on its control pipe the child sets its limits,
drops to its run's unprivileged uid, installs the run's seccomp filter, writes the files and
either exec()s the program in a fresh `__main__` (python) or execve()s sh/node. A Python child
reports its exit code on a status pipe once the program has finished and its output is flushed.

What keeps runs apart from each other (one server serves many runs, from any episode or rollout):
- **A uid per run.** Runs take turns over the uids leased to this server alone (`--uids`, two), so
  a run never shares its uid with the run before it. After a run, every process of its uid is killed
  with one `kill(-1, SIGKILL)` made as that uid (the kernel signals them all under one lock, so
  none can fork its way out), zombies and processes whose main thread has exited included, then
  reaped; the next run starts only when none is left.
- **Namespaces per run** (`--isolate`): the spare child makes its own user, mount, IPC, UTS and
  network namespaces (the server maps one uid into the user namespace: the run's), and mounts a
  fresh tmpfs, capped in bytes and inodes, as its workspace. SysV and POSIX IPC objects, files and
  the workspace itself go away with the run's last process, whole: nothing is walked or deleted by
  the server, and no run can see another's workspace. A unix socket can outlive every process of
  its run (sent into its own unaccepted connection: an `SCM_RIGHTS` cycle): bound to an abstract
  address, it stays in the run's own network namespace, which no later run is in. Its loopback is
  up, as bwrap's is for the sandbox, so a test suite's own local servers work, and what listens on
  it is the run's alone (a TCP port bound by one run is free for the next). The namespace is made
  while the spare waits (~0.5 ms of CPU on this kernel, 6.18) and the kernel tears it down in the
  background, in batches: over 1,200 runs back to back the live network namespaces on the machine
  stayed between 30 and 70.
- **Nothing left in a slot** (`empty_slot`): what such sockets carry (memfds, files) stays charged
  to the run's memory group. Before a slot's next run, the server releases a unix socket, which
  makes the kernel (6.18 here) run its unix garbage collector, and waits until the group holds no
  more than a waiting child does; a group it cannot empty in time is retired for a new one (logged
  on the host, `sandbox.slot_retired`; its server's groups are then not reused).
- **No watching or locking across runs**: the read-only trees (/usr, the Python runtime, the sites)
  and /dev's nodes are the same files in every server, and seccomp sees only a file descriptor,
  never what it names. So the run filter denies file watching outright (inotify, fanotify: ENOSYS;
  dnotify's F_NOTIFY: EINVAL): a watch would show a run what a concurrent run opens. And every lock
  call of a run (flock, fcntl's F_SETLK/F_SETLKW and OFD locks) succeeds and locks nothing, while
  asking who holds one (F_GETLK, F_OFD_GETLK) fails with ENOLCK: a lock on a shared file would carry
  bits to a concurrent run. What a run keeps: its own files are on its private tmpfs, where no other
  run could contend, and one process's locks never conflict with themselves, so sqlite and
  filelock work; what it loses: mutual exclusion between its own processes (two writers of one
  sqlite file at once in one run). Leases need the file's owner and reach only the run's own files.
- **Memory per run**: with a cgroup (`--cgroup`), each slot has a memory group of its own whose
  limit (RAM and swap) is the run's `memory_mb`: what the run holds in all its processes, memfds,
  shared memory and tmpfs files counts against that run, not the server, and its address space is
  left alone (threads reserve far more than they touch). Where the server cannot hold a run to its
  limit that way (no group, or the limit could not be set), the child caps its address space
  (data segments for node) at `memory_mb` instead, and the answer says which (`memory`).
- **No job in inherited memory**: the server never decodes a job. Its bytes, and the run's output,
  pass through buffers marked `MADV_DONTFORK`, which a child forked later (or during the run) does
  not have at all; the child reads its own job from its control pipe. stdin reaches the program as a
  memfd the child fills itself.
Without a separate uid to drop to (`--sweep pidns`, unprivileged mode) or without namespaces, the
child uses a directory of the workspace that the server deletes after the answer, and the sweep
kills every process in the PID namespace but the server and the waiting spare.

This file stays one module on purpose: the sandbox runs it as a script with the bare interpreter.
Modes: `serve` (default; loop over requests) and `--once` (one request, for fresh-sandbox runs).
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import ctypes
import errno
import fcntl
import json
import linecache
import mmap
import os
import resource
import select
import selectors
import shutil
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import types
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
HEADER = struct.Struct(">I")
MAX_HEADER = 1 << 20
MAX_PAYLOAD = 100 << 20  # the host refuses a larger job (envpool.sandbox.base.MAX_PAYLOAD_BYTES)
MAX_OUTPUT = 64 << 20  # the largest max_output_bytes a request may ask for, per stream
CHUNK = 1 << 16
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
SPARE_NAME = b"rlide-spare"  # a waiting child's name (ps, /proc/<pid>/comm) until its job comes
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
MADV_DONTNEED = 4
MADV_DONTFORK = 10
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x04000000, 0x08000000, 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = struct.Struct("16sH22x")  # struct ifreq: the interface's name, then ifr_flags in a 24-byte union
MS_NOSUID, MS_NODEV, MS_BIND = 0x2, 0x4, 0x1000
CAPABILITY_VERSION_3 = 0x20080522
RUN_UID = 1000  # a run's uid inside its own user namespace; outside, the slot's leased uid
SWEEP_TIMEOUT_S = 10.0  # a run's processes that outlive this many seconds of SIGKILLs end the server
# A slot's memory group holding more than this once its run is over, its processes gone and the unix
# garbage collected, is not empty: something of the run lives on, charged to it (see `empty_slot`,
# `Server.slot_held`: page cache and the kernel's caches of files read do not count).
# What a waiting spare holds is charged there too, and stays far below (under 1 MiB).
EMPTY_SLOT_BYTES = 4 << 20
SLOT_GC_WAIT_S = 2.0  # how long the kernel's unix garbage collector may take to free a slot's group
# A request that comes sooner than this after the last answer is back to back (a rollout loop):
# the next spare is then forked during the run, not after the answer. About what a late fork takes.
BACK_TO_BACK_S = 0.005
# Imported once in the server so each forked child finds them warm (HumanEval-style programs).
PREIMPORT = (
    "abc", "bisect", "builtins", "collections", "collections.abc", "contextlib", "copy", "dataclasses",
    "datetime", "decimal", "enum", "fractions", "functools", "hashlib", "heapq", "io", "itertools", "json",
    "linecache", "math", "operator", "random", "re", "statistics", "string", "textwrap", "threading",
    "traceback", "types", "typing", "unittest",
)  # fmt: skip


TOOLS_SITE = "/opt/tools-site"
PROJECT_SITE = "/opt/project-site"
PLUGINS = "/opt/rlide-plugins"  # rlide's pytest plugin, read-only (envpool.verifiers.reports)
SHELLS = {"shell": "/bin/sh", "bash": "/bin/bash"}
libc = ctypes.CDLL(None, use_errno=True)
# Looked up (and ctypes warmed up by one call) once, here: a child that did it would pay ~0.25 ms in
# copy-on-write faults before its first system call.
setns, unshare, mount, capset, prctl, madvise = (
    libc.setns,
    libc.unshare,
    libc.mount,
    libc.capset,
    libc.prctl,
    libc.madvise,
)
libc.getpid()


def check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def read_proc(path: str) -> bytes:
    """A /proc file's first 64 KiB (enough for a status file, or a children list to compare)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def read_into(fd: int, view: memoryview) -> None:
    """Fill `view` from `fd` (a pipe), or raise EOFError."""
    done = 0
    while done < len(view):
        n = os.readv(fd, [view[done:]])
        if not n:
            raise EOFError
        done += n


def read_frame(fd: int, limit: int = MAX_HEADER) -> Json:
    size = bytearray(HEADER.size)
    read_into(fd, memoryview(size))
    (n,) = HEADER.unpack(size)
    if n > limit:
        raise ValueError("frame too large")
    body = bytearray(n)
    read_into(fd, memoryview(body))
    frame: Json = json.loads(body)
    return frame


def write_all(fd: int, *chunks: bytes | memoryview) -> None:
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def write_frame(fd: int, obj: Json, *tail: memoryview) -> None:
    data = json.dumps(obj).encode()
    write_all(fd, HEADER.pack(len(data)) + data, *tail)


def safe_path(path: str) -> str:
    # Checked again here, at the point of the side effect (the host checked it too).
    parts = path.split("/")
    if path.startswith("/") or "\x00" in path or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"refused path {path!r}")
    return path


def write_files(files: Json) -> None:
    for rel, content in files.items():
        rel = safe_path(rel)
        head = os.path.dirname(rel)
        if head:
            os.makedirs(head, mode=0o700, exist_ok=True)
        # O_NOFOLLOW|O_EXCL: never write through a symlink an earlier file could not create anyway.
        fd = os.open(rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(content)


def loopback_up() -> None:
    """Bring up the loopback of the run's own network namespace, as bwrap does for the sandbox's: a
    test suite's own local servers (127.0.0.1, ::1) work, and nothing outside the run is there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack_from("H", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, IFREQ.pack(b"lo", 0)), 16)[0]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, IFREQ.pack(b"lo", flags | IFF_UP))


def collect_unix_garbage() -> None:
    """Release a unix socket: with descriptors in flight anywhere, the kernel then schedules its
    unix garbage collector, which frees sockets (and what they carry) that only sockets in flight
    still reach. A few microseconds where none are in flight."""
    for end in socket.socketpair():
        end.close()


def remove_tree(path: str) -> None:
    """Delete a run's workspace directory, only in the modes without a workspace of the run's own
    (see `Server.isolate`). A tree too deep for `rmtree` (a run can nest folders past PATH_MAX)
    goes to `rm -rf`, which walks it by file descriptors."""
    with contextlib.suppress(RecursionError):
        shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        with contextlib.suppress(OSError):
            os.waitpid(os.posix_spawn("/bin/rm", ["rm", "-rf", "--", path], {}), 0)


class PrivateBuffer:
    """Anonymous memory a forked child does not get (`MADV_DONTFORK`): where the server keeps a
    job's bytes and a run's output, so no later run inherits them (nor counts them against its
    address-space limit). `scrub` zeroes and frees what a run used."""

    def __init__(self, size: int) -> None:
        # Private, not mmap's default MAP_SHARED: a shared mapping would be shared with the children.
        self.map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.view = memoryview(self.map)
        self._anchor = ctypes.c_char.from_buffer(self.map)
        self.addr = ctypes.addressof(self._anchor)
        check(madvise(ctypes.c_void_p(self.addr), ctypes.c_size_t(size), MADV_DONTFORK), "madvise")

    def scrub(self, offset: int, used: int) -> None:
        """Zero and free `used` bytes from `offset` (a multiple of the page size)."""
        if used > 0:
            size = min(len(self.view) - offset, -(-used // mmap.PAGESIZE) * mmap.PAGESIZE)
            madvise(ctypes.c_void_p(self.addr + offset), ctypes.c_size_t(size), MADV_DONTNEED)


class Output:
    """One stream of a run read into a slice of a `PrivateBuffer`: up to its limit and one chunk more,
    which tells that the limit was passed."""

    def __init__(self, view: memoryview, limit: int) -> None:
        self.view = view[: limit + CHUNK]
        self.limit = limit
        self.size = 0

    def read(self, fd: int) -> bool:
        """Read what `fd` has; False at its end or once the buffer is full."""
        room = self.view[self.size : self.size + CHUNK]
        if not room:
            return False
        n = os.readv(fd, [room])
        self.size += n
        return n > 0

    @property
    def over(self) -> bool:
        return self.size > self.limit

    @property
    def kept(self) -> memoryview:
        return self.view[: min(self.size, self.limit)]


class SockFprog(ctypes.Structure):
    """`struct sock_fprog`: a seccomp program's length in instructions and its address."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


@dataclass
class Spare:
    """A forked child waiting for its job on `control`, and the server's ends of its pipes."""

    pid: int
    slot: int
    ws: str
    stdout: int
    stderr: int
    control: int
    status: int  # the child reports its exit code here just before it exits (python only)


STATUS_FD = 4
EXIT_CODE = struct.Struct(">i")
# The byte before a job on a child's control pipe: whether its slot's memory group holds the run to
# `memory_mb` (see `Server.hold_memory`), or the child must cap its address space itself.
MEMORY_GROUP, MEMORY_RLIMIT = b"g", b"r"


class PythonProgram:
    """A fresh `__main__` in the warm interpreter of a forked child.

    Made once, in the server before it forks: the environment every run starts from, the stdio
    objects over fds 0-2 (which each child points at its own pipes before using them) and the
    `exit`/`quit` builtins. A child that made these itself took ~2 ms and ~200 copy-on-write
    faults (importing `_sitebuiltins` alone, which `-S` leaves out, was 0.7 ms). The server never
    uses them: each child inherits them unused."""

    def __init__(self, env: Json, path: list[str]) -> None:
        import _sitebuiltins

        os.environ.clear()
        os.environ.update(env)
        self.env = dict(env)
        self.path = path  # PYTHONPATH; a relative entry is a folder of the run's workspace
        # closefd=False: the server's own fds 0 and 1 are its protocol pipes, never to be closed.
        self.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        self.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        self.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)  # noqa: SIM115
        self.quitters = (
            _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)"),
            _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)"),
        )
        self.base_env: Json = {}
        self.main = types.ModuleType("__main__")
        self.displaced: tuple[object, ...] = ()

    def enter(self, ws: str) -> Json:
        """In the child, once its fds 0-2 are the run's pipes: make this process the run's Python,
        with a fresh `__main__`. Returns the run's environment."""
        # Kept alive, not freed: freeing the server's objects in a child only costs page faults.
        self.displaced = (sys.stdin, sys.stdout, sys.stderr, sys.modules.get("__main__"))
        env = {**self.env, "HOME": ws, "TMPDIR": ws}
        if self.path:
            env["PYTHONPATH"] = ":".join(os.path.normpath(os.path.join(ws, entry)) for entry in self.path)
        os.environ.update(env)
        sys.stdin = sys.__stdin__ = self.stdin  # type: ignore[misc]
        sys.stdout = sys.__stdout__ = self.stdout  # type: ignore[misc]
        sys.stderr = sys.__stderr__ = self.stderr  # type: ignore[misc]
        sys.argv = ["main.py"]
        sys.path[0] = ws
        builtins.exit, builtins.quit = self.quitters
        self.main = types.ModuleType("__main__")
        self.main.__dict__["__builtins__"] = builtins
        self.main.__dict__["__file__"] = os.path.join(ws, "main.py")
        sys.modules["__main__"] = self.main
        self.base_env = dict(env)  # the caller adds the request's variables to the one returned
        return env

    def run(self, source: str, env: Json) -> int:
        if env != self.base_env:  # the request added variables
            os.environ.update(env)
        # The server runs with -I -S; give the program what a normal `python3 main.py` would have.
        sys.path[1:1] = [p for p in env.get("PYTHONPATH", "").split(":") if p]
        linecache.cache["main.py"] = (len(source), None, source.splitlines(True), "main.py")
        status = 0
        try:
            exec(compile(source, "main.py", "exec"), self.main.__dict__)
            threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads like a real exit
        except SystemExit as exc:
            if exc.code is None:
                status = 0
            elif isinstance(exc.code, int):
                status = exc.code & 0xFF
            else:
                print(exc.code, file=sys.stderr)
                status = 1
        except BaseException as exc:
            try:
                # From the program's own frames, as `python3 main.py` prints them: this one is ours.
                ours = exc.__traceback__
                traceback.print_exception(type(exc), exc, ours.tb_next if ours is not None else None)
            except MemoryError:  # no memory left even to format the traceback
                os.write(2, b"MemoryError\n")
            except BaseException:
                os.write(2, b"rlide sandbox: the program failed and its traceback could not be printed\n")
            status = 1
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        return status


class Server:
    def __init__(
        self,
        uids: tuple[int, ...],
        ws_root: str,
        sweep: str,
        *,
        own_pidns: bool = False,
        project_paths: tuple[str, ...] = (),
        plugins: str = PLUGINS,
        isolate: bool = False,
        cgroup: str | None = None,
        run_filter: bytes = b"",
        workspace_mb: int = 256,
        workspace_inodes: int = 65536,
        masked: tuple[str, ...] = (),
    ) -> None:
        self.uids = uids  # one per slot; empty: no uid to drop to
        self.ws_root = ws_root
        self.sweep_mode = sweep  # "uid" | "pidns" | "pgroup"
        self.isolate = isolate and sweep == "uid"
        self.isolation = "per-run namespaces" if self.isolate else "none asked"  # said in the greeting
        self.cgroup = cgroup if cgroup and os.path.isdir(cgroup) else None
        self.workspace_options = (
            f"size={workspace_mb}m,nr_inodes={workspace_inodes},mode=0700,uid={RUN_UID},gid={RUN_UID}".encode()
        )
        self.masked = [path.encode() for path in masked]  # files each run sees as /dev/null
        self.counter = 0
        self.bin_dir = os.path.dirname(sys.executable)
        self.host_gone = False
        self.once = False
        self.spares: collections.deque[Spare] = collections.deque()  # forked ahead, in slot order
        self.finished: list[str] = []  # workspace folders of runs that ended, removed after the answer
        # Per slot: (pid, pidfd) of its last run's child, killed as it exited, while the kernel tears
        # it down (its namespaces and workspace with it, ~1 ms): waited for before the slot's next run.
        self.exiting: dict[int, tuple[int, int]] = {}
        self.answered_at = -BACK_TO_BACK_S  # monotonic time the last answer went out
        self.back_to_back = False  # the current request came right after the last answer
        self.job = PrivateBuffer(MAX_PAYLOAD + HEADER.size)
        self.out = PrivateBuffer(2 * (MAX_OUTPUT + CHUNK))
        self.job_size = 0
        with open("/proc/self/comm", "rb") as comm:
            self.name = comm.read().strip()  # what a run's process is called (python3.11)
        self.userns: list[int] = []  # per slot: an fd of the user namespace its runs' children enter
        self.oom_events: list[int] = []  # per slot: an eventfd the kernel signals on an OOM in its group
        self.memory_limits: dict[int, int] = {}  # per slot: the memory limit last written to its group
        self.slot_groups = [f"run-{slot}" for slot in range(len(uids))]  # per slot: its memory group's folder
        self.retired = 0  # slot groups given up because they could not be emptied (`retire_slot`)
        self.out_used = (0, 0)  # bytes of each half of `out` the last run wrote
        # Made here, inherited by every child: what it needs to install the run's filter and drop
        # its capabilities, so that a child allocates nothing for either.
        self.filter_code = ctypes.create_string_buffer(run_filter, len(run_filter) or 1)
        self.filter_prog = SockFprog(len(run_filter) // 8, ctypes.addressof(self.filter_code))
        self.filter_ref = ctypes.byref(self.filter_prog)
        self.cap_header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
        self.cap_data = (ctypes.c_uint32 * 6)()
        env = {
            # `pytest` and `py.test` as agents type them (the plugins' bin/: `python -m pytest`).
            "PATH": f"{self.bin_dir}:{os.path.join(plugins, 'bin')}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
            # rlide's trusted pytest runner, beside its plugin (a judged test run starts there).
            "RLIDE_RUNNER": os.path.join(plugins, "rlide_run.py"),
        }
        if "LD_LIBRARY_PATH" in os.environ:  # set by bwrap for a shared-libpython interpreter
            env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        # The project's own dependencies first (its pinned pytest and plugins too), then the folders
        # of the workspace its .pth files add (an editable install's src, where Python's site would
        # put them: after the site), then pytest and friends; the sites read-only (see bwrap.py).
        project = [PROJECT_SITE, *project_paths] if os.path.isdir(PROJECT_SITE) else []
        sites = [site for site in (TOOLS_SITE, plugins) if os.path.isdir(site)]
        self.python = PythonProgram(env, [*project, *sites])
        # Answering on the child's report means scanning /proc for what it left (see sweep): cheap
        # in a sandbox's own PID namespace, ~5 ms over a whole host's processes (unsafe-local).
        self.answer_on_report = own_pidns

    # ---- child side -------------------------------------------------------------------------
    def child(self, spare: Spare, fds: tuple[int, int, int, int]) -> None:
        """Runs in the forked spare; never returns. Everything before the job is read is the same
        for every job, so it is done while the spare waits, not while a caller does."""
        code = 70
        prctl(PR_SET_NAME, SPARE_NAME, 0, 0, 0)
        try:
            # The server's /dev/null stdout object owns a low fd; closed now, its finalizer cannot
            # close whatever reuses that number once PythonProgram replaces sys.stdout.
            sys.stdout.close()
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            for target, fd in enumerate((null, *fds[:2])):
                os.dup2(fd, target)
            os.dup2(fds[2], 3)
            os.dup2(fds[3], STATUS_FD, inheritable=False)  # closed by an execve: sh and node just exit
            if self.cgroup:
                # `tasks`, not `cgroup.procs`: moving one thread (we have one) skips the lock that
                # stops every fork and exit on the machine for an RCU grace period (up to ~10 ms).
                fd = os.open(self.slot_file(spare.slot, "tasks"), os.O_WRONLY)
                os.write(fd, b"0")
                os.close(fd)
            if self.isolate:
                self.own_namespaces(spare)
            os.closerange(STATUS_FD + 1, 65536)
            os.chdir(spare.ws)
            os.umask(0o077)
            if self.sweep_mode == "uid":
                self.drop_privileges(spare)
            check(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
            if self.filter_prog.len:
                check(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self.filter_ref, 0, 0), "seccomp")
            program = self.python
            env = program.enter(spare.ws)
            grouped = bytearray(1)
            try:
                read_into(3, memoryview(grouped))
                req = read_frame(3, MAX_PAYLOAD)
            except EOFError:  # the server is shutting down: this spare was never used
                code = 0
                return
            prctl(PR_SET_NAME, self.name, 0, 0, 0)
            os.close(3)
            stdin = req.get("stdin")
            if stdin:  # before the file-size limit, which would cap it
                fd = os.memfd_create("stdin", 0)
                write_all(fd, stdin.encode())
                os.lseek(fd, 0, os.SEEK_SET)
                os.dup2(fd, 0)
                os.close(fd)
            cpu = max(1, int(float(req.get("cpu_s") or req["timeout_s"]) + 0.999))
            fsize = int(req["max_file_mb"]) << 20
            lang = req["language"]
            limits = [
                (resource.RLIMIT_CPU, cpu, cpu + 1),
                (resource.RLIMIT_FSIZE, fsize),
                (resource.RLIMIT_CORE, 0),
                (resource.RLIMIT_NOFILE, 1024),
            ]
            # Held by its memory group, a run gets no address-space cap at all, not even a generous
            # one: reserving address space costs nothing until it is touched, and what is touched
            # (pages, and the page tables and kernel objects behind them) is charged to the group.
            # A bound would only break programs that reserve much and use little (each thread's
            # stack and 64 MiB malloc arena, V8's cages, wasm memories) and protect nothing more.
            if grouped != MEMORY_GROUP:
                # Nothing holds the run to memory_mb: cap what each process may map instead, which
                # threaded code can hit long before it holds that much. V8 reserves far more
                # address space than it uses: cap data segments for node.
                mem_limit = resource.RLIMIT_DATA if lang == "node" else resource.RLIMIT_AS
                limits.append((mem_limit, int(req["memory_mb"]) << 20))
            if self.sweep_mode == "uid":  # NPROC counts per uid: only meaningful with our own uid
                limits.append((resource.RLIMIT_NPROC, int(req["max_processes"])))
            for lim in limits:
                hard = lim[2] if len(lim) > 2 else lim[1]
                _, ours = resource.getrlimit(lim[0])  # no longer ours to raise
                if ours != resource.RLIM_INFINITY:
                    hard = min(hard, ours)
                resource.setrlimit(lim[0], (min(lim[1], hard), hard))
            write_files(req.get("files") or {})
            env.update(req.get("env") or {})
            if lang == "python":
                code = program.run(req["code"], env)
                # Flushed, threads joined: the run is over. Saying so now lets the server answer
                # without waiting for the kernel to tear down this copy of the interpreter (1-2 ms).
                # The program could write this itself, but it could as well call os._exit(code).
                with contextlib.suppress(OSError):
                    os.write(STATUS_FD, EXIT_CODE.pack(code))
            else:
                # Python ignores these; an exec'd program should get the usual defaults.
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                if lang in SHELLS:
                    os.execve(SHELLS[lang], [os.path.basename(SHELLS[lang]), "-c", req["code"]], env)
                elif lang == "node":
                    write_files({".rlide-main.js": req["code"]})
                    heap = max(16, int(req["memory_mb"]) * 3 // 4)
                    node = shutil.which("node", path=env["PATH"]) or "/usr/bin/node"
                    os.execve(node, ["node", f"--max-old-space-size={heap}", ".rlide-main.js"], env)
                else:
                    os.write(2, f"unknown language {lang!r}\n".encode())
        except BaseException as exc:  # the child must never fall back into the server loop
            with contextlib.suppress(OSError):
                os.write(2, f"rlide sandbox: child setup failed: {exc!r}\n".encode())
        finally:
            os._exit(code)

    def drop_privileges(self, spare: Spare) -> None:
        """Become the run's uid while waiting, not when the job comes: the program running now has
        the other slot's uid and cannot touch us either way, and the caller waits less."""
        uid = RUN_UID if self.isolate else self.uids[spare.slot]
        if not self.isolate:
            os.chown(spare.ws, uid, uid)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        # Inside its user namespace the child was no uid 0 to begin with, so the kernel keeps its
        # capabilities over that namespace across setresuid: drop them.
        check(capset(self.cap_header, self.cap_data), "capset")

    def own_namespaces(self, spare: Spare) -> None:
        """In the spare: its slot's user namespace (in which only the run's uid is mapped), mount,
        IPC, UTS and network namespaces of its own, owned by it, and a fresh tmpfs as the workspace.
        All of it but the user namespace dies with the run's last process (or, for the network
        namespace, with the last socket of the run, which may outlive it: see `empty_slot`); none is
        visible to another run."""
        check(setns(self.userns[spare.slot], CLONE_NEWUSER), "enter the slot's user namespace")
        check(unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET), "unshare")
        loopback_up()
        check(mount(b"tmpfs", self.ws_root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, self.workspace_options), "mount")
        for path in self.masked:  # where the sandbox itself could not hide them (docker)
            check(mount(b"/dev/null", path, None, MS_BIND, None), "mask")

    # ---- server side ------------------------------------------------------------------------
    def signal_slot(self, slot: int) -> None:
        """SIGKILL every process of the slot's uid at once: `kill(-1)` made as that uid reaches
        exactly them (and never this server, PID 1 or the caller), under one kernel lock, so none
        can fork its way past it."""
        uid = self.uids[slot]
        os.setresuid(uid, uid, 0)  # saved uid 0: ours again below, capabilities with it
        try:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)
        finally:
            os.setresuid(0, 0, 0)

    def sweep(self, spare: Spare, reaped: bool, exiting: int | None = None) -> None:
        """Kill every process the run left behind, then reap them (we are PID 1 / subreaper).
        `exiting`: the run's child, already SIGKILLed and being torn down: not waited for here
        (see `wait_exiting`), nor are earlier runs' children in their teardown. Once kill()
        returns it cannot fork: the kernel fails a fork with a fatal signal pending, and a child
        forked before the signal is visible to the scan."""
        if not reaped and exiting is None:
            # The child itself first, by pid: a cancel or limit can land before it has called
            # setsid() or dropped its uid, when neither the group nor the uid sweep below would
            # reach it. Its pid cannot be reused until we reap it.
            for kill in (os.kill, os.killpg):
                with contextlib.suppress(OSError):
                    kill(spare.pid, signal.SIGKILL)
        if self.sweep_mode == "uid":
            self.signal_slot(spare.slot)
        if self.sweep_mode != "pgroup" and not self.only_spare_left(exiting):
            # Until a scan finds none alive: killed processes stay in the scan until they are
            # reaped, and one forked just before its parent was killed shows up a scan later.
            # Bounded by time, not by a count of scans: a count ran out in 0.1 s once scans got fast.
            deadline = time.monotonic() + SWEEP_TIMEOUT_S
            while victims := self.leftovers(exiting, spare.slot):
                if time.monotonic() > deadline:
                    # Unkillable leftovers: die, so that the host tears the whole sandbox down.
                    os.write(2, f"rlide sandbox: processes {victims} survived SIGKILL\n".encode())
                    os._exit(70)
                for pid in victims:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                self.reap()
                if self.sweep_mode == "uid":  # the scan only waits for what kill(-1) has killed
                    time.sleep(0.0002)
        self.reap()

    def only_spare_left(self, exiting: int | None) -> bool:
        """True when no process but the waiting spare (and `exiting`) descends from this server:
        a read or two of children lists instead of a scan of /proc (0.5-0.7 ms of a trivial run).
        Complete because we are a subreaper: whatever a run forked and left behind is reparented
        to us, not lost, except while `exiting` still holds its own children. So its list is read
        first: a child reparented between the two reads is in ours. Zombies still count, so the
        full sweep reaps them."""
        me = os.getpid()
        try:
            if exiting is not None and self.holds_children(exiting):
                return False
            children = {int(pid) for pid in read_proc(f"/proc/{me}/task/{me}/children").split()}
        except OSError:  # a kernel without CONFIG_PROC_CHILDREN: scan
            return False
        return children <= {*self.spare_pids(), exiting, *self.exiting_pids()}

    def spare_pids(self) -> set[int]:
        return {spare.pid for spare in self.spares}

    def exiting_pids(self) -> set[int]:
        return {pid for pid, _ in self.exiting.values()}

    @staticmethod
    def holds_children(pid: int) -> bool:
        """Whether `pid` (killed, being torn down) may still have children of its own. A process of
        several threads may: each thread keeps its own children list, and reading them all is not
        atomic, so only a single-threaded one with an empty list is vouched for."""
        if os.listdir(f"/proc/{pid}/task") != [str(pid)]:  # not its status: that waits on the teardown
            return True
        return bool(read_proc(f"/proc/{pid}/task/{pid}/children").strip())

    def leftovers(self, exiting: int | None, slot: int) -> list[int]:
        """Processes a run may have left, zombies included (a zombie whose main thread exited may
        still run other threads; a true one is ours to reap): of the slot's uid (uid mode), else
        any in the namespace but PID 1, us, the spare and `exiting`. Raw reads: text-mode open()
        and parsing every status file cost 0.2 ms a process."""
        skip = {1, os.getpid(), exiting, *self.spare_pids(), *self.exiting_pids()}
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in skip:
                continue
            try:
                status = read_proc(f"/proc/{name}/status")
            except OSError:
                continue
            fields = dict(line.split(b":", 1) for line in status.splitlines() if b":" in line)
            if fields.get(b"State", b"").strip().startswith(b"X"):
                continue
            if int(fields.get(b"PPid", b"0").strip() or 0) == 0:
                continue
            if self.sweep_mode == "uid" and int(fields[b"Uid"].split()[0]) != self.uids[slot]:
                continue
            found.append(int(name))
        return found

    @staticmethod
    def reap() -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def fork_spare(self) -> Spare:
        """Fork the child for the next run now, so that a caller waits only for its own program."""
        slot = self.counter % len(self.uids) if self.uids else 0
        self.counter += 1
        ws = self.ws_root
        if not self.isolate:
            ws = os.path.join(self.ws_root, f"r{os.getpid()}-{self.counter}")
            # Ours (mode 0700) until its run starts: a program running now as the sandbox uid cannot
            # plant files in the next run's workspace.
            os.mkdir(ws, 0o700)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        st_r, st_w = os.pipe()
        pid = os.fork()
        spare = Spare(pid, slot, ws, out_r, err_r, ctl_w, st_r)
        if pid == 0:
            for fd in (out_r, err_r, ctl_w, st_r):
                os.close(fd)
            self.child(spare, (out_w, err_w, ctl_r, st_w))
        for fd in (out_w, err_w, ctl_r, st_w):
            os.close(fd)
        return spare

    def make_user_namespaces(self) -> None:
        """One user namespace per slot, made once: a helper child makes it, we map the slot's uid
        into it as RUN_UID (and nothing else: not root, not another slot's uid) and keep it open
        for the spares to enter. Where user namespaces are not allowed, runs go without namespaces
        of their own (the greeting says so)."""
        for uid in self.uids[: 1 if self.once else None]:  # a fresh sandbox serves one run
            ready_r, ready_w = os.pipe()
            done_r, done_w = os.pipe()
            pid = os.fork()
            if pid == 0:  # answers, then waits for the pipe's end: until its namespace is opened
                os.close(done_w)
                made = unshare(CLONE_NEWUSER) == 0
                os.write(ready_w, b"u" if made else b"!" + EXIT_CODE.pack(ctypes.get_errno()))
                os.read(done_r, 1)
                os._exit(0)
            answer = os.read(ready_r, 1 + EXIT_CODE.size)
            try:
                if answer != b"u":
                    code = EXIT_CODE.unpack(answer[1:])[0] if len(answer) == 1 + EXIT_CODE.size else errno.EIO
                    raise OSError(code, os.strerror(code))
                for name in ("uid_map", "gid_map"):
                    fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY)
                    try:
                        os.write(fd, f"{RUN_UID} {uid} 1\n".encode())
                    finally:
                        os.close(fd)
                self.userns.append(os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC))
            except OSError as exc:
                self.isolate = False
                self.isolation = f"none: the runs' user namespaces could not be made ({exc.strerror})"
            finally:
                for fd in (ready_r, ready_w, done_r, done_w):
                    os.close(fd)
                os.waitpid(pid, 0)
            if not self.isolate:
                return

    def refill(self, count: int = 1) -> None:
        """Fork children for the next runs until `count` wait. A failure here is not reported: `run`
        forks on demand and reports it with the request that needed the child."""
        with contextlib.suppress(OSError):
            while len(self.spares) < count:
                self.spares.append(self.fork_spare())

    def discard(self, spare: Spare) -> None:
        """Closing its control pipe makes a waiting spare exit; then reap it."""
        for fd in (spare.control, spare.stdout, spare.stderr, spare.status):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.kill(spare.pid, signal.SIGKILL)
            os.waitpid(spare.pid, 0)
        if spare.ws != self.ws_root:  # a folder of ours, not the mount point of the spare's tmpfs
            remove_tree(spare.ws)

    def discard_spares(self) -> None:
        while self.spares:
            self.discard(self.spares.popleft())

    def run(self, req: Json) -> tuple[Json, list[memoryview]]:
        spare = self.spares.popleft() if self.spares else self.fork_spare()
        t0 = time.monotonic()
        try:
            memory = self.dispatch(spare, req)
        except BrokenPipeError:  # the spare died while it waited (nothing ran): use a fresh one
            self.discard(spare)
            spare = self.fork_spare()
            t0 = time.monotonic()
            memory = self.dispatch(spare, req)
        if self.back_to_back and self.sweep_mode == "uid" and not self.once:
            # The next requests will likely come as soon as this one is answered: fork their
            # children while this run's program runs, one per other slot (a child takes ~1 ms to
            # make its namespaces, drop its uid and install its filter: two runs ahead, a short
            # program's next request does not wait for it), rather than after the answer. A caller
            # that leaves gaps gets its child forked after the answer instead, where the fork and
            # the child's set-up do not compete with its program for the CPU. Only with uids to
            # take turns over: each waiting child has its own slot's uid, so neither this run's
            # program nor the uid sweep after it can touch it. Without, the program could reach into
            # a waiting child, so the next one is forked after the sweep.
            self.refill(len(self.uids) - 1)
        try:
            return self.supervise(req, spare, t0, memory)
        finally:
            if spare.ws != self.ws_root:
                self.finished.append(spare.ws)

    def remove_finished(self) -> None:
        """Delete finished runs' workspace folders (without namespaces of their own). Called once
        the answer is sent: the next program starts only with the next request, so it never sees
        them."""
        while self.finished:
            remove_tree(self.finished.pop())

    def wait_exiting(self, slot: int | None = None) -> None:
        """Wait until the child of a slot's last run (every slot's, without one), killed as it
        exited (see `supervise`), is gone. With uids to take turns over, the next run has
        another uid and starts during that teardown; the slot's own next run never does."""
        for pending in [slot] if slot is not None else list(self.exiting):
            if pending not in self.exiting:
                continue
            _, pidfd = self.exiting.pop(pending)
            select.select([pidfd], [], [])  # a pidfd turns readable when its process has exited
            os.close(pidfd)
        self.reap()

    def slot_file(self, slot: int, name: str) -> str:
        return f"{self.cgroup}/{self.slot_groups[slot]}/{name}"

    def watch_ooms(self) -> None:
        """An eventfd per slot that the kernel signals when the slot's group runs out of memory
        (cgroup v1 `memory.oom_control` notifications): one read after a run says whether it did."""
        for slot in range(len(self.uids)):
            try:
                self.oom_events.append(self.watch_oom(slot))
            except OSError:
                self.cgroup = None  # no per-run groups: the server's own group still caps all
                return

    def watch_oom(self, slot: int) -> int:
        event = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        control = os.open(self.slot_file(slot, "memory.oom_control"), os.O_RDONLY | os.O_CLOEXEC)
        fd = os.open(self.slot_file(slot, "cgroup.event_control"), os.O_WRONLY)
        try:
            os.write(fd, f"{event} {control}".encode())
        finally:
            os.close(fd)
        return event

    def slot_held(self, slot: int) -> int:
        """What the slot's group holds that reclaim cannot take back: anonymous memory, shmem (memfds,
        tmpfs files, shared memory) and swap. Not the page cache of files a run read (the shared trees'
        libraries, say) nor the dentries and inodes cached for them: both stay charged to the group
        after the run, but are freed under pressure and are no object of the run's."""
        usage = int(read_proc(self.slot_file(slot, "memory.usage_in_bytes")))
        if usage <= EMPTY_SLOT_BYTES:
            return usage  # the common case, without parsing memory.stat
        stat = dict(line.split() for line in read_proc(self.slot_file(slot, "memory.stat")).decode().splitlines())
        return sum(int(stat.get(f"total_{kind}", 0)) for kind in ("rss", "shmem", "swap"))

    def empty_slot(self, spare: Spare) -> None:
        """Prove the slot's memory group empty before its next run, whose child (`spare`) waits in it.
        A run can leave what no process holds: unix sockets sent into each other's queues (an
        `SCM_RIGHTS` cycle), and every memfd or file in flight there, charged to its group. Only
        the kernel's unix garbage collector frees them, and it runs when some unix socket is
        released while descriptors are in flight: a run that puts all its sockets in flight leaves
        none to release. So we release one (a socketpair made and closed), until the group is back
        to what a waiting child holds. The collector works asynchronously (this kernel, 6.18, frees
        a 250 MB memfd in flight in ~50 ms); a group it cannot empty in `SLOT_GC_WAIT_S` is retired."""
        if not self.cgroup:
            return
        deadline = time.monotonic() + SLOT_GC_WAIT_S
        while True:
            collect_unix_garbage()
            if self.slot_held(spare.slot) <= EMPTY_SLOT_BYTES:
                return
            if time.monotonic() > deadline:
                self.retire_slot(spare)
                return
            time.sleep(0.001)

    def retire_slot(self, spare: Spare) -> None:
        """Give the slot a new memory group and never use the old one again (the host removes both
        with the server's group, and makes no later server in it). Where that fails, end the
        server: the host starts a new sandbox with groups of its own."""
        self.retired += 1
        name = f"run-{spare.slot}.{self.retired}"
        held = self.slot_held(spare.slot)
        try:
            os.mkdir(f"{self.cgroup}/{name}")
            self.slot_groups[spare.slot] = name
            self.memory_limits.pop(spare.slot, None)
            os.close(self.oom_events[spare.slot])
            self.oom_events[spare.slot] = self.watch_oom(spare.slot)
            fd = os.open(self.slot_file(spare.slot, "tasks"), os.O_WRONLY)
            try:
                os.write(fd, str(spare.pid).encode())
            finally:
                os.close(fd)
        except OSError as exc:
            line = f"rlide sandbox: slot {spare.slot} holds {held} bytes and cannot be retired: {exc!r}\n"
            os.write(2, line.encode())
            os._exit(70)
        # The host sees the count as the server group's subfolders (cgroups.ServerCgroup.retired_slots).
        os.write(2, f"rlide sandbox: slot {spare.slot} retired ({self.retired} so far): {held} bytes left\n".encode())

    def ran_out_of_memory(self, slot: int) -> bool:
        """Whether the slot's group ran out of memory since this was last asked."""
        if not self.cgroup:
            return False
        try:
            return os.eventfd_read(self.oom_events[slot]) > 0
        except BlockingIOError:
            return False

    def hold_memory(self, slot: int, limit: int) -> bool:
        """Set the slot's memory group to hold its next run to `limit` bytes, RAM and swap together:
        what the run holds in all its processes, its tmpfs, memfds and shared memory. Whether it
        does: without a group, or where the kernel refused the limit (below what the group holds
        now), the run's child caps its address space instead."""
        if not self.cgroup:
            return False
        if self.memory_limits.get(slot) == limit:
            return True
        self.memory_limits.pop(slot, None)
        writes = [("memory.limit_in_bytes", limit)]
        memsw = "memory.memsw.limit_in_bytes"  # RAM + swap; absent where the kernel does not account swap
        if os.path.exists(self.slot_file(slot, memsw)):
            # It may never be below RAM alone: lifted first, whatever the group had before, so that
            # no order of earlier limits makes a write fail.
            writes = [(memsw, -1), *writes, (memsw, limit)]
        try:
            for name, value in writes:
                fd = os.open(self.slot_file(slot, name), os.O_WRONLY)
                try:
                    os.write(fd, str(value).encode())
                finally:
                    os.close(fd)
        except OSError:
            return False
        self.memory_limits[slot] = limit
        return True

    def dispatch(self, spare: Spare, req: Json) -> str:
        """Hand the spare its job; returns what holds the run's memory: "group" or "rlimit"."""
        self.wait_exiting(spare.slot if self.sweep_mode == "uid" else None)
        self.empty_slot(spare)
        grouped = self.hold_memory(spare.slot, int(req["memory_mb"]) << 20)
        self.ran_out_of_memory(spare.slot)  # an OOM of an earlier run, noticed late, is not this run's
        flag = MEMORY_GROUP if grouped else MEMORY_RLIMIT
        write_all(spare.control, flag, self.job.view[: HEADER.size + self.job_size])
        os.close(spare.control)
        return "group" if grouped else "rlimit"

    def supervise(self, req: Json, spare: Spare, t0: float, memory: str) -> tuple[Json, list[memoryview]]:
        pid, out_r, err_r = spare.pid, spare.stdout, spare.stderr
        limit = int(req["max_output_bytes"])
        deadline = t0 + float(req["timeout_s"])
        half = len(self.out.view) // 2
        outputs = {out_r: Output(self.out.view[:half], limit), err_r: Output(self.out.view[half:], limit)}
        sel = selectors.DefaultSelector()
        pidfd = os.pidfd_open(pid)
        sel.register(pidfd, selectors.EVENT_READ, "exit")
        sel.register(out_r, selectors.EVENT_READ, "out")
        sel.register(err_r, selectors.EVENT_READ, "out")
        sel.register(0, selectors.EVENT_READ, "control")
        if self.answer_on_report:
            sel.register(spare.status, selectors.EVENT_READ, "status")
        reported: int | None = None  # the exit code the child said it is exiting with
        forced: str | None = None  # the status we imposed, if any
        detail = ""
        wait_status: int | None = None
        while wait_status is None and reported is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                forced, detail = "timeout", f"wall-clock limit {req['timeout_s']}s"
                break
            for key, _ in sel.select(remaining):
                if key.data == "exit":
                    _, wait_status = os.waitpid(pid, 0)
                elif key.data == "out":
                    stream = outputs[key.fd]
                    if not stream.read(key.fd):
                        sel.unregister(key.fd)
                    if stream.over:
                        forced, detail = "output_limit", f"output over {limit} bytes"
                elif key.data == "status":
                    message = os.read(key.fd, 64)
                    if len(message) == EXIT_CODE.size:
                        reported = EXIT_CODE.unpack(message)[0]
                    else:  # closed (execve, exit) or garbled: the kernel's exit status decides
                        sel.unregister(key.fd)
                elif key.data == "control":
                    try:
                        msg = read_frame(0)
                    except EOFError:  # the host is gone: kill the run, then exit the server
                        msg, self.host_gone = {"op": "cancel"}, True
                    if msg.get("op") == "cancel":
                        forced, detail = "killed", "cancelled by the host"
            if forced:
                break
        duration = (time.monotonic() - t0) * 1000
        if reported is not None and wait_status is None:
            # It is exiting: make sure (SIGKILL, by pid: not reaped, so not reused), and leave its
            # teardown to the kernel while we answer. dispatch() waits for it to be gone before
            # the next run starts.
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            self.exiting[spare.slot], pidfd = (pid, pidfd), -1
        # Also closes pipes held by leftover grandchildren.
        self.sweep(spare, reaped=wait_status is not None, exiting=pid if reported is not None else None)
        if wait_status is None and reported is None:
            try:
                _, wait_status = os.waitpid(pid, 0)
            except ChildProcessError:
                wait_status = 9
        for fd, stream in outputs.items():  # drain what is left, bounded by the limit
            os.set_blocking(fd, False)
            while not stream.over:
                try:
                    if not stream.read(fd):
                        break
                except BlockingIOError:
                    break
        sel.close()
        for fd in (pidfd, out_r, err_r, spare.status):
            if fd >= 0:
                os.close(fd)
        if reported is not None:
            exit_code: int | None = reported
        else:
            exit_code = os.waitstatus_to_exitcode(wait_status) if wait_status is not None else None
        streams = [outputs[out_r], outputs[err_r]]
        self.out_used = (streams[0].size, streams[1].size)
        answer = {
            "status": forced,
            "exit_code": exit_code,
            "duration_ms": duration,
            "detail": detail,
            "stdout": len(streams[0].kept),
            "stderr": len(streams[1].kept),
            "cut": [stream.over for stream in streams],
            "oom": self.ran_out_of_memory(spare.slot),
            "memory": memory,
        }
        return answer, [stream.kept for stream in streams]

    def read_job(self, size: int) -> None:
        """The job's bytes into the private buffer, framed as the child reads them; never decoded here.
        One too large is read and dropped, so the next frame is read from its start."""
        self.job_size = min(max(size, 0), MAX_PAYLOAD)
        self.job.view[: HEADER.size] = HEADER.pack(self.job_size)
        read_into(0, self.job.view[HEADER.size : HEADER.size + self.job_size])
        for left in range(size - self.job_size, 0, -MAX_PAYLOAD):
            read_into(0, self.job.view[HEADER.size : HEADER.size + min(left, MAX_PAYLOAD)])
        if size != self.job_size:
            raise ValueError(f"a job of {size} bytes (at most {MAX_PAYLOAD})")

    def serve(self, once: bool) -> None:
        self.once = once
        # Runs never get to signal us (another uid), except while the sweep wears a run's uid for
        # an instant: a handler would make SIGINT deliverable to PID 1 then. The host uses SIGKILL.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if not once:
            for name in PREIMPORT:
                with contextlib.suppress(ImportError):
                    __import__(name)
            import gc

            # Move everything imported so far out of the collector's reach: a child's GC pass then
            # does not touch (and copy-on-write) the parent's pages. Measurably cheaper forks.
            gc.collect()
            gc.freeze()
        if self.isolate:
            self.make_user_namespaces()
        if self.cgroup:
            self.watch_ooms()
        self.refill()
        write_frame(1, {"op": "ready", "pid": os.getpid(), "isolation": self.isolation})
        while True:
            try:
                req = read_frame(0)
            except EOFError:
                self.discard_spares()
                return
            self.back_to_back = time.monotonic() - self.answered_at < BACK_TO_BACK_S
            op = req.get("op")
            if op == "run":
                tail: list[memoryview] = []
                try:
                    self.read_job(int(req["payload"]))
                    resp, tail = self.run(req)
                except Exception as exc:  # report, keep serving: one bad request must not kill us
                    resp = {"status": "sandbox_error", "exit_code": None, "detail": repr(exc)}
                if not self.host_gone:
                    write_frame(1, resp, *tail)
                self.answered_at = time.monotonic()
                self.job.scrub(0, HEADER.size + self.job_size)
                half = len(self.out.view) // 2
                self.out.scrub(0, self.out_used[0])
                self.out.scrub(half, self.out_used[1])
                self.out_used = (0, 0)
                self.remove_finished()
                if self.sweep_mode != "uid":
                    self.wait_exiting()  # gone before the next run, which has the same uid
                self.reap()
                # Early, so that what the run left in flight is usually freed before its slot comes
                # round again (`empty_slot` makes sure) and does not count against the server's group.
                collect_unix_garbage()
                if once or self.host_gone:
                    return
                self.refill()
            elif op == "ping":
                write_frame(1, {"op": "pong"})
            # a stray "cancel" that arrives after its run finished is ignored


def main(argv: list[str]) -> None:
    args = dict(zip(argv[0::2], argv[1::2], strict=False))
    once = args.get("--once") == "1"
    uids = tuple(int(u) for u in args.get("--uids", "").split(",") if u and int(u) >= 0)
    server = Server(
        uids=uids,
        ws_root=args["--ws-root"],
        sweep=args.get("--sweep", "uid"),
        own_pidns=args.get("--own-pidns") == "1",  # the backend started us in a PID namespace of our own
        project_paths=tuple(str(p) for p in json.loads(args.get("--project-paths", "[]"))),
        plugins=args.get("--plugins", PLUGINS),
        isolate=args.get("--isolate") == "1",
        cgroup=args.get("--cgroup"),
        run_filter=bytes.fromhex(args.get("--run-filter", "")),
        workspace_mb=int(args.get("--workspace-mb", "256")),
        workspace_inodes=int(args.get("--workspace-inodes", "65536")),
        masked=tuple(json.loads(args.get("--masked", "[]"))),
    )
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Our own stdio objects must not touch fd 1; the protocol uses raw fds only.
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (for the life of the server)
    server.serve(once)


if __name__ == "__main__":
    main(sys.argv[1:])
