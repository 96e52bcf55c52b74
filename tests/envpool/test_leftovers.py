"""What a run leaves behind that no process holds, and what two runs share without a process of either
reaching the other (issue 35): sockets and memory in flight after the run, file watches and locks on
the trees every server shares. Each test is an attack through the sandbox API, then what the next
run (or a concurrent run in a second sandbox) can tell from it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from envpool.sandbox.base import RunRequest, RunResult, RunStatus
from envpool.sandbox.bwrap import BwrapConfig, BwrapSandbox
from envpool.sandbox.uids import RUN_SLOTS
from tests.envpool.conftest import requires_bwrap
from tests.envpool.test_memory_limits import requires_memory_groups

pytestmark = requires_bwrap

IN_FLIGHT = textwrap.dedent(
    """
    # Sockets no process holds: a listener bound to an abstract address sent, with the client that
    # connected to it and every memfd, into the client's own unaccepted connection (an SCM_RIGHTS
    # cycle). Each socket is in flight when the run ends, so its end releases none: nothing wakes
    # the kernel's unix garbage collector.
    import array, os, socket
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(NAME)
    listener.listen(8)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(NAME)
    fds = [listener.fileno(), client.fileno()]
    chunk = b"x" * (1 << 20)
    for _ in range(PIN_MB // 50):
        pinned = os.memfd_create("pinned")
        for _ in range(50):
            os.write(pinned, chunk)
        fds.append(pinned)
    client.sendmsg([b"!"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    print("left in flight")
    """
)

PROBE = """
import socket
probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    probe.connect(NAME)
    print("FOUND")
except OSError as exc:
    print("absent", exc.errno)
"""


def in_flight(name: bytes, pin_mb: int = 0) -> RunRequest:
    return RunRequest(code=f"NAME = {name!r}\nPIN_MB = {pin_mb}\n{IN_FLIGHT}", memory_mb=512)


@pytest.fixture
def box() -> Iterator[BwrapSandbox]:
    sb = BwrapSandbox(BwrapConfig())
    yield sb
    sb.close()


def test_a_socket_left_in_flight_is_invisible_to_every_later_run(box: BwrapSandbox) -> None:
    """Red team: the next run, another episode's, connected to the abstract listener an earlier run
    left in flight, in 6 of 6 tries. Each run has a network namespace of its own now."""
    name = b"\0rlide-leftover-" + uuid.uuid4().hex.encode()
    attack = box.run(in_flight(name))
    assert (attack.status, attack.stdout) == (RunStatus.OK, "left in flight\n")
    probes = [box.run(RunRequest(code=f"NAME = {name!r}\n{PROBE}")) for _ in range(2 * RUN_SLOTS)]
    assert [p.stdout.split()[0] for p in probes] == ["absent"] * (2 * RUN_SLOTS)


TCP_IN_FLIGHT = textwrap.dedent(
    """
    # A TCP listener on the loopback, sent with a unix pair into that pair's own queue: no process
    # holds it after the run.
    import array, socket
    listener = socket.create_server(("127.0.0.1", PORT))
    a, b = socket.socketpair()
    fds = array.array("i", [listener.fileno(), a.fileno(), b.fileno()])
    a.sendmsg([b"!"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    print("left in flight")
    """
)

TCP_PROBE = textwrap.dedent(
    """
    # Whatever listens on the loopback, this run's own server works there.
    import socket, threading
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
        print("FOUND", end=" ")
    except OSError as exc:
        print("absent", end=" ")
    own = socket.create_server(("127.0.0.1", PORT))
    threading.Thread(target=lambda: own.accept()[0].sendall(b"mine"), daemon=True).start()
    print(socket.create_connection(("127.0.0.1", PORT), timeout=2).recv(4).decode())
    """
)


def test_a_tcp_listener_left_in_flight_is_gone_and_the_loopback_is_each_runs_own(box: BwrapSandbox) -> None:
    """A run's loopback is up (a test suite's local servers work) and its own: a listener an earlier
    run left in flight neither answers the next runs nor holds its port."""
    port = 20000 + uuid.uuid4().int % 20000
    attack = box.run(RunRequest(code=f"PORT = {port}\n{TCP_IN_FLIGHT}"))
    assert (attack.status, attack.stdout) == (RunStatus.OK, "left in flight\n"), attack.stderr
    probes = [box.run(RunRequest(code=f"PORT = {port}\n{TCP_PROBE}")) for _ in range(2 * RUN_SLOTS)]
    assert [(p.status, p.stdout) for p in probes] == [(RunStatus.OK, "absent mine\n")] * (2 * RUN_SLOTS), [
        p.stderr[-300:] for p in probes
    ]


@requires_memory_groups
def test_memory_left_in_flight_does_not_deny_later_runs(box: BwrapSandbox) -> None:
    """Red team: three short runs kept 250 MB of memfds each in flight, charged to their slots'
    groups, and every honest 300 MB run on that server failed with `memory_limit` for 12-24 s. A
    slot's group is emptied (the unix garbage collected) before its next run."""
    for _ in range(RUN_SLOTS):
        attack = box.run(in_flight(b"\0rlide-pin-" + uuid.uuid4().hex.encode(), pin_mb=250))
        assert attack.status is RunStatus.OK, attack.stderr
    honest = [
        box.run(RunRequest(code="held = bytearray(300 << 20)\nprint('held')", memory_mb=320))
        for _ in range(2 * RUN_SLOTS)
    ]
    assert [(r.status, r.stdout) for r in honest] == [(RunStatus.OK, "held\n")] * (2 * RUN_SLOTS)


READ_FILES = """
import os, sys
read = 0
for root, _, files in os.walk(os.path.dirname(os.__file__)):
    for name in files:
        with open(os.path.join(root, name), "rb") as fh:
            read += len(fh.read())
print(read > (16 << 20))
"""


@requires_memory_groups
def test_page_cache_an_honest_run_reads_does_not_retire_its_slot(box: BwrapSandbox) -> None:
    """Files a run reads for the first time stay in the page cache, charged to its slot's group after
    the run. That is reclaimable and no object of the run's: the slot is empty, and is not retired
    (each retirement cost its next run a 2 s wait for a collection that could never free it)."""
    stdlib = os.path.dirname(os.__file__)  # the sandbox's interpreter is this one, bound read-only
    for root, _, files in os.walk(stdlib):
        for name in files:
            with contextlib.suppress(OSError), open(os.path.join(root, name), "rb") as fh:
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # uncached: the run reads it in
    with capture_logs() as logs:
        reader = box.run(RunRequest(code=READ_FILES, memory_mb=512, timeout_s=60))
        after = [box.run(RunRequest(code="print('ok')")) for _ in range(2 * RUN_SLOTS)]
    assert (reader.status, reader.stdout) == (RunStatus.OK, "True\n"), reader.stderr
    assert [r.stdout for r in after] == ["ok\n"] * (2 * RUN_SLOTS)
    assert [e for e in logs if e["event"] == "sandbox.slot_retired"] == []


HOLDER = """
import os, sys, time
with open(sys.argv[1], "w") as tasks:  # joins the slot's group first: memory is charged where it is touched
    tasks.write(str(os.getpid()))
held = bytearray(64 << 20)
print("held", flush=True)
time.sleep(600)
"""


@requires_memory_groups
def test_a_slot_that_cannot_be_emptied_is_retired_and_its_replacement_holds_runs_to_their_limit(
    box: BwrapSandbox,
) -> None:
    """Something no collection can free (here a process the test puts in every slot's group: no run
    can, which is why this is the only way to reach it) costs each slot one wait: the slot gets a new
    memory group, later runs go on, and the new group holds a run to its `memory_mb` as the old did."""
    first = box.run(RunRequest(code="print('ok')"))
    assert first.status is RunStatus.OK, first.stderr
    [pooled] = box._live
    assert pooled.cgroup is not None and len(pooled.cgroup.runs) == RUN_SLOTS
    holders = [
        subprocess.Popen([sys.executable, "-c", HOLDER, str(group / "tasks")], stdout=subprocess.PIPE, text=True)
        for group in pooled.cgroup.runs
    ]
    try:
        assert [h.stdout.readline() if h.stdout else "" for h in holders] == ["held\n"] * RUN_SLOTS
        with capture_logs() as logs:
            later = [box.run(RunRequest(code="print('ok')")) for _ in range(2 * RUN_SLOTS)]
            greedy = [box.run(RunRequest(code="held = bytearray(300 << 20)", memory_mb=128)) for _ in range(RUN_SLOTS)]
        assert [(r.status, r.stdout) for r in later] == [(RunStatus.OK, "ok\n")] * (2 * RUN_SLOTS)
        assert [r.status for r in greedy] == [RunStatus.MEMORY_LIMIT] * RUN_SLOTS, [r.stderr[-200:] for r in greedy]
        assert pooled.cgroup.retired_slots() == RUN_SLOTS  # each slot once, then never the held group again
        assert [e["retired"] for e in logs if e["event"] == "sandbox.slot_retired"][-1] == RUN_SLOTS
        assert all(h.poll() is None for h in holders)  # what held the old groups was left alone, not killed
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()


def side_by_side(first: RunRequest, second: RunRequest) -> tuple[RunResult, RunResult]:
    """Two runs at the same time, each in a sandbox (a server) of its own."""
    boxes = [BwrapSandbox(BwrapConfig()), BwrapSandbox(BwrapConfig())]
    try:
        for sb in boxes:
            sb.warm()
        results: dict[int, RunResult] = {}

        def go(index: int, request: RunRequest) -> None:
            results[index] = boxes[index].run(request)

        threads = [threading.Thread(target=go, args=pair) for pair in enumerate((first, second))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results[0], results[1]
    finally:
        for sb in boxes:
            sb.close()


WATCH = textwrap.dedent(
    """
    # Watch the shared read-only trees for the files another run opens.
    import ctypes, os, select, struct, time, zipapp
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    if fd < 0:
        print("no watch:", os.strerror(ctypes.get_errno()))
    else:
        folder = os.path.dirname(zipapp.__file__).encode()
        libc.inotify_add_watch(fd, folder, 0x20)  # IN_OPEN
        seen = set()
        until = time.time() + 4
        while time.time() < until:
            select.select([fd], [], [], 0.1)
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            while data:
                _, _, _, size = struct.unpack_from("iIII", data)
                seen.add(data[16 : 16 + size].rstrip(b"\\0").decode())
                data = data[16 + size :]
        print("seen:", sorted(seen))
    dnotify = lambda: __import__("fcntl").fcntl(os.open(".", os.O_RDONLY), 1026, 0x1)  # F_NOTIFY, DN_ACCESS
    for name, call in (("fanotify", lambda: libc.fanotify_init(0, 0)), ("dnotify", dnotify)):
        try:
            result = call()
            print(name, "denied" if result < 0 else "allowed")
        except OSError as exc:
            print(name, "denied", exc.errno)
    """
)

OPEN_RARE_FILES = textwrap.dedent(
    """
    import os, time, zipapp
    folder = os.path.dirname(zipapp.__file__)
    time.sleep(1)
    for _ in range(20):
        for name in ("this.py", "zipapp.py", "tabnanny.py"):
            open(os.path.join(folder, name)).close()
        time.sleep(0.1)
    print("opened")
    """
)


def test_a_run_cannot_watch_what_a_concurrent_run_opens() -> None:
    """Red team: inotify on the read-only trees every server shares showed a run which files a
    concurrent run in another server opened. File watching is denied to runs."""
    watcher, opener = side_by_side(RunRequest(code=WATCH), RunRequest(code=OPEN_RARE_FILES))
    assert opener.stdout == "opened\n"
    assert watcher.status is RunStatus.OK, watcher.stderr
    assert "tabnanny.py" not in watcher.stdout and "no watch:" in watcher.stdout
    assert "fanotify denied" in watcher.stdout and "dnotify denied" in watcher.stdout


HOLD_LOCKS = textwrap.dedent(
    """
    # Signal through locks on files every server shares: an exclusive flock on a stdlib file, a
    # POSIX read lock on another and an open file description lock on /dev/null, held 4 s.
    import fcntl, os, struct, time, zipapp
    folder = os.path.dirname(zipapp.__file__)
    held = [open(os.path.join(folder, "tabnanny.py")), open(os.path.join(folder, "this.py")), open("/dev/null", "r+")]
    fcntl.flock(held[0], fcntl.LOCK_EX)
    fcntl.lockf(held[1], fcntl.LOCK_SH)
    fcntl.fcntl(held[2], 37, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))  # F_OFD_SETLK
    print("holding")
    time.sleep(4)
    """
)

PROBE_LOCKS = textwrap.dedent(
    """
    import fcntl, os, struct, time, zipapp
    folder = os.path.dirname(zipapp.__file__)
    time.sleep(1)
    seen = set()
    for _ in range(20):
        with open(os.path.join(folder, "tabnanny.py")) as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                seen.add("flock")
        queries = ((os.path.join(folder, "this.py"), fcntl.F_GETLK, fcntl.F_WRLCK), ("/dev/null", 36, fcntl.F_RDLCK))
        for path, cmd, kind in queries:  # 36: F_OFD_GETLK
            with open(path) as fh:
                try:
                    answer = fcntl.fcntl(fh, cmd, struct.pack("hhqqi", kind, 0, 0, 0, 0))
                except OSError:
                    continue
                if struct.unpack("hhqqi", answer)[0] != fcntl.F_UNLCK:
                    seen.add(path)
        time.sleep(0.1)
    print("seen:", sorted(seen))
    """
)


def test_locks_on_shared_files_pass_no_message_between_concurrent_runs() -> None:
    """Red team: two concurrent runs passed messages through `flock` on shared files (and could as
    well through fcntl POSIX or OFD locks, F_GETLK). Locks taken by a run lock nothing."""
    holder, prober = side_by_side(RunRequest(code=HOLD_LOCKS), RunRequest(code=PROBE_LOCKS))
    assert (holder.status, holder.stdout) == (RunStatus.OK, "holding\n"), holder.stderr
    assert (prober.status, prober.stdout) == (RunStatus.OK, "seen: []\n"), prober.stderr


def test_sqlite_still_works_on_the_runs_own_files(box: BwrapSandbox) -> None:
    """Locks that lock nothing keep a single process's sqlite working (its locks never conflict
    with themselves anyway); two connections in one process, a transaction each."""
    code = textwrap.dedent(
        """
        import sqlite3
        first = sqlite3.connect("own.db")
        first.execute("create table t (x)")
        with first:
            first.execute("insert into t values (1)")
        second = sqlite3.connect("own.db")
        with second:
            second.execute("insert into t values (2)")
        print(sorted(x for (x,) in first.execute("select x from t")))
        """
    )
    result = box.run(RunRequest(code=code))
    assert (result.status, result.stdout) == (RunStatus.OK, "[1, 2]\n"), result.stderr
