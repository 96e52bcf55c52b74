"""`rlide index` and `rlide search`: the code index from a shell (a trusted user: any directory)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from mcp_server.cli.common import cli_settings, fail

PROGRESS_EVERY_S = 5.0  # progress lines when stderr is not a terminal


def _service(workspace: Path) -> Any:
    from mcp_server.logs import configure_logging
    from mcp_server.settings import expand_path
    from mcp_server.workspaces import memory_config
    from memory.errors import RlideMemoryError
    from memory.service import MemoryService

    settings = cli_settings()
    configure_logging(settings)  # logs to stderr (or the log file): stdout is the results
    try:
        return MemoryService(memory_config(settings, expand_path(workspace)))
    except (RlideMemoryError, ValueError) as exc:
        raise fail(str(exc)) from exc


def index(
    path: Annotated[Path, typer.Argument(help="Workspace folder to index.")] = Path("."),
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Index a workspace incrementally (only changed files are re-read), with progress on stderr."""
    from memory.errors import RlideMemoryError

    service = _service(path)
    on_terminal = sys.stderr.isatty()
    shown: dict[str, Any] = {"phase": None, "at": 0.0}

    def progress(p: Any) -> None:
        line = (
            f"{p.phase.value}: {p.files_done}/{p.files_changed} files, {p.chunks_written} chunks,"
            f" {p.vectors_done} embedded, {p.vectors_pending} to go"
        )
        if on_terminal:
            typer.echo(f"\r{line}", err=True, nl=False)
            return
        # A pipe or a log file: whole lines, one per phase and at most one every few seconds,
        # rather than hundreds of carriage-return updates run together on one line.
        now = time.monotonic()
        if p.phase != shown["phase"] or now - shown["at"] >= PROGRESS_EVERY_S:
            typer.echo(line, err=True)
            shown.update(phase=p.phase, at=now)

    try:
        status = service.index_workspace(progress_callback=progress)
    except RlideMemoryError as exc:
        raise fail(str(exc)) from exc
    finally:
        service.close()
    if on_terminal:
        typer.echo("", err=True)
    if as_json:
        typer.echo(json.dumps(status.model_dump(mode="json"), indent=2))
    else:
        typer.echo(
            f"{status.workspace}: {status.files_indexed} files, {status.chunks_indexed} chunks, "
            f"{status.vectors_pending} embeddings pending"
        )


def search(
    query: Annotated[str, typer.Argument(help="Words, a question, or identifiers.")],
    workspace: Annotated[Path, typer.Option(help="Workspace folder (default: the current one).")] = Path("."),
    k: Annotated[int, typer.Option("-k", "--k", min=1, max=100, help="How many results.")] = 10,
    path_glob: Annotated[str | None, typer.Option(help="Only paths matching this glob.")] = None,
    language: Annotated[str | None, typer.Option(help="Only this language.")] = None,
    kind: Annotated[str | None, typer.Option(help="Only code, test or doc (docs, examples, changelogs).")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Search a workspace's code; results as {path, start_line, end_line, symbol, relevance, text}."""
    from memory.errors import RlideMemoryError

    service = _service(workspace)
    try:
        if service.index_status().files_indexed == 0:
            typer.echo("indexing first (once; later runs only re-read changed files)...", err=True)
            service.index_workspace()
        response = service.search_code(query, k, path_glob, language, kind=kind)
    except RlideMemoryError as exc:
        raise fail(str(exc)) from exc
    finally:
        service.close()
    fields = {"path", "start_line", "end_line", "symbol", "relevance", "text"}
    hits = [h.model_dump(include=fields) for h in response.results]
    if as_json:
        typer.echo(json.dumps(hits, indent=2, ensure_ascii=False))
        return
    if response.note:
        typer.echo(f"note: {response.note}", err=True)
    for hit in hits:
        first = hit["text"].strip().splitlines()[0] if hit["text"].strip() else ""
        sys.stdout.write(f"{hit['path']}:{hit['start_line']}-{hit['end_line']}  {hit['relevance']:.2f}  {first[:90]}\n")
