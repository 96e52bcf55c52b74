"""A workspace's own virtualenv, as the sandbox sees it: its site-packages, bound read-only so the
project's tests import its dependencies, and the workspace folders its `.pth` files put on the path
(an editable install's `src`). Read by whoever starts a sandbox for a workspace: the MCP server's
pool, the policy endpoint's verifier."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

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
