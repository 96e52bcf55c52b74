"""The server's execution pool (created on the first run, closed with the server) and the verifier
of its episodes, which runs in it.

Creating it starts sandbox workers (seconds), so a server that is only asked for episodes or
search never pays for it, and `tools/list` stays fast.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import structlog

from envpool.sandbox import sandbox_python
from envpool.sandbox.base import RunRequest, RunResult
from envpool.sandbox.sites import editable_paths, project_site
from episodes.records import EpisodeSource
from episodes.store import EpisodeStore
from mcp_server.settings import Settings
from training.recording.verification_hub import VerificationHub
from training.scenarios.verification import EpisodeVerification, ProjectSetup

if TYPE_CHECKING:
    from envpool.pool import EnvPool

log = structlog.get_logger(__name__)


@dataclass
class ExecutionHub:
    settings: Settings
    _pool: EnvPool | None = None
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    @functools.cached_property
    def project(self) -> tuple[Path | None, tuple[str, ...]]:
        """The served project's virtualenv site (bound into the sandbox) and the workspace folders its
        `.pth` files put on the path (read once: a virtualenv made later needs a server restart)."""
        workspace = self.settings.served_workspace
        site = project_site(workspace, sandbox_python(self.settings.sandbox))
        paths = editable_paths(site, workspace) if site is not None and workspace is not None else ()
        return site, paths

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
        site, paths = self.project
        pool = EnvPool(
            num_envs=self.settings.pool_envs,
            sandbox=self.settings.sandbox,
            tasks="humaneval",
            sandbox_options={"project_site": str(site), "project_paths": paths} if site is not None else None,
        )
        log.info(
            "execution_pool_started",
            sandbox=self.settings.sandbox,
            envs=self.settings.pool_envs,
            project_site=site,
            project_paths=paths,
        )
        return pool

    async def close(self) -> None:
        if self._pool is not None:
            await anyio.to_thread.run_sync(self._pool.close)
            self._pool = None


def verification_hub(settings: Settings, store: EpisodeStore, execution: ExecutionHub) -> VerificationHub:
    """The verifier of this server's episodes (`training.recording.verification_hub`): those of the
    served workspace, run in the execution pool, which sees its virtualenv."""

    async def run(request: RunRequest) -> RunResult:
        pool = await execution.pool()
        return await pool.run(request)

    def run_from_thread(request: RunRequest) -> RunResult:
        return anyio.from_thread.run(run, request)

    def verification_of(root: Path) -> EpisodeVerification:
        site, roots = execution.project
        setup = ProjectSetup(
            settings_command=settings.test_command,
            settings_memory_mb=settings.test_memory_mb,
            settings_timeout_s=settings.test_timeout_s,
            site=site,
            import_roots=roots,
        )
        return EpisodeVerification(store, run_from_thread, setup)

    return VerificationHub(
        store,
        verification_of,
        verifies=lambda root: root == settings.served_workspace,
        idle_timeout_s=settings.episode_idle_timeout_s,
        source=EpisodeSource.external,
    )
