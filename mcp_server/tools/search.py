"""Code search and memory tools: hybrid search over the workspace, indexing, and past solutions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from mcp_server.result_size import call_result_chars, clip, fit_result
from mcp_server.state import AppState, app_state
from mcp_server.workspaces import PathNotAllowed
from memory.errors import RlideMemoryError
from memory.models import CodeHit, IndexStatus, SearchHeader, SearchResponse

ANSWER_CHARS_PER_HIT = 1_000
"""What a search answer may take (the whole reply, as sent) per hit asked for, 10 at least: 10,000
characters by default; never more than the server's result limit."""
FULL_TOP = 3
"""Hits whose whole text a default answer shows; the others show an excerpt."""
EXCERPT_LINES = 3
FILE_CHARS = 40
"""A past solution lists one touched file for each this many characters of its text budget."""

WorkspacePath = Annotated[
    str | None,
    Field(
        max_length=4096, description="Workspace folder (absolute, or relative to the served one). Omit for the default."
    ),
]


class IndexReport(BaseModel):
    workspace: str
    phase: str
    files_indexed: int
    chunks_indexed: int
    vectors_pending: int
    keyword_complete: bool
    complete: bool
    last_error: str | None = None
    note: str | None = None


class HitLocation(BaseModel):
    rank: int = Field(description="1 = best; the text block shows each hit's code under its rank")
    path: str = Field(description="workspace-relative POSIX path")
    start_line: int = Field(description="1-based, inclusive")
    end_line: int = Field(description="1-based, inclusive")
    symbol: str = Field(description="the function or class; a method as Class.method")
    kind: str = Field(description="code | test | doc")
    language: str
    relevance: float = Field(description="estimated probability (0-1) that this hit answers the query")
    shown: Literal["whole", "head", "excerpt"] = Field(
        description="how much of the hit's code the text block shows: all of it, its first lines (cut to fit), "
        "or a short excerpt (its first lines; read the file, or search again with full_text, for more)"
    )


_LOCATION_FIELDS = set(HitLocation.model_fields) - {"rank", "shown"}


class SearchAnswer(SearchHeader):
    """Where the code is, as data; the code itself is in the text block, once (not a JSON copy of this)."""

    results: list[HitLocation]


class RecallResult(BaseModel):
    solutions: list[dict[str, Any]] = Field(description="Past successful episodes, most similar first.")


async def _service(state: AppState, path: str | None) -> Any:
    try:
        root = state.workspaces.resolve(path)
    except PathNotAllowed as exc:
        raise ToolError(str(exc)) from exc
    try:
        return await anyio.to_thread.run_sync(state.workspaces.service, root)
    except RlideMemoryError as exc:
        raise ToolError(f"code search is not available: {exc}") from exc


def _report(status: Any, note: str | None = None) -> IndexReport:
    return IndexReport(**status.model_dump(include=set(IndexReport.model_fields)), note=note)


async def search_code(
    query: Annotated[str, Field(min_length=1, max_length=2_000, description="Words, a question, or identifiers.")],
    ctx: Context[Any, Any],
    k: Annotated[int, Field(ge=1, le=50, description="How many results.")] = 10,
    path_glob: Annotated[
        str | None,
        Field(max_length=500, description="Only paths matching, e.g. 'src/**/*.py', '*.{ts,tsx}', 'test_[a-m]*'."),
    ] = None,
    language: Annotated[
        str | None, Field(max_length=40, description="Only this language, e.g. python, typescript, go (or py, ts).")
    ] = None,
    kind: Annotated[
        Literal["code", "test", "doc"] | None,
        Field(description="Only code, tests, or docs (docs, examples, changelogs). Default: all, code first."),
    ] = None,
    full_text: Annotated[
        bool, Field(description="Every hit's whole code (within the reply limit), not only the top 3's.")
    ] = False,
    workspace: WorkspacePath = None,
) -> Annotated[CallToolResult, SearchAnswer]:
    """Search the workspace's code (keyword + semantic). A pasted error message or quoted text leads to where it is
    raised or logged; tests and docs rank below the code unless asked for. The answer lists each hit's path, lines
    and symbol; it shows the code of the top 3 and an excerpt of the others (1,000 characters a hit, 10,000 for
    the default 10; with full_text, every hit's code). Never waits for indexing: says how complete the index is."""
    state = app_state(ctx)
    service = await _service(state, workspace)
    try:
        response: SearchResponse = await anyio.to_thread.run_sync(
            lambda: service.search_code(query, k, path_glob, language, kind=kind)
        )
    except RlideMemoryError as exc:
        raise ToolError(str(exc)) from exc
    whole = len(response.results) if full_text else FULL_TOP
    limit = state.settings.max_result_chars
    if not full_text:
        limit = min(limit, ANSWER_CHARS_PER_HIT * max(k, 10))
    longest = max((len(hit.text) for hit in response.results[:whole]), default=0)
    return fit_result(lambda budget: _answer(response, whole, budget), limit, longest, measure=call_result_chars)


def _answer(response: SearchResponse, whole: int, budget: int) -> CallToolResult:
    """The first `whole` hits' code cut to `budget` characters each, an excerpt of the others (cut
    to `budget` too: 50 excerpts of long lines alone would pass the limit): as one text block to
    read, and the hits' locations as structured content."""
    located: list[HitLocation] = []
    blocks = [_headline(response)]
    for rank, hit in enumerate(response.results, start=1):
        if rank <= whole:
            code = _head(hit.text, budget)
            shown: Literal["whole", "head", "excerpt"] = "whole" if code == hit.text else "head"
        else:
            code, shown = _head(_excerpt(hit.text), budget), "excerpt"
        located.append(HitLocation(rank=rank, shown=shown, **hit.model_dump(include=_LOCATION_FIELDS)))
        blocks.append(_hit_block(rank, hit, code))
    answer = SearchAnswer(
        query=response.query, mode=response.mode, results=located, index=response.index, note=response.note
    )
    return CallToolResult(
        content=[TextContent(type="text", text="\n\n".join(blocks))],
        structured_content=answer.model_dump(mode="json"),
    )


def _headline(response: SearchResponse) -> str:
    count = len(response.results)
    line = f"{count} result{'s' if count != 1 else ''} for {response.query!r} ({response.mode})"
    return f"{line}\nnote: {response.note}" if response.note else line


def _hit_block(rank: int, hit: CodeHit, code: str) -> str:
    symbol = f"  {hit.symbol}" if hit.symbol else ""
    kind = "" if hit.kind == "code" else f"  [{hit.kind}]"
    fence = "`" * max(3, _longest_backtick_run(code) + 1)
    where = f"{rank}. {hit.path}:{hit.start_line}-{hit.end_line}{symbol}{kind}  (relevance {hit.relevance:.2f})"
    return f"{where}\n{fence}{hit.language}\n{code}\n{fence}"


def _longest_backtick_run(text: str) -> int:
    run = longest = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return longest


def _excerpt(text: str) -> str:
    """A hit's first lines that say something (its signature and the start of its docstring)."""
    lines = text.rstrip("\n").split("\n")
    kept = [line[:160] for line in lines if line.strip()][:EXCERPT_LINES]
    left_out = len(lines) - len(kept)
    return "\n".join(kept) + (f"\n[... {left_out} more lines]" if left_out > 0 else "")


def _head(text: str, budget: int) -> str:
    """A hit's first whole lines within `budget` characters (its signature and docstring come
    first), saying how many lines were left out; the hit's path and lines locate the rest."""
    if len(text) <= budget:
        return text
    head = text[: text.rfind("\n", 0, budget) + 1]
    left_out = text.count("\n", len(head)) + 1
    return f"{head}[... {left_out} more lines of this hit: read them from the file]"


async def index_workspace(
    ctx: Context[Any, Any],
    path: WorkspacePath = None,
    wait_s: Annotated[float, Field(ge=0, le=120, description="Wait up to this long, reporting progress.")] = 20.0,
) -> IndexReport:
    """(Re)index a workspace incrementally; only changed files are re-read. Reports progress while it runs."""
    service = await _service(app_state(ctx), path)
    service.start_indexing()
    sent = 0
    with anyio.move_on_after(wait_s):
        while (status := service.index_status()).indexing:
            # One count over both phases (files chunked, then chunks embedded), sent only when it grew:
            # MCP says a progress value must increase with every notification.
            done = status.files_done + status.vectors_indexed
            if done > sent:
                total = status.files_changed + status.vectors_indexed + status.vectors_pending
                await ctx.report_progress(done, max(total, done), _progress_line(status))
                sent = done
            await anyio.sleep(0.5)
    status = service.index_status()
    if status.last_error:
        raise ToolError(f"indexing failed: {status.last_error}")
    note = (
        None if status.complete else "still indexing in the background: search works now; index_status shows progress"
    )
    return _report(status, note)


def _progress_line(status: IndexStatus) -> str:
    return (
        f"{status.phase}: {status.files_done}/{status.files_changed} files chunked,"
        f" {status.vectors_indexed} chunks embedded, {status.vectors_pending} to go"
    )


async def index_status(ctx: Context[Any, Any], workspace: WorkspacePath = None) -> IndexReport:
    """How complete the code index is: files and chunks indexed, embeddings still pending."""
    service = await _service(app_state(ctx), workspace)
    return _report(await anyio.to_thread.run_sync(service.index_status))


async def recall_solutions(
    query: Annotated[str, Field(min_length=1, max_length=2_000, description="The task at hand, in words.")],
    ctx: Context[Any, Any],
    k: Annotated[int, Field(ge=1, le=20)] = 5,
) -> RecallResult:
    """Find past successful episodes similar to the task at hand: their task, summary, files touched and reward."""
    state = app_state(ctx)
    try:
        service = await anyio.to_thread.run_sync(state.workspaces.solutions)
    except RlideMemoryError as exc:
        raise ToolError(f"past solutions are not available: {exc}") from exc
    hits = await anyio.to_thread.run_sync(lambda: service.recall_solutions(query, k))
    limit = state.settings.max_result_chars

    def cut_to(budget: int) -> RecallResult:
        """Each solution's task, summary and each file path within `budget` characters, and a file
        for each `FILE_CHARS` of it (at budget 0: none, and how many there were)."""
        solutions = []
        for hit in hits:
            episode = hit.episode
            files = [clip(path, budget) or "" for path in episode.files_touched[: budget // FILE_CHARS]]
            more = len(episode.files_touched) - len(files)
            solutions.append(
                {
                    **episode.model_dump(mode="json"),
                    "task": clip(episode.task, budget),
                    "summary": clip(episode.summary, budget),
                    "files_touched": files + ([f"... and {more} more files"] if more else []),
                    "score": hit.score,
                }
            )
        return RecallResult(solutions=solutions)

    longest = max(
        (len(t) for h in hits for t in (h.episode.task, h.episode.summary, *h.episode.files_touched)), default=0
    )
    longest = max(longest, FILE_CHARS * max((len(h.episode.files_touched) for h in hits), default=0))
    return fit_result(cut_to, limit, longest)


_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
TOOLS = (
    (search_code, _READ.model_copy(update={"title": "Search code"})),
    (
        index_workspace,
        ToolAnnotations(
            title="Index workspace",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    ),
    (index_status, _READ.model_copy(update={"title": "Index status"})),
    (recall_solutions, _READ.model_copy(update={"title": "Recall past solutions"})),
)
