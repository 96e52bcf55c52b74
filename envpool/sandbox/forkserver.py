"""The warm fork-server that lives INSIDE a sandbox (bwrap, docker, or unsafe-local).

Standard library only: it runs under the sandbox's bare interpreter (`python3 -I -S`), with no
access to the host's site-packages. The host talks to it over its stdin/stdout with frames of
`4-byte big-endian length + JSON`. It never prints: fd 1 is the protocol channel.

Per run it uses one child forked from an interpreter that already imported the common stdlib, so
a trivial Python program costs a few milliseconds instead of a 20 ms interpreter start. The child
for the next run is forked ahead, while the current one runs when requests come back to back (and
there is a uid to drop to), otherwise right after the answer. It does everything that does not
depend on the request while it waits: new session and process group, its pipes, a fresh workspace
directory, and pointing Python's stdio objects and environment (made once, in the server: see
`PythonProgram`) at them. Forking and that set-up were 2-3 ms of the 4.7 ms a trivial run took
inside the server (the page-table copy, then ~500 copy-on-write faults).
When the request arrives on its control pipe the child sets its limits, drops to the unprivileged
uid, writes the files and either exec()s the program in a fresh `__main__` (python) or execve()s
sh/node. A Python child reports its exit code on a status pipe once the program has finished and
its output is flushed; the server then SIGKILLs it and answers without waiting for the kernel's
teardown of the interpreter (1-2 ms), which it waits for before the next request. After the child
exits (or reports), every other process of that uid (or, without a uid to drop to, every process in
the PID namespace but ourselves) is SIGKILLed and reaped, and the workspace is deleted.
This file stays one module on purpose: the sandbox runs it as a script with the bare interpreter.
A waiting child keeps the sandbox's root uid and a root-owned workspace until its request comes,
so a running program (another uid) can neither touch it nor plant files for the next run, and the
uid sweep passes it by.

Modes: `serve` (default; loop over requests) and `--once` (one request, for fresh-sandbox runs).
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import json
import linecache
import os
import resource
import select
import selectors
import shutil
import signal
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
MAX_FRAME = 64 * 1024 * 1024
PR_SET_CHILD_SUBREAPER = 36
SWEEP_TIMEOUT_S = 10.0  # a run's processes that outlive this many seconds of SIGKILLs end the server
# A request that comes sooner than this after the last answer is back to back (a rollout loop):
# the next spare is then forked during the run, not after the answer. About what a late fork takes.
BACK_TO_BACK_S = 0.005
MEMORY_HINTS = (
    "MemoryError",
    "Cannot allocate memory",
    "out of memory",
    "bad_alloc",
    "heap limit",
    "allocation failed",
)
# Imported once in the server so each forked child finds them warm (HumanEval-style programs).
PREIMPORT = (
    "abc", "bisect", "builtins", "collections", "collections.abc", "contextlib", "copy", "dataclasses",
    "datetime", "decimal", "enum", "fractions", "functools", "hashlib", "heapq", "io", "itertools", "json",
    "linecache", "math", "operator", "random", "re", "statistics", "string", "textwrap", "threading",
    "traceback", "types", "typing", "unittest",
)  # fmt: skip


TOOLS_SITE = "/opt/tools-site"
PROJECT_SITE = "/opt/project-site"
SHELLS = {"shell": "/bin/sh", "bash": "/bin/bash"}


def read_proc(path: str) -> bytes:
    """A /proc file's first 64 KiB (enough for a status file, or a children list to compare)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def read_exact(fd: int, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def read_frame(fd: int) -> Json:
    (size,) = HEADER.unpack(read_exact(fd, HEADER.size))
    if size > MAX_FRAME:
        raise ValueError("frame too large")
    frame: Json = json.loads(read_exact(fd, size))
    return frame


def write_frame(fd: int, obj: Json) -> None:
    data = json.dumps(obj).encode()
    data = HEADER.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


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


@dataclass
class Spare:
    """A forked child waiting for its request on `control`, and the host ends of its pipes."""

    pid: int
    ws: str
    stdin: int
    stdout: int
    stderr: int
    control: int
    status: int  # the child reports its exit code here just before it exits (python only)


STATUS_FD = 4
EXIT_CODE = struct.Struct(">i")


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
        uid: int,
        gid: int,
        ws_root: str,
        sweep: str,
        *,
        own_pidns: bool = False,
        project_paths: tuple[str, ...] = (),
    ) -> None:
        self.uid, self.gid = uid, gid
        self.ws_root = ws_root
        self.sweep_mode = sweep  # "uid" | "pidns" | "pgroup"
        self.counter = 0
        self.bin_dir = os.path.dirname(sys.executable)
        self.host_gone = False
        self.once = False
        self.spare: Spare | None = None
        self.finished: list[str] = []  # workspaces of runs that ended, removed after the answer
        self.exiting: int | None = None  # pidfd of the last run's child while the kernel tears it down
        self.answered_at = -BACK_TO_BACK_S  # monotonic time the last answer went out
        self.back_to_back = False  # the current request came right after the last answer
        env = {
            "PATH": f"{self.bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
        }
        # The project's own dependencies first (its pinned pytest and plugins too), then the folders
        # of the workspace its .pth files add (an editable install's src, where Python's site would
        # put them: after the site), then pytest and friends; the sites read-only (see bwrap.py).
        project = [PROJECT_SITE, *project_paths] if os.path.isdir(PROJECT_SITE) else []
        self.python = PythonProgram(env, [*project, *([TOOLS_SITE] if os.path.isdir(TOOLS_SITE) else [])])
        # Answering on the child's report means scanning /proc for what it left (see sweep): cheap
        # in a sandbox's own PID namespace, ~5 ms over a whole host's processes (unsafe-local).
        self.answer_on_report = own_pidns

    # ---- child side -------------------------------------------------------------------------
    def child(self, ws: str, fds: tuple[int, int, int], control: int, status: int) -> None:
        """Runs in the forked spare; never returns. Everything before `read_frame` is the same for
        every request, so it is done while the spare waits, not while a caller does."""
        code = 70
        try:
            # The server's /dev/null stdout object owns a low fd; closed now, its finalizer cannot
            # close whatever reuses that number once PythonProgram replaces sys.stdout.
            sys.stdout.close()
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            os.dup2(control, 3)
            os.dup2(status, STATUS_FD, inheritable=False)  # closed by an execve: sh and node just exit
            os.closerange(STATUS_FD + 1, 65536)
            os.chdir(ws)
            os.umask(0o077)
            program = self.python
            env = program.enter(ws)
            try:
                req = read_frame(3)
            except EOFError:  # the server is shutting down: this spare was never used
                code = 0
                return
            os.close(3)
            mem = int(req["memory_mb"]) << 20
            cpu = max(1, int(float(req.get("cpu_s") or req["timeout_s"]) + 0.999))
            fsize = int(req["max_file_mb"]) << 20
            lang = req["language"]
            # V8 reserves far more address space than it uses: cap data segments for node instead.
            mem_limit = resource.RLIMIT_DATA if lang == "node" else resource.RLIMIT_AS
            limits = [
                (mem_limit, mem),
                (resource.RLIMIT_CPU, cpu, cpu + 1),
                (resource.RLIMIT_FSIZE, fsize),
                (resource.RLIMIT_CORE, 0),
                (resource.RLIMIT_NOFILE, 1024),
            ]
            if self.sweep_mode == "uid":  # NPROC counts per uid: only meaningful with our own uid
                limits.append((resource.RLIMIT_NPROC, int(req["max_processes"])))
            for lim in limits:
                soft = lim[1]
                hard = lim[2] if len(lim) > 2 else soft
                resource.setrlimit(lim[0], (soft, hard))
            if self.sweep_mode == "uid":
                os.setgroups([])
                os.setresgid(self.gid, self.gid, self.gid)
                os.setresuid(self.uid, self.uid, self.uid)
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

    # ---- server side ------------------------------------------------------------------------
    def sweep(self, child_pid: int, reaped: bool, exiting: int | None = None) -> None:
        """Kill every process the run left behind, then reap them (we are PID 1 / subreaper).
        `exiting`: the run's child, already SIGKILLed and being torn down: not waited for here
        (see `wait_exiting`). Once kill() returns it cannot fork: the kernel fails a fork with a
        fatal signal pending, and a child forked before the signal is visible to the scan."""
        if not reaped and exiting is None:
            # The child itself first, by pid: a cancel or limit can land before it has called
            # setsid() or dropped its uid, when neither the group nor the uid sweep below would
            # reach it. Its pid cannot be reused until we reap it.
            for kill in (os.kill, os.killpg):
                with contextlib.suppress(OSError):
                    kill(child_pid, signal.SIGKILL)
        if self.sweep_mode != "pgroup" and not self.only_spare_left(exiting):
            # Until a scan finds none alive: killed processes stay in the scan until they are
            # zombies, and one forked just before its parent was killed shows up a scan later.
            # Bounded by time, not by a count of scans: a count ran out in 0.1 s once scans got fast.
            deadline = time.monotonic() + SWEEP_TIMEOUT_S
            while victims := self.leftovers(exiting):
                if time.monotonic() > deadline:
                    # Unkillable leftovers: die, so that the host tears the whole sandbox down.
                    os.write(2, f"rlide sandbox: processes {victims} survived SIGKILL\n".encode())
                    os._exit(70)
                for pid in victims:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                self.reap()
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
        return children <= {self.spare.pid if self.spare else -1, exiting}

    @staticmethod
    def holds_children(pid: int) -> bool:
        """Whether `pid` (killed, being torn down) may still have children of its own. A process of
        several threads may: each thread keeps its own children list, and reading them all is not
        atomic, so only a single-threaded one with an empty list is vouched for."""
        if os.listdir(f"/proc/{pid}/task") != [str(pid)]:  # not its status: that waits on the teardown
            return True
        return bool(read_proc(f"/proc/{pid}/task/{pid}/children").strip())

    def leftovers(self, exiting: int | None) -> list[int]:
        """Live processes a run may have left: of the sandbox uid (uid mode), else any in the
        namespace but PID 1, us and `exiting`. Raw reads: text-mode open() and parsing every
        status file cost 0.2 ms a process."""
        skip = {1, os.getpid(), exiting}
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in skip:
                continue
            try:
                status = read_proc(f"/proc/{name}/status")
            except OSError:
                continue
            fields = dict(line.split(b":", 1) for line in status.splitlines() if b":" in line)
            if fields.get(b"State", b"").strip().startswith((b"Z", b"X")):
                continue
            if int(fields.get(b"PPid", b"0").strip() or 0) == 0:
                continue
            if self.sweep_mode == "uid" and int(fields[b"Uid"].split()[0]) != self.uid:
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
        self.counter += 1
        ws = os.path.join(self.ws_root, f"r{os.getpid()}-{self.counter}")
        # Ours (mode 0700) until its run starts: a program running now as the sandbox uid cannot
        # plant files in the next run's workspace.
        os.mkdir(ws, 0o700)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        st_r, st_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in (in_w, out_r, err_r, ctl_w, st_r):
                os.close(fd)
            self.child(ws, (in_r, out_w, err_w), ctl_r, st_w)
        for fd in (in_r, out_w, err_w, ctl_r, st_w):
            os.close(fd)
        return Spare(pid, ws, in_w, out_r, err_r, ctl_w, st_r)

    def refill(self) -> None:
        """Fork the next run's child while the host reads this answer. A failure here is not
        reported: `run` forks on demand and reports it with the request that needed the child."""
        with contextlib.suppress(OSError):
            self.spare = self.fork_spare()

    def discard_spare(self) -> None:
        """Closing its control pipe makes a waiting spare exit; then reap it."""
        spare, self.spare = self.spare, None
        if spare is None:
            return
        for fd in (spare.control, spare.stdin, spare.stdout, spare.stderr, spare.status):
            os.close(fd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(spare.pid, 0)
        shutil.rmtree(spare.ws, ignore_errors=True)

    def run(self, req: Json) -> Json:
        spare, self.spare = self.spare or self.fork_spare(), None
        t0 = time.monotonic()
        try:
            self.dispatch(spare, req)
        except BrokenPipeError:  # the spare died while it waited (nothing ran): use a fresh one
            self.spare = spare
            self.discard_spare()
            spare = self.fork_spare()
            t0 = time.monotonic()
            self.dispatch(spare, req)
        if self.back_to_back and self.sweep_mode == "uid" and not self.once:
            # The next request will likely come as soon as this one is answered: fork its child
            # while this run's program runs, rather than after the answer, where the next request
            # would wait for it. A caller that leaves gaps gets its spare forked after the answer
            # instead, where the fork and the spare's set-up do not compete with its program for
            # the CPU (0.4 ms of a trivial run on 2 cores). Only with a uid to drop to: until its
            # request comes the spare keeps the sandbox's root uid, so neither this run's program
            # (another uid) nor the uid sweep after it can touch it. Without a separate uid the
            # program could reach into the waiting child, so the next one is forked after the sweep.
            self.refill()
        try:
            return self.supervise(req, spare, t0)
        finally:
            self.finished.append(spare.ws)

    def remove_finished(self) -> None:
        """Delete finished runs' workspaces. Called once the answer is sent (0.2 ms off every run):
        the next program starts only with the next request, so it never sees them."""
        while self.finished:
            shutil.rmtree(self.finished.pop(), ignore_errors=True)

    def wait_exiting(self) -> None:
        """Wait until the last run's child, killed as it exited (see `supervise`), is gone: no
        process of one run is left when the next one's workspace is handed to the sandbox uid."""
        if self.exiting is None:
            return
        pidfd, self.exiting = self.exiting, None
        select.select([pidfd], [], [])  # a pidfd turns readable when its process has exited
        os.close(pidfd)
        self.reap()

    def dispatch(self, spare: Spare, req: Json) -> None:
        self.wait_exiting()  # normally done already, after the last answer: this is the guarantee
        if self.sweep_mode == "uid":
            os.chown(spare.ws, self.uid, self.gid)
        write_frame(spare.control, req)
        os.close(spare.control)

    def supervise(self, req: Json, spare: Spare, t0: float) -> Json:
        pid, in_w, out_r, err_r = spare.pid, spare.stdin, spare.stdout, spare.stderr
        limit = int(req["max_output_bytes"])
        deadline = t0 + float(req["timeout_s"])
        bufs = {out_r: bytearray(), err_r: bytearray()}
        stdin_data = (req.get("stdin") or "").encode()
        sel = selectors.DefaultSelector()
        pidfd = os.pidfd_open(pid)
        sel.register(pidfd, selectors.EVENT_READ, "exit")
        sel.register(out_r, selectors.EVENT_READ, "out")
        sel.register(err_r, selectors.EVENT_READ, "out")
        sel.register(0, selectors.EVENT_READ, "control")
        if self.answer_on_report:
            sel.register(spare.status, selectors.EVENT_READ, "status")
        reported: int | None = None  # the exit code the child said it is exiting with
        if stdin_data:
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE, "stdin")
        else:
            os.close(in_w)
        forced: str | None = None  # the status we imposed, if any
        detail = ""
        truncated = False
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
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fd)
                        continue
                    bufs[key.fd] += data
                    if len(bufs[key.fd]) > limit:
                        forced, detail, truncated = "output_limit", f"output over {limit} bytes", True
                elif key.data == "status":
                    message = os.read(key.fd, 64)
                    if len(message) == EXIT_CODE.size:
                        reported = EXIT_CODE.unpack(message)[0]
                    else:  # closed (execve, exit) or garbled: the kernel's exit status decides
                        sel.unregister(key.fd)
                elif key.data == "stdin":
                    try:
                        n = os.write(in_w, stdin_data[:65536])
                    except BrokenPipeError:
                        n = len(stdin_data)
                    stdin_data = stdin_data[n:]
                    if not stdin_data:
                        sel.unregister(in_w)
                        os.close(in_w)
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
            # the next run's workspace is handed to the sandbox uid.
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            self.exiting, pidfd = pidfd, -1
        # Also closes pipes held by leftover grandchildren.
        self.sweep(pid, reaped=wait_status is not None, exiting=pid if reported is not None else None)
        if wait_status is None and reported is None:
            try:
                _, wait_status = os.waitpid(pid, 0)
            except ChildProcessError:
                wait_status = 9
        for fd in (out_r, err_r):  # drain what is left, bounded by the limit
            os.set_blocking(fd, False)
            while len(bufs[fd]) <= limit:
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not data:
                    break
                bufs[fd] += data
        sel.close()
        for fd in (pidfd, out_r, err_r, spare.status):
            if fd >= 0:
                os.close(fd)
        if stdin_data:  # the child stopped reading before taking all of its stdin
            os.close(in_w)
        texts = []
        for fd in (out_r, err_r):
            raw = bytes(bufs[fd])
            if len(raw) > limit:
                truncated = True
                raw = raw[:limit]
                texts.append(raw.decode("utf-8", "replace") + f"\n[rlide: output truncated at {limit} bytes]\n")
            else:
                texts.append(raw.decode("utf-8", "replace"))
        if reported is not None:
            exit_code: int | None = reported
        else:
            exit_code = os.waitstatus_to_exitcode(wait_status) if wait_status is not None else None
        status = forced or self.classify(exit_code, texts[1])
        if status == "timeout" and not detail:
            detail = "CPU-time limit"
        return {
            "status": status,
            "exit_code": exit_code,
            "stdout": texts[0],
            "stderr": texts[1],
            "duration_ms": duration,
            "truncated": truncated,
            "detail": detail,
        }

    @staticmethod
    def classify(exit_code: int | None, stderr: str) -> str:
        if exit_code == 0:
            return "ok"
        if exit_code == -signal.SIGXCPU:
            return "timeout"
        if exit_code is not None and exit_code < 0 and exit_code != -signal.SIGXFSZ:
            tail = stderr[-4096:]
            return "memory_limit" if any(h in tail for h in MEMORY_HINTS) else "killed"
        tail = stderr[-4096:]
        if any(h in tail for h in MEMORY_HINTS):
            return "memory_limit"
        return "error"

    def serve(self, once: bool) -> None:
        self.once = once
        if not once:
            for name in PREIMPORT:
                with contextlib.suppress(ImportError):
                    __import__(name)
            import gc

            # Move everything imported so far out of the collector's reach: a child's GC pass then
            # does not touch (and copy-on-write) the parent's pages. Measurably cheaper forks.
            gc.collect()
            gc.freeze()
            self.refill()
        write_frame(1, {"op": "ready", "pid": os.getpid()})
        while True:
            try:
                req = read_frame(0)
            except EOFError:
                self.discard_spare()
                return
            self.back_to_back = time.monotonic() - self.answered_at < BACK_TO_BACK_S
            op = req.get("op")
            if op == "run":
                try:
                    resp = self.run(req)
                except Exception as exc:  # report, keep serving: one bad request must not kill us
                    resp = {"status": "sandbox_error", "exit_code": None, "detail": repr(exc)}
                if not self.host_gone:
                    write_frame(1, resp)
                self.answered_at = time.monotonic()
                self.remove_finished()
                self.wait_exiting()  # reaped now, not left a zombie until the next request
                if once or self.host_gone:
                    return
                if self.spare is None:
                    self.refill()
            elif op == "ping":
                write_frame(1, {"op": "pong"})
            # a stray "cancel" that arrives after its run finished is ignored


def main(argv: list[str]) -> None:
    args = dict(zip(argv[0::2], argv[1::2], strict=False))
    once = args.get("--once") == "1"
    server = Server(
        uid=int(args.get("--uid", "-1")),
        gid=int(args.get("--gid", "-1")),
        ws_root=args["--ws-root"],
        sweep=args.get("--sweep", "uid"),
        own_pidns=args.get("--own-pidns") == "1",  # the backend started us in a PID namespace of our own
        project_paths=tuple(str(p) for p in json.loads(args.get("--project-paths", "[]"))),
    )
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Our own stdio objects must not touch fd 1; the protocol uses raw fds only.
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (for the life of the server)
    server.serve(once)


if __name__ == "__main__":
    main(sys.argv[1:])
