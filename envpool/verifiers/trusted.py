"""Files a verifier trusts: tests, their configuration, and what Python runs at start-up.

A candidate that may edit these can pay itself: rewrite the failing test, add a `conftest.py` that
skips everything, set `addopts = --collect-only` in `pytest.ini`, or run code before any test from a
`sitecustomize.py`, `usercustomize.py` or `.pth` file. So a verifier takes them from the recorded
start state, never from the candidate (as SWE-bench applies the test patch last), and a patch that
touches one is refused with the reason. `pyproject.toml` and `setup.cfg` hold pytest's configuration
too: trusted whole (a dependency edited there is not seen by the verifier).
"""

from __future__ import annotations

import posixpath
import re

TRUSTED_NAMES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "noxfile.py",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
TEST_FOLDERS = frozenset({"test", "tests", "testing"})
PLUGIN = "rlide_report"
"""rlide's pytest plugin's module name (`envpool.verifiers.reports`): a workspace file of that name would shadow it."""
RUN_FOLDER = ".rlide"
"""The folder of a test run's own files (the patch, given test code)."""
_DIFF_PATH = re.compile(r"^(?:---|\+\+\+) (\S+)", re.MULTILINE)


def is_reserved(path: str) -> bool:
    """Whether a workspace path is rlide's: its run folder, or a module that would shadow its plugin."""
    parts = path.split("/")
    return parts[0] == RUN_FOLDER or any(part in (PLUGIN, f"{PLUGIN}.py") for part in parts)


def is_trusted(path: str) -> bool:
    """Whether a workspace-relative POSIX path is a test, test configuration or start-up file, or
    one of rlide's own (its run folder, a module shadowing its pytest plugin)."""
    if is_reserved(path):
        return True
    *folders, name = path.split("/")
    if name in TRUSTED_NAMES or name.endswith(".pth"):
        return True
    if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
        return True
    return any(folder in TEST_FOLDERS for folder in folders)


def patched_paths(patch: str, strip: int = 1) -> set[str]:
    """The workspace paths a unified diff names, as `patch -p<strip>` reads them (/dev/null left out)."""
    paths = set()
    for raw in _DIFF_PATH.findall(patch):
        if raw == "/dev/null":
            continue
        parts = raw.split("/")[strip:]
        if parts:
            paths.add(posixpath.normpath("/".join(parts)))
    return paths


def trusted_in_patch(patch: str, strip: int = 1) -> list[str]:
    """The trusted files a diff would change: a verifier refuses such a patch."""
    return sorted(path for path in patched_paths(patch, strip) if is_trusted(path))


def trusted_files(files: dict[str, str]) -> dict[str, str]:
    return {path: text for path, text in files.items() if is_trusted(path)}


def with_trusted(files: dict[str, str], trusted: dict[str, str]) -> dict[str, str]:
    """`files` with every trusted file as `trusted` has it: changed ones restored, added ones gone."""
    return {**{path: text for path, text in files.items() if not is_trusted(path)}, **trusted}
