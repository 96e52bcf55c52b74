"""`unsafe-local`: the fork-server straight on the host, with NO isolation of filesystem or network.

Only rlimits (and, as root, the drop to an unprivileged uid) apply. It exists for debugging and for
machines without bubblewrap, is never chosen by default, and warns every time it is created.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings

import structlog

from envpool.sandbox._client import FORKSERVER_SCRIPT
from envpool.sandbox.cgroups import ServerCgroup
from envpool.sandbox.pooled import PooledForkServerSandbox
from envpool.verifiers.reports import PLUGIN_FOLDER

log = structlog.get_logger(__name__)


class UnsafeLocalWarning(UserWarning):
    pass


class UnsafeLocalSandbox(PooledForkServerSandbox):
    name = "unsafe-local"

    def __init__(self, *, fresh: bool = False) -> None:
        message = "unsafe-local sandbox: programs run on the host with host filesystem and network access"
        warnings.warn(message, UnsafeLocalWarning, stacklevel=2)
        log.warning("sandbox.unsafe_local", detail=message)
        privileged = os.geteuid() == 0
        super().__init__(fresh=fresh, drop_uid=privileged)
        self._root = tempfile.mkdtemp(prefix="rlide-unsafe-")
        os.chmod(self._root, 0o711)  # the dropped uid must reach its own run directory
        self._python = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}")

    def server_argv(self, uids: list[int], once: bool, cgroup: ServerCgroup | None) -> list[str]:
        return [
            self._python, "-I", "-S", str(FORKSERVER_SCRIPT),
            "--uids", ",".join(map(str, uids)),
            "--ws-root", self._root,
            "--sweep", "uid" if uids else "pgroup",
            "--once", "1" if once else "0",
            "--plugins", PLUGIN_FOLDER,  # rlide's pytest plugin, from the host (writable: NOT a sandbox)
        ]  # fmt: skip

    def close(self) -> None:
        super().close()
        shutil.rmtree(self._root, ignore_errors=True)
