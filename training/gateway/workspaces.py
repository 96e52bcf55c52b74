"""The workspaces whose episodes the policy endpoint captures and verifies.

An agent's episode started with `POST /episodes {"workspace": DIR}` is recorded as an IDE agent's
is over MCP: its workspace state at the start (the commit, every uncommitted change) and at the
end, and the project's own verifier run in the sandbox (`training.recording.verification_hub`):
the tests failing at the start are the task, and the end state is judged against them by rlide.
What the caller posts at the end (its outcome, its reward) stays a claim beside that evidence.

Only folders at or under the roots the endpoint was started with may be named, since a caller
who names a folder gets its files read into the log and its tests run.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import structlog

from common.allowed_folders import FolderNotAllowed, allowed_folder
from envpool.sandbox import Sandbox, make_sandbox, sandbox_python
from envpool.sandbox.sites import editable_paths, project_site
from episodes.records import EpisodeSource
from episodes.store import EpisodeStore
from training.recording.verification_hub import VerificationHub
from training.scenarios.verification import EpisodeVerification, ProjectSetup

log = structlog.get_logger(__name__)

NO_ROOTS = (
    "this endpoint verifies no workspace: start `rlide policy serve` with --workspace DIR (or in the project's"
    " folder, or with RLIDE_WORKSPACE / RLIDE_ALLOWED_ROOTS set) to record episodes with a start state and a verifier"
)


@dataclass(frozen=True)
class WorkspaceRules:
    """What the endpoint was told: the folders episodes may name (each, and everything under it),
    the sandbox backend, the test settings a project's own `[tool.rlide]` overrides, and how long
    an open episode may stay idle before it is timed out and its end verified."""

    roots: tuple[Path, ...] = ()
    sandbox: str = "bwrap"
    test_command: str | None = None
    test_memory_mb: int | None = None
    test_timeout_s: float | None = None
    idle_timeout_s: float = 1800.0


class EpisodeWorkspaces:
    """`resolve` a named workspace; `hub`, the verifier of their episodes, each run in a sandbox that
    sees that workspace's own virtualenv (started on first use, one per project environment)."""

    def __init__(self, store: EpisodeStore, rules: WorkspaceRules) -> None:
        self.rules = rules
        self.roots = tuple(root.resolve() for root in rules.roots)
        self.hub = VerificationHub(
            store, self._verification_of, self._verifies, rules.idle_timeout_s, EpisodeSource.policy
        )
        self._store = store
        self._boxes: dict[tuple[str | None, tuple[str, ...]], Sandbox] = {}
        self._lock = threading.Lock()

    def resolve(self, path: str) -> Path:
        """The workspace `path` names, or `FolderNotAllowed` saying what the endpoint allows."""
        if not self.roots:
            raise FolderNotAllowed(NO_ROOTS)
        return allowed_folder(
            path,
            self.roots,
            base=self.roots[0],
            purpose="record episodes of",
            widen="name one of those, or restart the endpoint with another --workspace",
        )

    def _verifies(self, root: Path) -> bool:
        return any(root == allowed or root.is_relative_to(allowed) for allowed in self.roots)

    def _verification_of(self, root: Path) -> EpisodeVerification:
        site = project_site(root, sandbox_python(self.rules.sandbox))
        paths = editable_paths(site, root) if site is not None else ()
        setup = ProjectSetup(
            settings_command=self.rules.test_command,
            settings_memory_mb=self.rules.test_memory_mb,
            settings_timeout_s=self.rules.test_timeout_s,
            site=site,
            import_roots=paths,
        )
        return EpisodeVerification(self._store, self._sandbox(site, paths).run, setup)

    def _sandbox(self, site: Path | None, paths: tuple[str, ...]) -> Sandbox:
        key = (None if site is None else str(site), paths)
        with self._lock:
            if key not in self._boxes:
                options = {} if site is None else {"project_site": str(site), "project_paths": paths}
                self._boxes[key] = make_sandbox(self.rules.sandbox, **options)
                log.info("gateway.sandbox_started", sandbox=self.rules.sandbox, project_site=key[0])
            return self._boxes[key]

    def close(self) -> None:
        with self._lock:
            boxes, self._boxes = list(self._boxes.values()), {}
        for box in boxes:
            box.close()
