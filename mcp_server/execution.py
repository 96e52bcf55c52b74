"""The server's execution pool: created on the first run, closed with the server.

Creating it starts sandbox workers (seconds), so a server that is only asked for episodes or
search never pays for it, and `tools/list` stays fast.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import structlog
from anyio.abc import TaskGroup

from envpool.sandbox.base import RunRequest, RunResult
from episodes.records import EpisodeVerifier, StateKind, VerifierState, VerifierVerdict
from episodes.store import EpisodeStore
from mcp_server.capture import capture
from mcp_server.settings import Settings
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.snapshots import Snapshot
from training.scenarios.verification import EpisodeVerification, ProjectSetup

if TYPE_CHECKING:
    from envpool.pool import EnvPool

log = structlog.get_logger(__name__)


VENV_NAMES = (".venv", "venv")
# setuptools' editable install of a layout that a plain path cannot express: its .pth imports a
# module whose literal `MAPPING` names each top-level package's folder.
_FINDER_IMPORT = re.compile(r"import\s+(__editable___\w+_finder)\b")
_FINDER_MAPPING = re.compile(r"^MAPPING\b[^=]*=\s*(\{.*\})\s*$", re.MULTILINE)


def sandbox_python(sandbox: str) -> str | None:
    """The `major.minor` of the Python that `sandbox` runs programs with, or None where no project
    virtualenv is bound (unsafe-local, or a docker image that does not say)."""
    if sandbox.startswith("bwrap"):  # the host's own interpreter, bound read-only
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    if sandbox == "docker":
        from envpool.sandbox.docker import image_python

        return image_python()
    return None


def project_site(workspace: Path | None, python: str | None) -> Path | None:
    """The site-packages of the workspace's virtualenv (`.venv` or `venv`), if it was made for the
    sandbox's Python version `python`, since another version's compiled modules would not load.
    Bound read-only into the sandbox, so the project's tests import its dependencies; read when the
    pool starts (a virtualenv made later needs a server restart)."""
    if workspace is None or python is None:
        return None
    for name in VENV_NAMES:
        venv = workspace / name
        site = venv / "lib" / f"python{python}" / "site-packages"
        if (venv / "pyvenv.cfg").is_file() and site.is_dir():
            return site.resolve()
    return None


def editable_paths(site: Path, workspace: Path) -> tuple[str, ...]:
    """The workspace's folders that the `.pth` files of `site` put on `sys.path`, relative to the
    workspace and in the order Python adds them: where an editable install (`pip install -e .`)
    points, `src` for a src layout. The sandbox reads no `.pth` file (the site is on its
    PYTHONPATH, not a site directory) and holds the workspace's files, not the host's folders, so
    it puts these, under each run's own copy of the workspace, on the path instead. A folder
    outside the workspace is not in the sandbox and is left out."""
    root = workspace.resolve()
    found: list[str] = []
    for pth in sorted(site.glob("*.pth")):
        try:
            lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in (raw.strip() for raw in lines):
            if not line or line.startswith("#"):
                continue
            finder = _FINDER_IMPORT.match(line)
            if line.startswith(("import ", "import\t")) and finder is None:
                continue  # other code a .pth runs at start-up: not a path
            folders = _finder_folders(site / f"{finder.group(1)}.py") if finder else [site / line]
            for folder in folders:
                rel = _relative(folder, root)
                if rel is not None and rel not in found:
                    found.append(rel)
    return tuple(found)


def _finder_folders(finder: Path) -> list[Path]:
    """The folders holding the packages a setuptools editable finder maps (their parents)."""
    try:
        mapping = _FINDER_MAPPING.search(finder.read_text(encoding="utf-8", errors="replace"))
        packages = ast.literal_eval(mapping.group(1)) if mapping else {}
    except (OSError, ValueError, SyntaxError):
        return []
    if not isinstance(packages, dict):
        return []
    return [Path(folder).parent for folder in packages.values() if isinstance(folder, str)]


def _relative(folder: Path, root: Path) -> str | None:
    try:
        return folder.resolve().relative_to(root).as_posix()
    except (ValueError, OSError):
        return None


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


IDLE_CHECK_S = 60.0
"""How often a server looks for open episodes gone idle past their timeout."""


@dataclass
class VerificationHub:
    """The project's verifier of this server's episodes (`training.scenarios.verification`), run in
    the execution pool: established in the background after `start_episode`, the end state verified
    at `end_episode` (the caller waits, with progress), and at start what a stopped server left
    pending (a verifier never established, an end never verified, an idle episode that timed out)."""

    settings: Settings
    store: EpisodeStore
    execution: ExecutionHub
    _tasks: TaskGroup | None = None
    _locks: dict[str, anyio.Lock] = field(default_factory=dict)
    _starts: dict[str, dict[str, str]] = field(default_factory=dict)
    """Each open episode's start state as read at `start_episode`: the log keeps it redacted."""

    def verification(self) -> EpisodeVerification:
        site, roots = self.execution.project
        setup = ProjectSetup(
            settings_command=self.settings.test_command,
            settings_memory_mb=self.settings.test_memory_mb,
            settings_timeout_s=self.settings.test_timeout_s,
            site=site,
            import_roots=roots,
        )
        return EpisodeVerification(self.store, self._run_from_thread, setup)

    def _run_from_thread(self, request: RunRequest) -> RunResult:
        return anyio.from_thread.run(self._run, request)

    async def _run(self, request: RunRequest) -> RunResult:
        pool = await self.execution.pool()
        return await pool.run(request)

    def start(self, tasks: TaskGroup) -> None:
        """Run in `tasks` from now on, beginning with what a stopped server left; then, as open
        episodes go idle past `RLIDE_EPISODE_IDLE_TIMEOUT_S`, time them out and verify their end."""
        self._tasks = tasks
        tasks.start_soon(self._in_thread, "pending", lambda: self.verification().run_pending())
        tasks.start_soon(self._expire_idle)

    async def _expire_idle(self) -> None:
        timeout = self.settings.episode_idle_timeout_s
        while True:
            await anyio.sleep(min(max(timeout / 10, 1.0), IDLE_CHECK_S))
            for episode_id in await anyio.to_thread.run_sync(self.store.expire_idle, timeout):
                # Its end is the served workspace now: what the agent left when it stopped.
                root = self.settings.served_workspace
                await anyio.to_thread.run_sync(capture, self.store, root, episode_id, StateKind.end)
                await self.verify_end(episode_id, None)

    async def begin(self, episode_id: str, start: Snapshot) -> EpisodeVerifier | None:
        """The project's verifier for an episode whose served workspace was `start` at its start;
        its start state runs in the background. None when nothing is served."""
        root = self.settings.served_workspace
        if root is None:
            return None
        verification = self.verification()
        verifier = await anyio.to_thread.run_sync(verification.begin, episode_id, root, start.commit)
        self._starts[episode_id] = start.files
        if verifier.state is VerifierState.pending and self._tasks is not None:
            self._tasks.start_soon(self._locked, episode_id, lambda: verification.establish(episode_id, start.files))
        return verifier

    async def refuse(self, episode_id: str, reason: str) -> EpisodeVerifier:
        """No verifier for an episode whose served workspace cannot be read for one, and why."""
        return await anyio.to_thread.run_sync(self.verification().unavailable, episode_id, reason)

    async def verify_end(self, episode_id: str, end: Snapshot | None) -> VerifierVerdict | None:
        """Verify the episode's end state (`end`, the served workspace as it is now, else its last
        recorded state) after its start state's run; None when it has no verifier to run or the
        sandbox failed (it stays pending: the next server start runs it)."""
        if not await anyio.to_thread.run_sync(self.store.request_end_verification, episode_id):
            return None
        verification = self.verification()
        files = None if end is None else end.files
        start = self._starts.pop(episode_id, None)
        done = await self._locked(episode_id, lambda: verification.verify_end(episode_id, files, start))
        return done if isinstance(done, VerifierVerdict) else None

    async def _locked(self, episode_id: str, work: Callable[[], object]) -> object:
        """One verification run at a time per episode (an end waits for its start's run)."""
        lock = self._locks.setdefault(episode_id, anyio.Lock())
        async with lock:
            return await self._in_thread(episode_id, work)

    @staticmethod
    async def _in_thread(episode_id: str, work: Callable[[], object]) -> object:
        try:
            # Abandoned on cancel (the server stopping): the episode stays pending in the log.
            return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except (VerifierUnavailable, OSError) as exc:
            log.warning("verification.failed", episode_id=episode_id, error=str(exc))
            return None
