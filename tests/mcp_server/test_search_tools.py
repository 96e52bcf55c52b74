"""search_code, index_workspace, index_status and recall_solutions through the MCP client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import TextContent

from mcp_server.result_size import result_chars
from mcp_server.server import build_server
from mcp_server.settings import Settings, load_settings
from tests.mcp_calls import call_ok


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "project"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "reward.py").write_text(
        "def compute_reward(passed: int, total: int) -> float:\n"
        '    """Fraction of tests passed, mapped to [-1, 1]."""\n'
        "    return 2 * passed / total - 1\n"
    )
    (ws / "src" / "slug.py").write_text("def slugify(text: str) -> str:\n    return text.lower().replace(' ', '-')\n")
    (ws / "web.ts").write_text(
        "export function renderPage(title: string): string {\n  return `<h1>${title}</h1>`;\n}\n"
    )
    (ws / "escape").symlink_to("/etc")
    (ws / "loop").symlink_to(ws / "loop")
    return ws


@pytest.fixture
def settings(tmp_path: Path, workspace: Path) -> Settings:
    return load_settings(home=tmp_path / "home", workspace=workspace)


@pytest.fixture(params=["legacy", "auto"])
async def client(request: pytest.FixtureRequest, settings: Settings) -> AsyncIterator[Client]:
    async with Client(build_server(settings), mode=request.param) as c:
        yield c


@pytest.mark.anyio
async def test_index_then_search_finds_the_function(client: Client) -> None:
    report = await call_ok(client, "index_workspace", {"wait_s": 60})
    assert report["complete"] and report["files_indexed"] == 3 and report["last_error"] is None
    found, text = await search(client, {"query": "where is the reward computed?", "k": 3})
    assert found["results"][0]["path"] == "src/reward.py"
    assert found["results"][0]["start_line"] == 1 and found["results"][0]["symbol"] == "compute_reward"
    assert found["results"][0]["shown"] == "whole"
    relevance = found["results"][0]["relevance"]
    assert 0 < relevance <= 1
    assert f"1. src/reward.py:1-3  compute_reward  (relevance {relevance:.2f})\n```python\ndef compute_reward(" in text
    assert found["index"]["complete"] is True and found["note"] is None

    only_ts = await call_ok(client, "search_code", {"query": "render page title", "path_glob": "*.ts"})
    assert [h["path"] for h in only_ts["results"]] == ["web.ts"]
    python_only = await call_ok(client, "search_code", {"query": "slugify text", "language": "python"})
    assert {h["path"] for h in python_only["results"]} <= {"src/reward.py", "src/slug.py"}

    status = await call_ok(client, "index_status", {})
    assert status["chunks_indexed"] >= 3 and status["vectors_pending"] == 0


async def search(client: Client, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A search_code answer: the hits' locations (structured) and the text block the model reads."""
    result = await client.call_tool("search_code", args)
    assert not result.is_error and result.structured_content is not None, result.content
    [block] = result.content
    assert isinstance(block, TextContent)
    return result.structured_content, block.text


@pytest.mark.anyio
async def test_the_default_answer_is_compact_and_full_text_fits_the_reply(tmp_path: Path) -> None:
    """Ten hits of ~2,300 characters of real-looking code took 20,000 characters, the code counted
    twice (structured content and its JSON copy). The default answer now shows the top 3 hits' code
    and an excerpt of the others within 10,000 characters, the code once; `full_text` shows every
    hit's first lines within the reply limit, each saying how many lines it left out."""
    ws = tmp_path / "long"
    ws.mkdir()
    for i in range(12):
        body = "".join(f'    parse_line("field_{j}", row[{j}])  # parse the config\n' for j in range(40))
        (ws / f"loader_{i}.py").write_text(f'def load_config_{i}(row):\n    """Parse config row {i}."""\n{body}')
    settings = load_settings(home=tmp_path / "home", workspace=ws)
    assert settings.max_result_chars == 20_000
    async with Client(build_server(settings)) as c:
        assert (await call_ok(c, "index_workspace", {"wait_s": 60}))["complete"]
        raw = await c.call_tool("search_code", {"query": "parse the config"})
        compact, text = await search(c, {"query": "parse the config"})
        full, full_text = await search(c, {"query": "parse the config", "full_text": True})
    assert result_chars(raw.model_dump(mode="json", by_alias=True, exclude_none=True)) <= 10_000
    hits = compact["results"]
    assert len(hits) == 10 and [h["rank"] for h in hits] == list(range(1, 11))
    assert [h["shown"] for h in hits] == ["head"] * 3 + ["excerpt"] * 7
    assert all((h["start_line"], h["end_line"], h["symbol"]) == (1, 42, h["path"][:-3].replace("loader", "load_config"))
               for h in hits)  # fmt: skip
    assert all("text" not in h for h in hits) and "parse_line" not in json.dumps(compact)  # the code once
    assert text.count("more lines of this hit: read them from the file]") == 3
    assert text.count("[... 39 more lines]") == 7  # excerpts: the signature, the docstring, one line
    assert [h["shown"] for h in full["results"]] == ["head"] * 10
    assert full_text.count("more lines of this hit") == 10 and len(full_text) > len(text)


@pytest.mark.anyio
async def test_fifty_hits_of_long_lines_stay_within_the_answer_budget(tmp_path: Path) -> None:
    """Fifty excerpts of long lines alone passed the 20,000-character limit (a size error): they are
    cut to fit like the top hits' code."""
    ws = tmp_path / "wide"
    ws.mkdir()
    for i in range(60):
        wide = ", ".join(f"column_{j}_of_the_wide_report_table" for j in range(8))
        (ws / f"report_{i}.py").write_text(f"def report_{i}(rows):\n    return [{wide}]\n    # wide report\n" * 3)
    async with Client(build_server(load_settings(home=tmp_path / "home", workspace=ws))) as c:
        assert (await call_ok(c, "index_workspace", {"wait_s": 60}))["complete"]
        raw = await c.call_tool("search_code", {"query": "wide report table columns", "k": 50})
    assert not raw.is_error and raw.structured_content is not None
    assert len(raw.structured_content["results"]) == 50
    assert result_chars(raw.model_dump(mode="json", by_alias=True, exclude_none=True)) <= 20_000


@pytest.mark.anyio
async def test_code_with_backtick_fences_keeps_its_own_block(tmp_path: Path) -> None:
    ws = tmp_path / "md"
    ws.mkdir()
    (ws / "render.py").write_text('def fenced_markdown():\n    return "```python\\nprint(1)\\n```"\n')
    async with Client(build_server(load_settings(home=tmp_path / "home", workspace=ws))) as c:
        assert (await call_ok(c, "index_workspace", {"wait_s": 60}))["complete"]
        _, text = await search(c, {"query": "fenced_markdown", "k": 1})
    assert "\n````python\ndef fenced_markdown():" in text and text.endswith("\n````")


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/etc", "escape", "../", "~/.ssh"])
async def test_paths_outside_the_workspace_are_refused(client: Client, path: str) -> None:
    for tool, args in (("index_workspace", {"path": path}), ("search_code", {"query": "x", "workspace": path})):
        result = await client.call_tool(tool, args)
        assert result.is_error
        assert "outside the directories this server may index" in result.content[0].text  # type: ignore[union-attr]


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["x" * 1000, "loop", "loop/inner", "\x00", "src\x00/x", "~0", "~no_such_user_rlide"])
async def test_unusable_paths_are_a_clear_error(client: Client, path: str) -> None:
    """Found by fuzzing: a name too long for the filesystem, a NUL byte, or `~user` for a user that
    does not exist crashed the tools."""
    for tool, args in (
        ("index_workspace", {"path": path}),
        ("search_code", {"query": "x", "workspace": path}),
        ("index_status", {"workspace": path}),
    ):
        result = await client.call_tool(tool, args)
        assert result.is_error
        text = result.content[0].text  # type: ignore[union-attr]
        assert "cannot be used as a folder" in text or "is not a directory" in text, text


@pytest.mark.anyio
async def test_a_solved_episode_is_recalled(client: Client) -> None:
    await call_ok(client, "start_episode", {"task": "rescale the reward to [-1, 1]"})
    await call_ok(client, "search_code", {"query": "compute_reward"})
    await call_ok(client, "end_episode", {"outcome": "success", "summary": "compute_reward now maps passed/total"})
    recalled = await call_ok(client, "recall_solutions", {"query": "reward scaling"})
    [solution] = recalled["solutions"]
    assert solution["task"] == "rescale the reward to [-1, 1]" and solution["reward"] == 1.0

    await call_ok(client, "start_episode", {"task": "an abandoned idea"})
    await call_ok(client, "end_episode", {"outcome": "failure"})
    again = await call_ok(client, "recall_solutions", {"query": "abandoned idea"})
    assert [s["task"] for s in again["solutions"]] == ["rescale the reward to [-1, 1]"]  # failures are not solutions

    # Tool calls outside start_episode land in an implicit episode whose task is a placeholder: it
    # is a solution only when end_episode says what was done, and then that is its task.
    await call_ok(client, "search_code", {"query": "slugify"})
    await call_ok(client, "end_episode", {"outcome": "success"})
    await call_ok(client, "search_code", {"query": "slugify"})
    await call_ok(client, "end_episode", {"outcome": "success", "summary": "slugify keeps unicode letters"})
    implicit = await call_ok(client, "recall_solutions", {"query": "implicit tool calls slugify unicode", "k": 5})
    assert sorted(s["task"] for s in implicit["solutions"]) == [
        "rescale the reward to [-1, 1]",
        "slugify keeps unicode letters",
    ]


@pytest.mark.anyio
async def test_started_in_the_home_folder_it_serves_no_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hosts start servers in / (Claude Desktop) or the home folder: indexing that would put every
    dotfile (~/.ssh) into search results. Search says what to set; solutions and episodes still work."""
    from mcp_server.settings import implicit_workspace

    home = tmp_path / "me"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("zebracornflakes private key\n")
    (home / "project").mkdir()
    assert implicit_workspace(Path("/"), home) is None
    assert implicit_workspace(home, home) is None and implicit_workspace(home.parent, home) is None
    assert implicit_workspace(home / "project", home) == home / "project"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    settings = load_settings(home=tmp_path / "state")
    assert settings.served_workspace is None
    async with Client(build_server(settings), mode="legacy") as client:
        for tool, args in (
            ("search_code", {"query": "private key"}),
            ("index_workspace", {}),
            ("index_workspace", {"path": ".ssh"}),
            ("index_status", {}),
        ):
            result = await client.call_tool(tool, args)
            text = result.content[0].text  # type: ignore[union-attr]
            assert result.is_error and "no workspace is served" in text and "RLIDE_WORKSPACE" in text, (tool, text)
        await call_ok(client, "start_episode", {"task": "tidy the notes"})
        await call_ok(client, "end_episode", {"outcome": "success", "summary": "notes tidied"})
        [solution] = (await call_ok(client, "recall_solutions", {"query": "tidy notes"}))["solutions"]
        assert solution["task"] == "tidy the notes" and solution["episode_id"]
    indexes = [p.name for p in (tmp_path / "state" / "memory").rglob("*.sqlite")]
    assert not any(name.startswith(("me-", "project-")) for name in indexes), indexes


def test_the_files_a_step_touched() -> None:
    from mcp_server.workspaces import _paths_in

    patch = (
        "--- a/db/schema.sql\n+++ b/db/schema.sql\n@@ -1,2 +1,1 @@\n--- drop table users\n select 1;\n"
        "--- a/old.py\t2026-01-01\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n"
        "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+y = 2\n"
    )
    arguments = {"patch": patch, "files": {"a.py": ""}, "changed": ["NOTES.md"], "path": "src", "query": "x"}
    assert _paths_in(arguments) == ["db/schema.sql", "old.py", "new.py", "src", "NOTES.md", "a.py"]


@pytest.mark.anyio
async def test_a_symlinked_file_never_leaks_what_it_points_to(tmp_path: Path, workspace: Path) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("zebracornflakes private key material\n")
    (workspace / "notes.txt").symlink_to(secret)
    settings = load_settings(home=tmp_path / "home2", workspace=workspace)
    async with Client(build_server(settings), mode="legacy") as client:
        report = await call_ok(client, "index_workspace", {"wait_s": 60})
        assert report["complete"]
        found, text = await search(client, {"query": "zebracornflakes private key", "full_text": True})
    assert "key material" not in text and "notes.txt" not in text  # the query itself is in the headline
    assert all(hit["path"] != "notes.txt" for hit in found["results"])


@pytest.mark.anyio
async def test_index_progress_increases_through_chunking_and_embedding(tmp_path: Path) -> None:
    """The progress value must increase with every notification (MCP). It counted files only, so it
    sat at 100% through the whole embedding phase; now one count covers both phases."""
    ws = tmp_path / "many"
    ws.mkdir()
    for i in range(150):
        (ws / f"mod_{i}.py").write_text(
            "".join(f"def handler_{i}_{j}(value):\n    return value * {j} + {i}\n\n\n" for j in range(6))
        )
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    settings = load_settings(home=tmp_path / "home", workspace=ws)
    async with Client(build_server(settings)) as c:
        result = await c.call_tool("index_workspace", {"wait_s": 120}, progress_callback=on_progress)
    assert not result.is_error
    values = [p for p, _, _ in seen]
    assert len(values) >= 2 and all(b > a for a, b in zip(values, values[1:], strict=False)), seen
    assert all(total is not None and p <= total for p, total, _ in seen)
    assert any("embedding" in (m or "") or p > 150 for p, _, m in seen), seen  # past the file count


@pytest.mark.anyio
async def test_the_first_search_of_a_new_server_answers(settings: Settings) -> None:
    """The served workspace is indexed from the server's start, and a search that comes before the
    keyword index exists waits for it: the first search found nothing before."""
    async with Client(build_server(settings)) as c:
        found = await call_ok(c, "search_code", {"query": "where is the reward computed?", "k": 3})
        assert found["results"] and found["results"][0]["path"] == "src/reward.py"
        assert found["index"]["keyword_complete"] is True


@pytest.mark.anyio
async def test_the_served_workspace_is_indexed_when_the_server_starts(settings: Settings) -> None:
    import anyio

    async with Client(build_server(settings)) as c:
        with anyio.fail_after(60):
            while not (status := await call_ok(c, "index_status", {}))["complete"]:
                await anyio.sleep(0.2)
        assert status["files_indexed"] == 3 and status["vectors_pending"] == 0, status
    off = settings.model_copy(update={"index_on_start": False, "home": settings.home.parent / "other-home"})
    async with Client(build_server(off)) as c:
        await anyio.sleep(1.0)
        status = await call_ok(c, "index_status", {})
        assert (status["files_indexed"], status["phase"]) == (0, "idle")  # RLIDE_INDEX_ON_START=false
