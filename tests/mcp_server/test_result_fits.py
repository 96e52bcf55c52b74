"""Every tool fits its result into the server's limit at every value its schema allows: each tool is
called, through a real MCP client, with each bounded argument (a `maximum`, a `maxLength`) at its
maximum, alone and with every flag on, over the largest realistic data (long code full of quotes
and backslashes, 25 past solutions with 20,000-character tasks and summaries and 100 long paths,
outputs of megabytes). The arguments are derived from the published schemas, so a tool or a bound
added later is covered without editing this file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_server.result_size import result_chars
from mcp_server.server import build_server
from mcp_server.settings import Settings, load_settings
from mcp_server.workspaces import WorkspaceHub
from memory.solutions import SolvedEpisode
from tests.mcp_calls import ALL_TOOLS, call_ok

UGLY = 'say("\\"quoted\\"\\n") \\\\ `tick` '  # 2-6 characters each on the wire


def ugly(length: int) -> str:
    return (UGLY * (length // len(UGLY) + 1))[:length]


# Megabytes of output that costs the most to send.
NOISY = "import sys\nsys.stdout.write('\"\\\\\\n' * 3_000_000)\nsys.stderr.write('\\'\"\\n' * 3_000_000)\n"
FAILING_TESTS = "".join(f"def test_{i}():\n    assert '{UGLY * 20}' == 'x' * {i}\n\n" for i in range(60))
REQUIRED: dict[str, dict[str, Any]] = {
    "search_code": {"query": "handler"},
    "recall_solutions": {"query": "fix the parser"},
    "run_code": {"code": NOISY},
    "run_tests": {"tests": FAILING_TESTS, "use_workspace": False},
    "give_feedback": {"rating": 1.0},
    "end_episode": {"outcome": "success"},
    "start_episode": {"task": "t"},
}
"""What a call of each tool needs besides its bounded arguments (the others need nothing)."""


def _filler(name: str, length: int) -> str:
    """A realistic string of `length` characters for the argument `name`."""
    if name in ("code", "tests"):
        program = REQUIRED["run_tests" if name == "tests" else "run_code"][name]
        return program + "#" * (length - len(program))
    if name == "query":
        return ("handler parse " * length)[:length]
    return ugly(length)


def bounded_calls(tool: str, schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool's required arguments, then with each bounded argument at its maximum, then each
    bounded number at its maximum with every boolean flag on."""
    base = REQUIRED.get(tool, {})
    props: dict[str, Any] = schema.get("properties", {})
    flags = {name: True for name, p in props.items() if p.get("type") == "boolean"}
    calls = [base]
    for name, prop in props.items():
        options = [prop, *prop.get("anyOf", [])]
        for option in options:
            if "maximum" in option:
                calls += [{**base, name: option["maximum"]}, {**base, **flags, name: option["maximum"]}]
            if "maxLength" in option:
                calls.append({**base, name: _filler(name, option["maxLength"])})
    return calls


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    workspace = tmp_path / "project"
    workspace.mkdir()
    for i in range(60):  # long functions of escape-heavy code: each hit costs the most to send
        body = "".join(f"    x{j} = handler_{i}({UGLY!r} * {j})  # parse {UGLY}\n" for j in range(120))
        (workspace / f"mod_{i}.py").write_text(f"def handler_{i}(text):\n    '''Parse {i}.'''\n{body}")
    settings = load_settings(home=tmp_path / "home", workspace=workspace, index_on_start=False, memory_embedder="none")
    hub = WorkspaceHub(settings)
    try:
        for i in range(25):
            hub.solutions().remember_solution(
                SolvedEpisode(
                    episode_id=f"ep_{i:04d}",
                    task=f"fix the parser {i} " + ugly(19_900),  # start_episode takes 20,000
                    summary=ugly(20_000),
                    files_touched=[f"src/{'deep/' * 60}{UGLY}{n}.py" for n in range(100)],
                )
            )
    finally:
        hub.close()
    return settings


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    async with Client(build_server(settings)) as c:
        yield c


@pytest.mark.anyio
async def test_every_tool_fits_its_result_at_every_maximum_its_schema_allows(
    client: Client, settings: Settings, record_property: Any
) -> None:
    indexed = await call_ok(client, "index_workspace", {"wait_s": 120})
    assert indexed["complete"], indexed
    for i in range(40):  # a listing of long episodes
        await call_ok(client, "start_episode", {"task": f"task {i}: " + ugly(19_900)})
        await call_ok(client, "end_episode", {"outcome": "success", "summary": ugly(20_000)})
    await call_ok(client, "start_episode", {"task": "the open one"})

    tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == ALL_TOOLS
    over: list[str] = []
    sizes: dict[str, int] = {}
    for tool in tools:
        for arguments in bounded_calls(tool.name, tool.input_schema):
            result = await client.call_tool(tool.name, arguments)
            size = result_chars(result.model_dump(by_alias=True, mode="json"))
            text = " ".join(getattr(block, "text", "") for block in result.content)
            shown = {k: (v if not isinstance(v, str) else f"<{len(v)} chars>") for k, v in arguments.items()}
            if size > settings.max_result_chars or "over this server's limit" in text:
                over.append(f"{tool.name}({shown}): {size} characters: {text[:200]}")
            sizes[tool.name] = max(size, sizes.get(tool.name, 0))
    record_property("largest_result_chars", sizes)
    print({"limit": settings.max_result_chars, "largest_result_chars": sizes})
    assert not over, "\n".join(over)


@pytest.mark.anyio
async def test_a_cut_result_says_what_was_cut(client: Client) -> None:
    found = await call_ok(client, "recall_solutions", {"query": "fix the parser", "k": 20})
    assert len(found["solutions"]) == 20  # every hit asked for is there, each cut to its fair share
    for solution in found["solutions"]:
        assert "more characters]" in solution["task"] and "more characters]" in solution["summary"]
        assert solution["files_touched"][-1].startswith("... and ")
    await call_ok(client, "index_workspace", {"wait_s": 120})
    result = await client.call_tool("search_code", {"query": "handler parse", "k": 50, "full_text": True})
    assert not result.is_error, result.content
    assert result.structured_content is not None and len(result.structured_content["results"]) == 50
    assert {hit["shown"] for hit in result.structured_content["results"]} == {"head"}
    assert "more lines of this hit" in result.content[0].text  # type: ignore[union-attr]
