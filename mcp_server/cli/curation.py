"""`rlide episodes delete|relabel|exclude|include|rate|prefer|preferences|history`: a person
curating the episode log, as the dashboard does.

Each action goes through `EpisodeStore` (the same methods serve the Python API and the dashboard)
and is recorded in the log's `curation` table, a deletion included; an excluded episode stays in
the log but is never exported, replayed or trained on."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import typer

from mcp_server.cli.common import JsonFlag, echo_json, fail, open_store

Reason = Annotated[str | None, typer.Option(help="Why, kept in the log's curation history.")]
Author = Annotated[str | None, typer.Option(help="Who judges (default: your user name).")]


class Outcome(StrEnum):
    success = "success"
    failure = "failure"
    aborted = "aborted"


def _with_store(action: Callable[[Any], Any]) -> Any:
    from episodes.db import EpisodeNotFound, StoreError

    store = open_store()
    try:
        return action(store)
    except EpisodeNotFound as exc:
        raise fail(f"{exc}; `rlide episodes list` shows valid ids") from exc
    except (StoreError, ValueError) as exc:
        raise fail(str(exc)) from exc
    finally:
        store.close()


def delete(
    episode_id: str,
    reason: Reason = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete an ended episode: its steps, rewards, turns, and the texts no other episode shares."""
    episode = _with_store(lambda store: store.get_episode(episode_id))
    if not yes:
        typer.confirm(f"delete {episode.id} ({episode.status.value}: {episode.task[:60]!r})?", abort=True, err=True)
    _with_store(lambda store: store.delete_episode(episode_id, reason))
    typer.echo(f"deleted {episode_id}", err=True)


def relabel(
    episode_id: str,
    status: Annotated[Outcome, typer.Option(help="How the episode really ended.")],
    note: Annotated[str | None, typer.Option(help="Why, kept with the relabel.")] = None,
) -> None:
    """Say how an ended episode really ended; its outcome reward follows."""
    from episodes.records import EpisodeStatus

    episode = _with_store(lambda store: store.relabel_episode(episode_id, EpisodeStatus(status.value), note))
    reward = "-" if episode.reward_total is None else f"{episode.reward_total:+.2f}"
    typer.echo(f"{episode.id} is now {episode.status.value}, reward {reward}", err=True)


def exclude(episode_id: str, reason: Reason = None) -> None:
    """Keep an episode out of every export, replay and training step (it stays in the log)."""
    _with_store(lambda store: store.exclude_episode(episode_id, excluded=True, reason=reason))
    typer.echo(f"excluded {episode_id}", err=True)


def include(episode_id: str, reason: Reason = None) -> None:
    """Undo `exclude`."""
    _with_store(lambda store: store.exclude_episode(episode_id, excluded=False, reason=reason))
    typer.echo(f"included {episode_id}", err=True)


def clear_flags(episode_id: str, author: Author = None, comment: Reason = None) -> None:
    """Say you read a flagged episode's change (`rlide episodes show` lists the monitor's flags): it may
    be trained on again. Its reward is unchanged."""
    who = _author(author)
    cleared = _with_store(lambda store: store.clear_flags(episode_id, author=who, comment=comment))
    typer.echo(
        f"cleared {cleared} flags of {episode_id}" if cleared else f"{episode_id} has no flag to clear", err=True
    )


def _author(author: str | None) -> str:
    import getpass

    return author if author is not None else getpass.getuser()


def rate(
    episode_id: str,
    value: Annotated[float, typer.Argument(min=-1.0, max=1.0, help="From -1 (bad) to 1 (good).")],
    comment: Annotated[str | None, typer.Option(help="What was good or bad.")] = None,
    author: Author = None,
) -> None:
    """Rate an episode: its feedback reward component, kept with its author."""

    def rate_and_read(store: Any) -> Any:
        store.rate_episode(episode_id, value, comment, author=_author(author))
        return store.get_episode(episode_id)

    episode = _with_store(rate_and_read)
    reward = "-" if episode.reward_total is None else f"{episode.reward_total:+.2f}"
    typer.echo(f"rated {episode_id} {value:+.2f}; its reward is now {reward}", err=True)


class VerdictChoice(StrEnum):
    a = "a"
    b = "b"
    both_bad = "both-bad"


def prefer(
    episode_a: str,
    episode_b: str,
    better: Annotated[
        VerdictChoice,
        typer.Option(help="a: the first was better; b: the second; both-bad: neither is good."),
    ],
    comment: Annotated[str | None, typer.Option(help="Why.")] = None,
    author: Author = None,
) -> None:
    """Say which of two episodes of one task was better: DPO trains on human preferences first."""
    from episodes.records import Verdict

    verdict = Verdict(better.value.replace("-", "_"))
    _with_store(
        lambda store: store.preferences.prefer(episode_a, episode_b, verdict, author=_author(author), comment=comment)
    )
    typer.echo(f"recorded: {better.value} ({episode_a} vs {episode_b})", err=True)


def preferences(
    episode_id: Annotated[str | None, typer.Argument(help="Only those involving this episode.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """The human preferences in the log, oldest first."""
    found = _with_store(lambda store: store.preferences.list(episode_id))
    if as_json:
        echo_json([p.model_dump(mode="json") for p in found])
        return
    for p in found:
        typer.echo(f"{p.created_at:%Y-%m-%d %H:%M}  {p.episode_a} vs {p.episode_b}  {p.verdict.value:<8} by {p.author}")


def history(
    episode_id: Annotated[str | None, typer.Argument(help="Only this episode (a deleted one too).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """What people did to the log: deletions, relabels, exclusions, oldest first."""
    events = _with_store(lambda store: store.curation_log(episode_id))
    if as_json:
        echo_json([event.model_dump(mode="json") for event in events])
        return
    for event in events:
        detail = ", ".join(f"{key}={value}" for key, value in event.detail.items() if value is not None)
        typer.echo(f"{event.created_at:%Y-%m-%d %H:%M}  {event.episode_id}  {event.action.value:<8} {detail}")


def register(episodes_app: typer.Typer) -> None:
    for command in (delete, relabel, exclude, include, rate, prefer, preferences, history):
        episodes_app.command()(command)
    episodes_app.command("clear-flags")(clear_flags)
