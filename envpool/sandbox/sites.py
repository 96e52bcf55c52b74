"""The Python sites a sandboxed interpreter sees besides its standard library, shared by the
backends that run the fork-server (bwrap, docker): pytest and friends, rlide's pytest plugin, and
the served project's own virtualenv. The fork-server puts them on PYTHONPATH (`forkserver.PROJECT_SITE`,
`TOOLS_SITE`, `PLUGINS`)."""

from __future__ import annotations

import json
import os
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
