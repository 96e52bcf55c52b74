"""Property-based: malformed arguments to every published tool, through the in-memory SDK client in
both protocol eras. The server never crashes: every call ends in a valid result or a tool error that
says more than the SDK's bare "Error executing tool X", every call is recorded, and the server keeps
answering."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp_types import CallToolResult, Tool

from episodes.store import EpisodeStore
from mcp_server.middleware import SELF_READS
from mcp_server.server import build_server
from mcp_server.settings import load_settings

ERAS = ["legacy", "auto"]
EXAMPLES_PER_TOOL = 50

# Long strings of characters that are cheap for the redaction patterns (see the ReDoS test below
# for the ones that are not).
_huge = st.builds(
    lambda ch, n: ch * n,
    st.sampled_from(["x", "é", "🙂", "\x00", "\u202e", "'\"\\", "\n", "Z" * 7 + " "]),
    st.integers(1_000, 50_000),
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63, max_value=2**80),
    st.floats(),  # includes NaN and +-inf
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324]),
    st.text(max_size=30),
    st.sampled_from(["", " ", "\ud800", "a\udfffb", "ep_" + "0" * 20, "../../etc/passwd", "null", "NaN", "-1"]),
    _huge,
)
_junk = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)


def _plausible(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of roughly the right shape, near and past the edges of the schema."""
    options = [prop, *prop.get("anyOf", [])]
    strategies: list[st.SearchStrategy[Any]] = []
    for option in options:
        if "enum" in option:
            strategies.append(st.sampled_from(option["enum"]))
        kind = option.get("type")
        if kind == "string":
            strategies.append(st.text(max_size=40))
        elif kind == "number":
            strategies.append(st.floats(-1.5, 1.5))
        elif kind == "integer":
            strategies.append(st.integers(-3, 1_000_003))
        elif kind == "null":
            strategies.append(st.none())
    return st.one_of(strategies) if strategies else _junk


def arguments_for(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Any subset of the tool's own properties (missing required ones included), each plausible
    or junk, plus unknown keys carrying junk."""
    properties: dict[str, Any] = schema.get("properties", {})
    known = st.fixed_dictionaries(
        {}, optional={name: st.one_of(_plausible(prop), _junk) for name, prop in properties.items()}
    )
    extra = st.dictionaries(st.text(max_size=12).filter(lambda k: k not in properties), _junk, max_size=3)
    return st.builds(lambda a, b: {**b, **a}, known, extra)


def assert_handled(tool: str, result: CallToolResult) -> None:
    if not result.is_error:
        assert result.structured_content is not None, result
        return
    text = " ".join(getattr(block, "text", "") for block in result.content).strip()
    bare = f"Error executing tool {tool}"
    # The SDK's message for an exception the tool did not anticipate is exactly the bare prefix.
    assert text and text.rstrip(":") != bare, f"{tool} crashed: {result.content}"


@pytest.fixture(params=ERAS)
def portal_client(request: pytest.FixtureRequest, rlide_home: Path) -> Iterator[tuple[BlockingPortal, Client]]:
    """An in-memory client held open by a portal thread, so synchronous hypothesis tests can use it."""
    settings_ = load_settings(home=rlide_home)
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(build_server(settings_), mode=request.param)) as client,
    ):
        yield portal, client


def _call(portal: BlockingPortal, client: Client, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    async def call() -> CallToolResult:
        with anyio.fail_after(60):
            return await client.call_tool(tool, arguments)

    return portal.call(call)


def _fuzz_tool(portal: BlockingPortal, client: Client, tool: Tool) -> int:
    """Hypothesis-driven calls of one tool; returns how many calls were made."""
    calls = 0

    @settings(
        max_examples=EXAMPLES_PER_TOOL,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
    @given(arguments=arguments_for(tool.input_schema))
    def fuzz(arguments: dict[str, Any]) -> None:
        nonlocal calls
        calls += 1
        assert_handled(tool.name, _call(portal, client, tool.name, arguments))

    fuzz()
    return calls


def test_malformed_arguments_never_crash_a_tool(portal_client: tuple[BlockingPortal, Client], rlide_home: Path) -> None:
    portal, client = portal_client
    tools = portal.call(client.list_tools).tools
    assert {t.name for t in tools} >= {"start_episode", "end_episode", "give_feedback", "list_episodes"}
    calls: Counter[str] = Counter()
    for tool in tools:
        calls[tool.name] += _fuzz_tool(portal, client, tool)
        # Still answering, and still able to do real work.
        assert len(portal.call(client.list_tools).tools) == len(tools)
        result = _call(portal, client, "list_episodes", {"limit": 1})
        calls["list_episodes"] += 1
        assert not result.is_error, result.content

    # Every call, good or bad, is a step in the log, and the log is healthy. A look at rlide's own
    # state (SELF_READS) made while the fuzzed session had no episode open starts none and is no step.
    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    try:
        assert store.integrity_check() == []
        with store.db.transaction(write=False) as cur:
            steps = Counter(dict(cur.execute("SELECT tool, COUNT(*) FROM steps GROUP BY tool").fetchall()))
        for tool, made in calls.items():
            if tool in SELF_READS:
                assert steps[tool] <= made, tool
            else:
                assert steps[tool] == made, tool
        assert set(steps) <= set(calls)
    finally:
        store.close()


def test_unencodable_text_is_recorded_not_fatal(portal_client: tuple[BlockingPortal, Client], rlide_home: Path) -> None:
    """JSON can carry a lone surrogate ("\\ud800"); SQLite's UTF-8 cannot. Regression: the step write
    raised UnicodeEncodeError out of the recorder and the call became an internal error."""
    portal, client = portal_client
    started = _call(portal, client, "start_episode", {"task": "surrogates", "note": "a\ud800b"})
    assert not started.is_error, started.content
    episode_id = started.structured_content["episode_id"]
    rejected = _call(portal, client, "give_feedback", {"rating": 0.5, "comment": "\udfff", "episode_id": episode_id})
    assert_handled("give_feedback", rejected)
    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    try:
        detail = store.detail(episode_id)
    finally:
        store.close()
    assert [s.tool for s in detail.steps] == ["start_episode", "give_feedback"]
    # Stored as the JSON escape, so the arguments column round-trips it exactly.
    assert detail.steps[0].arguments["note"] == "a\ud800b"


HOSTILE_FOLDERS = ["~0", "~no-such-user-rlide/project", "a\x00b", "/" + "x" * 5000, "~/../../../../etc", "\udcff"]
FOLDER_ARGUMENTS = [
    ("start_episode", "workspace", {"task": "fix it"}),
    ("search_code", "workspace", {"query": "parse"}),
    ("index_workspace", "path", {}),
    ("index_status", "workspace", {}),
]


@pytest.mark.parametrize(("tool", "name", "others"), FOLDER_ARGUMENTS)
def test_a_folder_no_machine_has_is_refused_with_a_reason(
    portal_client: tuple[BlockingPortal, Client], tool: str, name: str, others: dict[str, Any]
) -> None:
    """`~0` names the home of a user "0" that does not exist: Path.expanduser raises RuntimeError for
    it, which start_episode let through as a crash (hypothesis found it once in CI)."""
    portal, client = portal_client
    for folder in HOSTILE_FOLDERS:
        result = _call(portal, client, tool, {**others, name: folder})
        assert_handled(tool, result)
