"""Helpers every `rlide` command group shares: settings, errors, JSON output, the episode log."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer

from mcp_server.settings import Settings, load_settings

if TYPE_CHECKING:
    from episodes.store import EpisodeStore


def cli_settings() -> Settings:
    try:
        return load_settings()
    except ValueError as exc:  # pydantic ValidationError, SettingsError (a variable not JSON), a bad path
        raise typer.BadParameter(f"invalid rlide settings (RLIDE_* variables or rlide.toml):\n{exc}") from exc


def echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def fail(message: str) -> typer.Exit:
    """Print `error: message` on stderr; raise what this returns to exit with status 1."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code=1)


def open_store() -> EpisodeStore:
    from episodes.db import StoreError
    from episodes.store import EpisodeStore

    try:
        return EpisodeStore.open(cli_settings().episode_db_url)
    except StoreError as exc:
        raise fail(str(exc)) from exc
