"""A `Sandbox` built from fork-server processes: warm servers reused, or a fresh one per run.

Subclasses say how to launch a server (`server_argv`); this class handles concurrency (one idle
list, one server per concurrent run), uid leases, restarts after a server dies, and close().
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import structlog

from envpool.sandbox._client import NO_MEMORY_GROUP, ServerDied, ServerProcess, sandbox_error
from envpool.sandbox.base import CancelToken, RunRequest, RunResult, RunStatus, SandboxError
from envpool.sandbox.cgroups import ServerCgroup, cleanup_stale, create_server_cgroup
from envpool.sandbox.uids import RUN_SLOTS, NoFreeUid, UidLease, lease_uid

log = structlog.get_logger(__name__)


@dataclass
class PooledServer:
    server: ServerProcess
    leases: list[UidLease]
    cgroup: ServerCgroup | None = None
    retired_slots: int = 0  # slot groups its server retired so far (logged as they come)


class PooledForkServerSandbox:
    name = "pooled"

    def __init__(
        self,
        *,
        fresh: bool = False,
        drop_uid: bool = True,
        cgroup_limits: tuple[int, int] | None = None,
        launcher_joins_cgroup: bool = True,
        isolate: bool = False,
    ) -> None:
        self.fresh = fresh  # True: a brand-new sandbox per run (slower, nothing shared at all)
        self.drop_uid = drop_uid
        self.isolate = isolate  # each run in namespaces of its own (forkserver.py --isolate)
        self._isolation_warned = False
        self._memory_warned = False
        self.cgroup_limits = cgroup_limits  # (memory MB, pids) around each server, if cgroups work
        # False where the server is not our launcher's child (docker): its group then only holds
        # the run groups, which the server moves each run's child into itself.
        self.launcher_joins_cgroup = launcher_joins_cgroup
        if cgroup_limits is not None:
            cleanup_stale()
        self._idle: list[PooledServer] = []
        self._live: list[PooledServer] = []
        self._spare_cgroups: list[ServerCgroup] = []
        self._lock = threading.Lock()
        self._closed = False

    # subclasses override
    def server_argv(self, uids: list[int], once: bool, cgroup: ServerCgroup | None) -> list[str]:
        """How to launch a server whose runs take turns over `uids` (none: no uid to drop to)."""
        raise NotImplementedError

    def fd_payload(self) -> bytes | None:
        """Bytes to hand the server on the fd named by `PAYLOAD_FD` in its argv (none by default)."""
        return None

    def _spawn(self, once: bool) -> PooledServer:
        leases: list[UidLease] = []
        try:
            for _ in range(RUN_SLOTS if self.drop_uid else 0):
                leases.append(lease_uid())
        except NoFreeUid:
            for lease in leases:
                lease.release()
            raise
        cgroup = self._take_cgroup()
        argv = self.server_argv([lease.uid for lease in leases], once, cgroup)
        if cgroup is not None and self.launcher_joins_cgroup:
            argv = cgroup.wrap(argv)  # the launcher enters the cgroup before exec: the whole tree is in
        server = ServerProcess(argv, label=self.name, fd_payload=self.fd_payload())
        try:
            server.start()
        except (OSError, ServerDied):
            for lease in leases:
                lease.release()
            self._give_back_cgroup(cgroup)
            raise
        self._check_isolation(server)
        pooled = PooledServer(server, leases, cgroup)
        with self._lock:
            self._live.append(pooled)
        return pooled

    def _take_cgroup(self) -> ServerCgroup | None:
        if self.cgroup_limits is None:
            return None
        with self._lock:
            if self._spare_cgroups:
                return self._spare_cgroups.pop()
        # Made once and reused by later servers: creating one costs ~10-20 ms (matters for fresh runs).
        return create_server_cgroup(*self.cgroup_limits, run_slots=RUN_SLOTS if self.drop_uid else 0)

    def _give_back_cgroup(self, cgroup: ServerCgroup | None) -> None:
        if cgroup is None:
            return
        with self._lock:
            # One whose server retired a slot group is not reused: a later server would find its
            # slot groups by their first names, and the retired one holds what could not be freed.
            if not self._closed and not cgroup.retired_slots():
                self._spare_cgroups.append(cgroup)
                return
        cgroup.remove()

    def _check_isolation(self, server: ServerProcess) -> None:
        """Log once when a server could not give its runs namespaces of their own."""
        if self.isolate and not self._isolation_warned and server.isolation != "per-run namespaces":
            self._isolation_warned = True
            log.warning("sandbox.no_run_isolation", backend=self.name, detail=server.isolation)

    def _check_memory(self, server: ServerProcess) -> None:
        """Log once when runs are held to `memory_mb` by an address-space cap instead of a memory
        group: threaded programs then fail long before they hold that much."""
        if server.memory == "rlimit" and not self._memory_warned:
            self._memory_warned = True
            log.warning("sandbox.memory_by_address_space", backend=self.name, detail=NO_MEMORY_GROUP)

    def _check_slots(self, pooled: PooledServer) -> None:
        """Log each slot group the server retired: a run left something no garbage collection freed."""
        retired = pooled.cgroup.retired_slots() if pooled.cgroup is not None else 0
        if retired > pooled.retired_slots:
            pooled.retired_slots = retired
            log.warning(
                "sandbox.slot_retired",
                backend=self.name,
                retired=retired,
                detail="a run left memory in its slot's group that could not be freed: the slot has a new group",
            )

    def _retire(self, pooled: PooledServer) -> None:
        pooled.server.kill()
        for lease in pooled.leases:
            lease.release()
        self._give_back_cgroup(pooled.cgroup)
        with self._lock:
            if pooled in self._live:
                self._live.remove(pooled)

    def warm(self, count: int = 1) -> None:
        """Start `count` servers now so the first runs do not pay the start-up."""
        started = [self._spawn(once=False) for _ in range(count)]
        with self._lock:
            self._idle.extend(started)

    def run(self, request: RunRequest, cancel: CancelToken | None = None) -> RunResult:
        if self._closed:
            raise SandboxError(f"{self.name} sandbox is closed")
        started = time.monotonic()
        pooled: PooledServer | None = None
        if not self.fresh:
            with self._lock:
                pooled = self._idle.pop() if self._idle else None
        try:
            if pooled is None:
                pooled = self._spawn(once=self.fresh)
            result = pooled.server.run(request, cancel)
        except (OSError, ServerDied, NoFreeUid) as exc:
            log.warning("sandbox.server_died", backend=self.name, error=str(exc))
            if pooled is not None:
                self._retire(pooled)
            return sandbox_error(self.name, f"sandbox server failed: {exc}", started)
        result.backend = self.name
        self._check_memory(pooled.server)
        self._check_slots(pooled)
        if (
            pooled.cgroup is not None
            and result.status in (RunStatus.KILLED, RunStatus.ERROR)
            and pooled.cgroup.new_oom_kill()
        ):
            result.status = RunStatus.MEMORY_LIMIT
            result.detail = "the sandbox's cgroup memory ceiling was hit (OOM kill)"
        if self.fresh:
            self._retire(pooled)
        else:
            with self._lock:
                closed = self._closed
                if not closed:
                    self._idle.append(pooled)
            if closed:
                self._retire(pooled)
        return result

    def close(self) -> None:
        with self._lock:
            self._closed = True
            live, self._live, self._idle = list(self._live), [], []
            spare, self._spare_cgroups = self._spare_cgroups, []
        for pooled in live:
            self._retire(pooled)  # closed: their cgroups are removed, not kept
        for cgroup in spare:
            cgroup.remove()

    def __enter__(self) -> PooledForkServerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
