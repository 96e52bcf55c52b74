"""Real libraries' own suites scored right through MCP: more-itertools (threaded tests, the suite a
1 GiB address-space cap crashed with `INTERNALERROR> MemoryError`) and cachetools (a src layout and
a threading test). The honest fix of one uncommitted off-by-one earns +1, leaving it -1, and the
verdict names the tests still failing. Real sandbox, real git, the real MCP client."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mcp import Client

from episodes.store import EpisodeStore
from mcp_server.server import build_server
from mcp_server.settings import load_settings
from tests.mcp_calls import call_ok
from tests.real_projects import break_code, checkout

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it"),
    pytest.mark.anyio,
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


SLICED = ("(seq[i : i + n] for i in count(0, n))", "(seq[i : i + n] for i in count(1, n))")


async def test_more_itertools_honest_fix_earns_1_on_its_threaded_suite(tmp_path: Path) -> None:
    root = checkout("more_itertools-11.2.1.tar.gz", tmp_path)
    break_code(root, "more_itertools/more.py", *SLICED)
    settings = load_settings(home=tmp_path / "home", workspace=root, pool_envs=1)
    async with Client(build_server(settings), mode="legacy") as client:
        started = await call_ok(client, "start_episode", {"task": "sliced() drops the first item"})
        assert "python -m pytest" in started["verifier"]
        break_code(root, "more_itertools/more.py", *reversed(SLICED))  # the fix, in the IDE's editor
        ended = await call_ok(client, "end_episode", {"outcome": "success"})
    verdict = ended["verification"]
    assert verdict["reward"] == 1.0, verdict
    store = EpisodeStore.open(settings.episode_db_url)
    try:
        verifier = store.verifier(started["episode_id"])
    finally:
        store.close()
    assert verifier is not None and verifier.fail_to_pass
    assert all("sliced" in test.lower() for test in verifier.fail_to_pass), verifier.fail_to_pass
    assert len(verifier.pass_to_pass or []) > 700  # the whole suite ran, threaded tests included
    threaded = "tests/test_more.py::TestConcurrentTee::test_concurrent_consumers"  # ten threads at once
    assert threaded in (verifier.pass_to_pass or [])


async def test_cachetools_src_layout_leaving_the_bug_names_the_failing_tests(tmp_path: Path) -> None:
    root = checkout("cachetools-8.0.2.tar.gz", tmp_path, src_layout=True)
    break_code(root, "src/cachetools/__init__.py", "if maxsize < 1:", "if maxsize < 0:")
    settings = load_settings(home=tmp_path / "home", workspace=root, pool_envs=1)
    async with Client(build_server(settings), mode="legacy") as client:
        await call_ok(client, "start_episode", {"task": "a cache of size 0 must refuse items"})
        left = await call_ok(client, "end_episode", {"outcome": "success"})
    verdict = left["verification"]
    assert verdict["reward"] == -1.0 and verdict["still_failing"], verdict
    assert verdict["still_failing"][0] in verdict["line"]
