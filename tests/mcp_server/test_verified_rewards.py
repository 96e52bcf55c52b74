"""Fail-to-pass through the MCP run_tests tool, on a real project with its own virtualenv: a
narrowed selection or any trick earns no more than the untouched tree; the real fix earns +1."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from episodes.records import EpisodeStatus
from episodes.store import EpisodeStore
from mcp_server.server import build_server
from mcp_server.settings import Settings, load_settings
from tests.git_repos import git
from tests.mcp_calls import call_error, call_ok

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it"),
    pytest.mark.anyio,
]

SLUG = '''"""A small library: URL slugs."""

import re


def slugify(text: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", text)
    return "-".join(words)  # the bug: slugs must be lower case
'''
FIXED = SLUG.replace('return "-".join(words)  # the bug: slugs must be lower case', 'return "-".join(words).lower()')
TESTS = """from minilib import slugify


def test_words_are_joined():
    assert slugify("a b") == "a-b"


def test_punctuation_goes():
    assert slugify("a, b!") == "a-b"


def test_lower_case():
    assert slugify("Hello World") == "hello-world"
"""
PYPROJECT = '[project]\nname = "minilib"\nversion = "0.1"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
PYTEST = {"test_command": "python -m pytest -q"}
SKIP_ALL = (
    "import pytest\n\ndef pytest_collection_modifyitems(items):\n"
    "    for item in items:\n        item.add_marker(pytest.mark.skip)\n"
)
XFAILED = TESTS.replace("def test_lower_case", "import pytest\n@pytest.mark.xfail\ndef test_lower_case")
REWRITTEN = TESTS.replace('"hello-world"', '"Hello-World"')
TRICKS: dict[str, dict[str, object]] = {
    "narrow the selection": {"test_command": "python -m pytest -q -k 'not lower'"},
    "a command that runs no test": {"test_command": "true"},
    "a printed summary": {"test_command": "echo '3 passed in 0.01s'"},
    "skip everything from conftest": {**PYTEST, "files": {"conftest.py": SKIP_ALL}},
    "xfail the failing test in its file": {**PYTEST, "files": {"tests/test_slug.py": XFAILED}},
    "collect only from pytest.ini": {**PYTEST, "files": {"pytest.ini": "[pytest]\naddopts = --collect-only\n"}},
    "exit at import from sitecustomize": {**PYTEST, "files": {"sitecustomize.py": "import os\nos._exit(0)\n"}},
    "a .pth in the user site": {
        **PYTEST,
        "files": {".local/lib/python3.11/site-packages/x.pth": "import os; os._exit(0)\n"},
    },
    "exit at import from the library": {**PYTEST, "files": {"minilib/__init__.py": "import os\nos._exit(0)\n"}},
    "rewrite the failing test": {**PYTEST, "files": {"tests/test_slug.py": REWRITTEN}},
}  # fmt: skip


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "minilib-repo"
    (root / "minilib").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "minilib" / "__init__.py").write_text(SLUG)
    (root / "tests" / "test_slug.py").write_text(TESTS)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / ".gitignore").write_text(".venv/\n")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / ".venv")], check=True)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "minilib"]):
        git(root, *args)
    return root


@pytest.fixture
async def session(project: Path, tmp_path: Path) -> AsyncIterator[tuple[Client, Settings]]:
    settings = load_settings(home=tmp_path / "home", workspace=project, pool_envs=1)
    async with Client(build_server(settings), mode="legacy") as client:
        yield client, settings


async def test_the_real_fix_earns_the_verified_reward_and_no_trick_does(
    session: tuple[Client, Settings], project: Path
) -> None:
    client, settings = session
    episode = (await call_ok(client, "start_episode", {"task": "slugs must be lower case"}))["episode_id"]
    start = await call_ok(client, "run_tests", PYTEST)
    assert (start["tests_passed"], start["tests_failed"], start["reward"]) == (2, 1, -1.0)
    for trick, arguments in TRICKS.items():
        got = await call_ok(client, "run_tests", arguments)
        assert got["reward"] is None or got["reward"] <= start["reward"], (trick, got["verdict"])
    patched_test = "--- a/tests/test_slug.py\n+++ b/tests/test_slug.py\n@@ -1 +1 @@\n-from minilib import slugify\n+x\n"
    assert "the patch changes tests/test_slug.py" in await call_error(
        client, "run_tests", {**PYTEST, "patch": patched_test}
    )
    (project / "minilib" / "__init__.py").write_text(FIXED)  # the fix, made with the IDE's own editor
    fixed = await call_ok(client, "run_tests", PYTEST)
    assert (fixed["tests_passed"], fixed["tests_failed"], fixed["reward"]) == (3, 0, 1.0), fixed["verdict"]
    await call_ok(client, "end_episode", {"outcome": "success"})

    store = EpisodeStore.open(settings.episode_db_url, settings.weights)
    try:
        done = store.get_episode(episode)
        verifier = store.verifier(episode)
    finally:
        store.close()
    assert done.status is EpisodeStatus.success and done.reward_total == 1.0  # tests +1, outcome +1
    assert verifier is not None and verifier.command == "python -m pytest -q"
    assert verifier.fail_to_pass == ["tests/test_slug.py::test_lower_case"]
    assert sorted(verifier.trusted_files) == ["pyproject.toml", "tests/test_slug.py"]


async def test_a_verifier_named_at_start_is_the_one_that_counts(session: tuple[Client, Settings]) -> None:
    client, _ = session
    await call_ok(client, "start_episode", {"task": "slugs", "test_command": "python -m pytest -q tests"})
    other = await call_ok(client, "run_tests", PYTEST)  # fails too, but is not the named command
    assert other["reward"] is None and "python -m pytest -q tests" in other["verdict"]
    named = await call_ok(client, "run_tests", {"test_command": "python -m pytest -q tests"})
    assert named["reward"] == -1.0
