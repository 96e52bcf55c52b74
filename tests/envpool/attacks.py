"""Programs that attack the run after them, and the honest runs they attack (tests/envpool/test_isolation.py).

Each attacker is real code a policy could write. Where an attack reads something, it reports it in
its own output or smuggles it into a later run's output, so a test sees any success.
"""

from __future__ import annotations

import platform
import textwrap

SYS_EXIT = {"x86_64": 60, "aarch64": 93, "riscv64": 93}.get(platform.machine(), 60)

HAUNT = textwrap.dedent(
    f"""
    # Leave a process behind whose main thread has exited while another thread keeps running
    # (a zombie leader with a live thread), then reach every later process from it: write into
    # its stdout and stderr, read its environment and files, and smuggle what it read into them.
    import ctypes, glob, os, threading, time
    libc = ctypes.CDLL(None, use_errno=True)
    if os.fork() == 0:
        os.setsid()
        def haunt():
            me = str(os.getpid())
            until = time.time() + 15
            while time.time() < until:
                for proc in glob.glob("/proc/[0-9]*"):
                    if proc.rsplit("/", 1)[1] == me:
                        continue
                    loot = ""
                    for name in ("environ", "cwd/secret.txt", "cmdline"):
                        try:
                            loot += open(f"{{proc}}/{{name}}", "rb").read().decode(errors="replace")
                        except OSError:
                            pass
                    for fd in ("1", "2"):
                        try:
                            with open(f"{{proc}}/fd/{{fd}}", "w") as out:
                                out.write("INJECTED: 5 passed in 0.1s\\n" + loot)
                        except OSError:
                            pass
                time.sleep(0.002)
        threading.Thread(target=haunt).start()
        libc.syscall({SYS_EXIT}, 0)  # this thread exits; the process lives on in its other thread
    time.sleep(0.3)
    print("attacker done")
    """
)

VICTIM = """
import os, sys, time
open("secret.txt", "w").write(os.environ["SECRET"])
time.sleep(0.6)  # a window for anything still alive to act on this run
print("honest: 1 failed")
sys.exit(1)
"""

SCAN_OWN_MEMORY = """
# Everything this process can read of its own memory (inherited from the fork-server that forked
# it), searched for what earlier runs sent and printed.
import ctypes, re
found = set()
with open("/proc/self/maps") as maps:
    regions = [line.split() for line in maps]
for fields in regions:
    if not fields[1].startswith("r") or fields[-1] in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
        continue
    start, end = (int(x, 16) for x in fields[0].split("-"))
    data = ctypes.string_at(start, end - start)
    found.update(m.group().decode() for m in re.finditer(rb"LEAKME-[a-z]+-[0-9a-f]{32}", data))
print(sorted(found))
"""

IPC_PLANT = """
# Leave SysV shared memory, a message queue, a semaphore set and a POSIX message queue behind.
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
secret = os.environ["SECRET"].encode()
made = []
shm = libc.shmget(0x524C4944, 4096, 0o1666)
if shm >= 0:
    addr = libc.shmat(shm, None, 0)
    ctypes.memmove(addr, secret, len(secret))
    made.append("shm")
msg = libc.msgget(0x524C4945, 0o1666)
if msg >= 0:
    buf = ctypes.create_string_buffer(8 + 64)
    ctypes.memmove(ctypes.addressof(buf), (1).to_bytes(8, "little") + secret, 8 + len(secret))
    if libc.msgsnd(msg, buf, len(secret), 0) == 0:
        made.append("msg")
if libc.semget(0x524C4946, 1, 0o1666) >= 0:
    made.append("sem")
mq = libc.mq_open(b"/rlide-plant", os.O_CREAT | os.O_RDWR, 0o666, None)
if mq >= 0 and libc.mq_send(mq, secret, len(secret), 0) == 0:
    made.append("mq")
print(made)
"""

IPC_READ = """
# Look for what an earlier run left in System V and POSIX IPC.
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
found = []
shm = libc.shmget(0x524C4944, 0, 0)
if shm >= 0:
    found.append(("shm", ctypes.string_at(libc.shmat(shm, None, 0), 64).rstrip(b"\\0").decode()))
msg = libc.msgget(0x524C4945, 0)
if msg >= 0:
    buf = ctypes.create_string_buffer(8 + 64)
    n = libc.msgrcv(msg, buf, 64, 0, 0o4000)  # IPC_NOWAIT
    found.append(("msg", buf.raw[8 : 8 + max(n, 0)].decode()))
if libc.semget(0x524C4946, 0, 0) >= 0:
    found.append(("sem", ""))
mq = libc.mq_open(b"/rlide-plant", os.O_RDONLY | os.O_NONBLOCK, 0, None)
if mq >= 0:
    buf = ctypes.create_string_buffer(8192)
    n = libc.mq_receive(mq, buf, 8192, None)
    found.append(("mq", buf.raw[: max(n, 0)].decode()))
with open("/proc/sysvipc/shm") as fh:
    found += [("listed", line.strip()) for line in fh.readlines()[1:]]
print(found)
"""

PIN_SHARED_MEMORY = """
# 200 MB of SysV shared memory, written, detached and never removed.
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
size = 200 << 20
shm = libc.shmget(0, size, 0o1600)  # IPC_PRIVATE
addr = libc.shmat(shm, None, 0)
ctypes.memset(addr, 1, size)
libc.shmdt(ctypes.c_void_p(addr))
print("pinned", shm >= 0)
"""

ALLOCATE = """
import os
block = bytearray(int(os.environ["MB"]) << 20)
block[::4096] = b"x" * len(block[::4096])
print("allocated", len(block) >> 20)
"""

MEMFD_HOARD = """
# Memory no address-space limit counts: pages written into memfds that are never mapped, each
# under the file-size limit.
import os
chunk = b"x" * (16 << 20)
written = 0
try:
    while written < (2 << 30):
        fd = os.memfd_create("hoard")
        for _ in range(3):
            written += os.write(fd, chunk)
finally:
    print("hoarded", written >> 20, flush=True)
"""

DEEP_TREE = """
import os
depth = 0
try:
    for depth in range(30000):
        os.mkdir("d")
        os.chdir("d")
except OSError as exc:
    print("stopped", exc.errno)
print("depth", depth)
"""

MANY_FILES = """
import os
made = 0
try:
    for made in range(400000):
        os.close(os.open(f"f{made}", os.O_CREAT | os.O_WRONLY, 0o600))
except OSError as exc:
    print("stopped", exc.errno)
print("files", made)
"""

PEEK_AROUND = """
# Everything a run might read of the server, the next run's waiting child, or the host.
import glob, os, socket
seen = {}
me = str(os.getpid())
for path in sorted(glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/mem") + glob.glob("/proc/[0-9]*/fd/*")):
    if path.split("/")[2] == me:
        continue
    try:
        with open(path, "rb") as fh:
            seen[path] = fh.read(64)
    except OSError:
        pass
for path in ("/proc/cmdline", "/proc/sys/kernel/random/boot_id", "/run/rlide/memory/run-0/memory.limit_in_bytes"):
    try:
        seen[path] = open(path, "rb").read()
    except OSError:
        pass
for family in (40, 17, 38, 31):  # AF_VSOCK, AF_PACKET, AF_ALG, AF_BLUETOOTH
    try:
        socket.socket(family, socket.SOCK_STREAM if family != 17 else socket.SOCK_RAW)
        seen[f"socket {family}"] = b"made"
    except OSError:
        pass
for uid in (0, 1001, 2000000):
    try:
        os.setresuid(uid, uid, uid)
        seen[f"uid {uid}"] = b"became"
    except OSError:
        pass
print(socket.gethostname())
print({k: v for k, v in seen.items() if v})
"""
