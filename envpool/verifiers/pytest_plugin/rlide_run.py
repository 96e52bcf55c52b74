"""rlide's trusted pytest runner: a judged test run starts here, not at a command the workspace can shadow.

`python -m pytest` puts the working folder first on `sys.path`, so a workspace `pytest.py` (or
`_pytest/`, `pluggy.py`, `json.py`) runs instead of pytest and rlide's plugin never loads; pytest
also loads every `pytest11` entry point it finds on `sys.path`, so a `*.dist-info` folder written
into the workspace loads a plugin of the candidate's before any test. A judged run is
`python3 -I -S rlide_run.py ARGS` instead, from the read-only folder of rlide's plugin:

- `-I -S`: no working folder, no user site, no `sitecustomize`, no `.pth`, no `PYTHON*` variable is
  read; this module builds `sys.path` itself from the sandbox's `PYTHONPATH`: the trusted sites
  (outside the workspace: the project's virtualenv, pytest's site, this folder) and the workspace's
  own folders (the workspace root first, as `python -m pytest` has it, then an editable install's
  `src`).
- An import finder placed before every other resolves each top-level module: a name the project's
  start commit defines (`RLIDE_OWN_MODULES`: its packages, found in the workspace) from the
  workspace; every other name from the standard library and the trusted sites first, so the
  workspace can only add modules, never shadow pytest, its plugins, the project's dependencies or
  the standard library (whatever `sys.path` says later: pytest's `prepend` import mode puts test
  folders first).
- pytest's plugin autoload is off; the `pytest11` entry points of the trusted sites (the
  project's installed plugins) are loaded by name with `-p`, and so is rlide's report plugin.
- No cached bytecode is read (`sys.pycache_prefix` names a folder that does not exist), so only
  source files run, which the virtualenv's fingerprint covers.

Standard library only; runs only inside the sandbox.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class TrustedFirst(importlib.abc.MetaPathFinder):
    """Top-level imports: the project's own names from the workspace, every other name from the
    standard library and trusted sites when they have it (else wherever `sys.path` finds it)."""

    def __init__(self, trusted: list[str], workspace: list[str], own: frozenset[str]) -> None:
        self.trusted = trusted
        self.workspace = workspace
        self.own = own

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is not None or "." in fullname:  # a submodule: its package's __path__ decides
            return None
        where = self.workspace if fullname in self.own else self.trusted
        return importlib.machinery.PathFinder.find_spec(fullname, where)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def trusted_plugins(trusted: list[str]) -> list[str]:
    """The modules of the `pytest11` entry points installed in the trusted sites."""
    modules = []
    for dist in importlib.metadata.distributions(path=trusted):
        for entry in dist.entry_points:
            if entry.group == "pytest11":
                module = entry.value.split(":", 1)[0].strip()
                if module and module not in modules:
                    modules.append(module)
    return modules


def main(argv: list[str]) -> Any:
    root = os.getcwd()
    entries = [os.path.normpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    stdlib = [p for p in sys.path if p and not _inside(p, root)]
    trusted = [*stdlib, *(p for p in entries if not _inside(p, root))]
    workspace = [root, *(p for p in entries if _inside(p, root) and p != root)]
    own = frozenset(name for name in os.environ.pop("RLIDE_OWN_MODULES", "").split(",") if name)
    sys.meta_path.insert(0, TrustedFirst(trusted, workspace, own))
    sys.dont_write_bytecode = True
    # Cached bytecode is read from (and only from) this folder, which does not exist: a `.pyc` written
    # into the project virtualenv's `__pycache__` (which its fingerprint leaves out) never runs.
    sys.pycache_prefix = os.path.join(root, ".rlide", "no-bytecode")
    for name in ("PYTEST_PLUGINS", "PYTEST_ADDOPTS"):
        os.environ.pop(name, None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    plugins = [arg for module in trusted_plugins(trusted) for arg in ("-p", module)]
    sys.path[:] = [root, *entries, *stdlib]  # what `python -m pytest` would see
    import _sitebuiltins
    import builtins

    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    import pytest

    sys.argv = ["pytest", *argv]
    return pytest.main([*plugins, "-p", "rlide_report", "-p", "no:cacheprovider", *argv])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
