"""The names a verifier trusts in every project, and the names that are rlide's own.

A candidate that may edit test code can pay itself: rewrite the failing test, add a `conftest.py`
that passes everything, set `addopts = --collect-only` in `pytest.ini`, or run code before any test
from a `sitecustomize.py`, `usercustomize.py` or `.pth` file. These names are test code, test
configuration or start-up files in any project; `envpool.verifiers.project` adds what a project's
own configuration says (its test file patterns, test paths, doctests), and a judged run gets all of
them back from the start commit, whatever the candidate's tree holds. `pyproject.toml` and
`setup.cfg` hold pytest's configuration too: trusted whole (a dependency edited there is not seen by
the verifier).
"""

from __future__ import annotations

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
RUNNER = "rlide_run"
"""rlide's trusted pytest runner's module name (beside the plugin)."""
RUN_FOLDER = ".rlide"
"""The folder of a test run's own files (the patch, given test code)."""


def is_reserved(path: str) -> bool:
    """Whether a workspace path is rlide's: its run folder, or a module that would shadow its plugin."""
    parts = path.split("/")
    return parts[0] == RUN_FOLDER or any(part in (PLUGIN, f"{PLUGIN}.py", RUNNER, f"{RUNNER}.py") for part in parts)
