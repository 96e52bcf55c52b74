"""The server's execution pool: created on the first run, closed with the server.

Creating it starts sandbox workers (seconds), so a server that is only asked for episodes or
search never pays for it, and `tools/list` stays fast.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import structlog

from mcp_server.settings import Settings

if TYPE_CHECKING:
    from envpool.pool import EnvPool

log = structlog.get_logger(__name__)


VENV_NAMES = (".venv", "venv")


def project_site(workspace: Path | None) -> Path | None:
    """The site-packages of the workspace's virtualenv (`.venv` or `venv`), if it was made for this
    Python's version: the sandbox runs this interpreter, which cannot load another version's
    compiled modules. Bound read-only into bwrap sandboxes, so the project's tests import its
    dependencies; read when the pool starts (a virtualenv made later needs a server restart)."""
    if workspace is None:
        return None
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for name in VENV_NAMES:
        venv = workspace / name
        site = venv / "lib" / version / "site-packages"
        if (venv / "pyvenv.cfg").is_file() and site.is_dir():
            return site.resolve()
    return None


@dataclass
class ExecutionHub:
    settings: Settings
    _pool: EnvPool | None = None
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def pool(self) -> EnvPool:
        """The pool, started on first use. Raises envpool's SandboxUnavailable with its reason."""
        async with self._lock:
            if self._pool is None:
                self._pool = await anyio.to_thread.run_sync(self._start)
            return self._pool

    def _start(self) -> EnvPool:
        import envpool

        # The backend's own reason, before a helper process (~100 MB once it has imported the
        # pool) is started for a pool that cannot run; EnvPool checks again, for its other callers.
        envpool.make_sandbox(self.settings.sandbox).close()
        envpool.start_pool_helper()  # its imports run while this thread imports envpool.pool
        from envpool.pool import EnvPool

        if self.settings.sandbox == "unsafe-local":
            log.warning("unsandboxed_execution", detail="RLIDE_SANDBOX=unsafe-local: agent code runs on the host")
        site = project_site(self.settings.served_workspace) if self.settings.sandbox.startswith("bwrap") else None
        pool = EnvPool(
            num_envs=self.settings.pool_envs,
            sandbox=self.settings.sandbox,
            tasks="humaneval",
            sandbox_options={"project_site": str(site)} if site is not None else None,
        )
        log.info(
            "execution_pool_started", sandbox=self.settings.sandbox, envs=self.settings.pool_envs, project_site=site
        )
        return pool

    async def close(self) -> None:
        if self._pool is not None:
            await anyio.to_thread.run_sync(self._pool.close)
            self._pool = None
