"""Which folders a caller may name: a folder at or under one of the roots a server was given, after
symlinks and `..` are resolved. Shared by the MCP server (workspaces it indexes and runs) and the
policy endpoint (workspaces whose episodes it captures and verifies)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


class FolderNotAllowed(ValueError):
    """A named folder that cannot be used, with what to do instead."""


def allowed_folder(path: str, roots: Sequence[Path], *, base: Path, purpose: str, widen: str) -> Path:
    """`path` resolved (relative to `base`), when it is a folder at or under one of `roots`; else
    `FolderNotAllowed` naming the roots. `purpose` completes "the directories this server may …";
    `widen` says how the user adds a root."""
    try:
        candidate = Path(path).expanduser()
        if not candidate.is_absolute():
            candidate = base / candidate
        resolved = candidate.resolve()
        is_dir = resolved.is_dir()
    except (OSError, RuntimeError, ValueError) as exc:  # too long; `~user` unknown or a symlink loop; a NUL byte
        reason = getattr(exc, "strerror", None) or exc
        raise FolderNotAllowed(f"{path[:200]!r} cannot be used as a folder ({reason}): pass a project folder") from exc
    if not any(resolved == root or resolved.is_relative_to(root) for root in roots):
        named = ", ".join(str(r) for r in roots)
        raise FolderNotAllowed(f"{resolved} is outside the directories this server may {purpose} ({named}); {widen}")
    if not is_dir:
        raise FolderNotAllowed(f"{resolved} is not a directory: pass a project folder")
    return resolved
