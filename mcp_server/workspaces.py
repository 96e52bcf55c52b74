"""Which directories the server may index, and one memory service per indexed workspace.

An IDE agent's `index_workspace(path)` is hostile input: indexing `/etc` or `~/.ssh` would let
`search_code` read them back. Paths are resolved (symlinks followed) and must lie inside the
served workspace or a configured allowed root.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from common.allowed_folders import FolderNotAllowed, allowed_folder
from episodes.records import EpisodeDetail
from mcp_server.settings import Settings
from memory.errors import RlideMemoryError

if TYPE_CHECKING:
    from memory.config import MemoryConfig
    from memory.service import MemoryService

log = structlog.get_logger(__name__)


class PathNotAllowed(ValueError):
    pass


_DIFF_HEADER = re.compile(r"^--- (?:a/)?([^\t\n]+).*\n\+\+\+ (?:b/)?([^\t\n]+)", re.MULTILINE)
"""A file's header pair in a unified diff: a removed line that starts with "--" (an SQL comment) is
"---" in the diff too, but is not followed by a "+++" line."""


def _paths_in(arguments: dict[str, Any]) -> list[str]:
    """File paths a tool call named or changed: `path`/`paths` arguments, the keys of a `files`
    mapping, the files a `patch` (unified diff) edits, and a test run's `changed` working-tree files."""
    found: list[str] = []
    patch = arguments.get("patch")
    if isinstance(patch, str):
        found.extend(new if new != "/dev/null" else old for old, new in _DIFF_HEADER.findall(patch))
    for key in ("path", "file", "paths", "changed"):
        value = arguments.get(key)
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, str))
    files = arguments.get("files")
    if isinstance(files, dict):
        found.extend(k for k in files if isinstance(k, str))
    return found


def memory_config(settings: Settings, root: Path, *, watch: bool = False) -> MemoryConfig:
    """The memory package's config for one workspace, from rlide's settings (MCP tools and CLI alike)."""
    from memory.config import MemoryConfig

    return MemoryConfig(
        workspace=root,
        store=settings.memory_store,
        embedder=settings.memory_embedder,
        minilm_variant=settings.memory_minilm_variant,
        dense_exact_up_to=settings.memory_dense_exact_up_to,
        data_dir=settings.home / "memory",
        turbopuffer_api_key=settings.turbopuffer_api_key,
        turbopuffer_region=settings.turbopuffer_region,
        openai_base_url=settings.embeddings_base_url,
        openai_model=settings.embeddings_model,
        openai_api_key=settings.embeddings_api_key,
        watch=watch,
    )


@dataclass
class WorkspaceHub:
    settings: Settings
    _services: dict[Path, MemoryService] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    @property
    def default_root(self) -> Path | None:
        return self.settings.served_workspace

    @property
    def allowed_roots(self) -> list[Path]:
        served = self.default_root
        return [*([served] if served is not None else []), *self.settings.allowed_roots]

    def resolve(self, path: str | None) -> Path:
        """The workspace root for `path` (default: the served workspace), if it is allowed."""
        served = self.default_root
        if path is None or not path.strip():
            if served is None:
                raise PathNotAllowed(self.settings.no_workspace_reason())
            return served
        if not self.allowed_roots:
            raise PathNotAllowed(self.settings.no_workspace_reason())
        try:
            return allowed_folder(
                path,
                self.allowed_roots,
                base=served or Path.cwd(),
                purpose="index",
                widen="index one of those, or ask the user to add it to RLIDE_ALLOWED_ROOTS",
            )
        except FolderNotAllowed as exc:
            raise PathNotAllowed(str(exc)) from exc

    def service(self, root: Path) -> MemoryService:
        """The memory service of `root`, created on first use. Blocking: call it from a thread."""
        with self._lock:
            existing = self._services.get(root)
            if existing is not None:
                return existing
            if self._closed:
                raise RlideMemoryError("the server is stopping: no new index is opened")
            from memory.service import MemoryService

            config = memory_config(self.settings, root, watch=True)
            created = self._services[root] = MemoryService(config)
            return created

    def index_in_background(self) -> None:
        """Start indexing the served workspace, if there is one, without blocking the caller (the
        server's start): opening the index and its embedder takes a while, the sync itself runs in
        the service's own thread."""
        root = self.default_root
        if root is None:
            return

        def start() -> None:
            try:
                self.service(root).start_indexing()
            except Exception as exc:  # a broken index must not stop the server: index_status reports it later
                log.warning("index_on_start_failed", workspace=str(root), error=str(exc))

        threading.Thread(target=start, name="rlide-index-on-start", daemon=True).start()

    def remember(self, detail: EpisodeDetail) -> str:
        """Make a successful episode a searchable past solution. Blocking: call it from a thread."""
        from memory.solutions import SolvedEpisode

        episode = detail.episode
        touched = sorted({str(v) for step in detail.steps for v in _paths_in(step.arguments)})
        task = episode.summary if episode.implicit and episode.summary else episode.task
        solved = SolvedEpisode(
            episode_id=episode.id,
            task=task,
            summary=episode.summary or task,
            files_touched=touched[:100],
            outcome=episode.status.value,
            reward=max(-1.0, min(1.0, episode.reward_total or 0.0)),
            created_at=episode.created_at,
        )
        return self.solutions().remember_solution(solved)

    def solutions(self) -> MemoryService:
        """The service that holds past solutions. They are kept apart from any workspace's index
        (`solutions.sqlite`, a turbopuffer namespace of their own), so without a served workspace an
        empty folder stands in as its root. Blocking: call it from a thread."""
        root = self.default_root
        if root is None:
            root = self.settings.home / "memory" / "no-workspace"
            root.mkdir(parents=True, exist_ok=True)
        return self.service(root)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for service in self._services.values():
                service.close()
            self._services.clear()
