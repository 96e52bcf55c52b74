"""The Python sites a sandboxed interpreter sees besides its standard library, shared by the
backends that run the fork-server (bwrap, docker): pytest and friends, rlide's pytest plugin, and
the served project's own virtualenv. The fork-server puts them on PYTHONPATH (`forkserver.PROJECT_SITE`,
`TOOLS_SITE`, `PLUGINS`)."""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from envpool.verifiers.reports import PLUGIN_FOLDER

SANDBOX_TOOLS_SITE = "/opt/tools-site"
"""Where the read-only site of test tools (pytest) appears inside the sandbox; on PYTHONPATH."""
SANDBOX_PROJECT_SITE = "/opt/project-site"
"""Where a project's own site-packages appears inside the sandbox; first on PYTHONPATH."""
SANDBOX_PLUGINS = "/opt/rlide-plugins"
"""Where rlide's pytest plugin appears inside the sandbox, read-only: a run cannot rewrite it."""


@dataclass(frozen=True)
class PythonSites:
    tools_site: str = os.environ.get(
        "RLIDE_SANDBOX_TOOLS", str(Path(__file__).resolve().parents[2] / ".tools" / "sandbox-site")
    )
    """Directory of pure-Python test tools (pytest) bound read-only at /opt/tools-site, if it exists.
    `make setup` fills it with `pip install --target`; the host's virtualenv stays invisible."""
    project_site: str | None = None
    """The site-packages of the project's virtualenv (`run_tests` on the served workspace: its tests
    import its dependencies), bound read-only at /opt/project-site; the rest of the venv stays out.
    The sandbox's Python must be the version it was made for (its compiled modules)."""
    project_paths: tuple[str, ...] = ()
    """Folders of the workspace, relative to it, that the project's `.pth` files put on the path
    (an editable install's `src`): each run's copy of them goes on PYTHONPATH after the site."""

    def mounts(self) -> list[tuple[str, str]]:
        """(host folder, folder in the sandbox) pairs to bind read-only."""
        pairs = [(PLUGIN_FOLDER, SANDBOX_PLUGINS)]
        if os.path.isdir(self.tools_site):
            pairs.append((self.tools_site, SANDBOX_TOOLS_SITE))
        if self.project_site is not None:
            pairs.append((self.project_site, SANDBOX_PROJECT_SITE))
        return pairs

    def server_args(self) -> list[str]:
        """The fork-server's arguments that say what to put on each run's path."""
        return ["--project-paths", json.dumps(list(self.project_paths))]


# A workspace's own virtualenv, as the sandbox sees it: read by whoever starts a sandbox for a
# workspace (the MCP server's pool, the policy endpoint's verifier).

VENV_NAMES = (".venv", "venv")
# setuptools' editable install of a layout that a plain path cannot express: its .pth imports a
# module whose literal `MAPPING` names each top-level package's folder.
_FINDER_IMPORT = re.compile(r"import\s+(__editable___\w+_finder)\b")
_FINDER_MAPPING = re.compile(r"^MAPPING\b[^=]*=\s*(\{.*\})\s*$", re.MULTILINE)


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
