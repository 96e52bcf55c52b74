"""Helpers every `rlide` command group shares: settings, errors, JSON and terminal output, the episode log."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcp_server.settings import Settings, load_settings

if TYPE_CHECKING:
    from episodes.store import EpisodeStore


JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


class SftViewChoice(StrEnum):
    """`training.data.export.SftView`, as `episodes export --view` and `train --sft-view` take it."""

    trace = "trace"
    answer = "answer"


def cli_settings() -> Settings:
    try:
        return load_settings()
    except ValueError as exc:  # pydantic ValidationError, SettingsError (a variable not JSON), a bad path
        raise typer.BadParameter(f"invalid rlide settings (RLIDE_* variables or rlide.toml):\n{exc}") from exc


def http_settings(host: str | None, port: int | None) -> Settings:
    """The settings with `--host`/`--port` applied, logging configured (`serve --http`, `dashboard`)."""
    overrides: dict[str, Any] = {}
    if host is not None:
        overrides["http_host"] = host
    if port is not None:
        overrides["http_port"] = port
    settings = cli_settings().model_copy(update=overrides)
    from mcp_server.logs import configure_logging

    configure_logging(settings)
    return settings


def echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _caret(code: int) -> str:
    return "^?" if code == 0x7F else "^" + chr(code + 0x40)


# What `cat -v` shows for control characters (^[ for ESC, ^M for CR, M-^[ for the C1 controls that
# some terminals take as ESC [), and bidirectional overrides as <U+202E>: a program's output must
# not retitle, clear or rewrite the user's terminal, reach their clipboard (OSC 52), or hide text.
_VISIBLE = {code: _caret(code) for code in [*range(0x20), 0x7F] if chr(code) not in "\n\t"}
_VISIBLE.update({code: "M-" + _caret(code - 0x80) for code in range(0x80, 0xA0)})
_VISIBLE.update({code: f"<U+{code:04X}>" for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]})


def visible(text: str) -> str:
    """`text` safe to print on a terminal: control characters but newline and tab made visible."""
    return text.translate(_VISIBLE)


def fail(message: str) -> typer.Exit:
    """Print `error: message` on stderr; raise what this returns to exit with status 1."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code=1)


def open_store() -> EpisodeStore:
    from episodes.db import StoreError
    from episodes.store import EpisodeStore

    try:
        settings = cli_settings()
        return EpisodeStore.open(settings.episode_db_url, settings.weights, train_unverified=settings.train_unverified)
    except StoreError as exc:
        raise fail(str(exc)) from exc
