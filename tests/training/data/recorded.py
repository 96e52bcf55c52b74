"""Two attempts at one bug, recorded as an IDE agent records them: a real MCP client session (the
SDK's in-memory transport) on a real git project, tests run by pytest in the real bubblewrap
sandbox, rewards measured by rlide's verifier. The project has many passing tests and one
off-by-one, so each `run_tests` result is long (a verbose pytest run: one line per passing test),
as on a real library; shared by the condensing and the dashboard preference tests."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from episodes.records import RewardSource
from episodes.store import EpisodeStore
from mcp_server.server import build_server
from mcp_server.settings import Settings, load_settings
from tests.git_repos import git, plain_venv
from tests.mcp_calls import call_ok
from training.models.registry import PACKAGED, installed, model_dir

QWEN = "qwen2.5-coder-0.5b-instruct"
NEEDS_BWRAP = "bubblewrap missing: `make setup` installs it"
NEEDS_QWEN = f"the {QWEN} tokenizer is not on this machine: `rlide models fetch {QWEN}`"

BUGGY = '''"""Chunks of a list."""


def chunked(items: list[int], size: int) -> list[list[int]]:
    """`items` in runs of `size`, the last one shorter."""
    return [items[i : i + size] for i in range(0, len(items) - 1, size)]  # off by one
'''
FIXED = BUGGY.replace("range(0, len(items) - 1, size)]  # off by one", "range(0, len(items), size)]")
TESTS = """import pytest

from chunks import chunked


@pytest.mark.parametrize("n", range(400))
def test_even_lengths_split_whole(n):
    assert sum(map(len, chunked(list(range(2 * n)), 2))) == 2 * n


def test_the_last_chunk_is_kept():
    assert chunked([1, 2, 3], 2) == [[1, 2], [3]]
"""
FAILING = "tests/test_chunks.py::test_the_last_chunk_is_kept"
TASK = "chunked() drops the last element of odd-length lists: fix it"


def qwen_folder() -> Path | None:
    packaged = PACKAGED[QWEN]
    return model_dir(packaged) if installed(packaged) else None


def have_bwrap() -> bool:
    return shutil.which("bwrap") is not None


@dataclass(frozen=True)
class Attempts:
    settings: Settings
    fixed: str
    """The honest fix's episode (verified +1)."""
    left: str
    """The attempt that left the bug (verified, lower)."""


def _project(root: Path) -> Path:
    for path, text in {"chunks/__init__.py": FIXED, "tests/test_chunks.py": TESTS, ".gitignore": ".venv/\n",
                       "pyproject.toml": '[project]\nname = "chunks"\nversion = "0.1"\n'}.items():  # fmt: skip
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    plain_venv(root / ".venv")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "chunks"]):
        git(root, *args)
    (root / "chunks/__init__.py").write_text(BUGGY)  # the bug as an uncommitted edit
    return root


async def _attempt(client: Client, project: Path, *, fix: bool) -> str:
    started = await call_ok(client, "start_episode", {"task": TASK})
    verbose: dict[str, Any] = {"test_command": "python -m pytest -v"}
    await call_ok(client, "run_tests", verbose)
    if fix:
        (project / "chunks/__init__.py").write_text(FIXED)  # with the IDE's own editor
        await call_ok(client, "run_tests", verbose)
    await call_ok(client, "end_episode", {"outcome": "success" if fix else "failure", "summary": "done"})
    (project / "chunks/__init__.py").write_text(BUGGY)  # the next attempt starts from the same state
    episode_id: str = started["episode_id"]
    return episode_id


def record_attempts(tmp: Path) -> Attempts:
    project = _project(tmp / "chunks-repo")
    settings = load_settings(home=tmp / "home", workspace=project, pool_envs=2)

    async def both() -> tuple[str, str]:
        async with Client(build_server(settings), mode="legacy") as client:
            return await _attempt(client, project, fix=True), await _attempt(client, project, fix=False)

    fixed, left = anyio.run(both)
    store = EpisodeStore.open(settings.episode_db_url, settings.weights)
    try:
        rewards = [store.get_episode(e) for e in (fixed, left)]
    finally:
        store.close()
    # rlide's verifier measured both (a sandbox failure leaves them unverified: nothing to train).
    assert [(e.verified, e.reward_components.get(RewardSource.tests)) for e in rewards] == [(True, 1.0), (True, -1.0)]
    return Attempts(settings, fixed, left)
