"""Every action of the dashboard is also a command: rate, prefer, preferences and the list's filters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from episodes.records import CurationAction, RewardSource, Verdict
from episodes.store import EpisodeStore
from mcp_server.cli.app import app
from tests.mcp_server.dashboard.seed import Seeded, seed

runner = CliRunner()


@pytest.fixture
def log(rlide_home: Path) -> Iterator[tuple[EpisodeStore, Seeded]]:
    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    yield store, seed(store)
    store.close()


def test_rate_prefer_and_list_preferences(log: tuple[EpisodeStore, Seeded]) -> None:
    store, ids = log
    rated = runner.invoke(app, ["episodes", "rate", "--comment", "slow", "--author", "ana", ids.good, "--", "-0.5"])
    assert rated.exit_code == 0, rated.output
    assert "rated" in rated.stderr and rated.stdout == ""
    assert store.get_episode(ids.good).reward_components[RewardSource.feedback] == -0.5
    [event] = [c for c in store.curation_log(ids.good) if c.action is CurationAction.rate]
    assert event.detail["author"] == "ana"

    preferred = runner.invoke(app, ["episodes", "prefer", ids.good, ids.bad, "--better", "both-bad"])
    assert preferred.exit_code == 0, preferred.output
    [preference] = store.preferences.list()
    assert preference.verdict is Verdict.both_bad and preference.author  # the user running the command
    listed = runner.invoke(app, ["episodes", "preferences", ids.bad, "--json"])
    assert [p["verdict"] for p in json.loads(listed.stdout)] == ["both_bad"]


def test_bad_actions_fail_clearly_and_change_nothing(log: tuple[EpisodeStore, Seeded]) -> None:
    store, ids = log
    for command, says in [
        (["episodes", "rate", ids.good, "2"], "less than or equal to 1"),
        (["episodes", "rate", "ep_nothere00000000000000", "1"], "episodes list"),
        (["episodes", "prefer", ids.good, ids.hostile, "--better", "a"], "not of one situation"),
        (["episodes", "prefer", ids.good, ids.bad, "--better", "c"], "--better"),
        (["episodes", "rate", ids.good, "1", "--author", " "], "author"),
    ]:
        result = runner.invoke(app, command)
        assert result.exit_code in (1, 2) and says in result.output, (command, result.output)
    assert store.preferences.list() == [] and not [
        r for r in store.detail(ids.good).rewards if r.source is RewardSource.feedback
    ]


def test_list_filters(log: tuple[EpisodeStore, Seeded]) -> None:
    store, ids = log

    def listed(*options: str) -> list[str]:
        result = runner.invoke(app, ["episodes", "list", "--json", *options])
        assert result.exit_code == 0, result.output
        return [e["id"] for e in json.loads(result.stdout)]

    assert listed("--search", "calc.py", "--min-reward", "0.5") == [ids.good]
    assert listed("--source", "policy") == [ids.policy]
    assert set(listed("--max-reward", "0")) == {ids.bad}
    store.exclude_episode(ids.bad)
    assert listed("--excluded") == [ids.bad]
    assert ids.bad not in listed("--included")
    assert len(listed("--limit", "2")) == 2 and listed("--limit", "2", "--offset", "4") == [ids.good]
    bad = runner.invoke(app, ["episodes", "list", "--min-reward", "0.5", "--max-reward", "0"])
    assert bad.exit_code == 1 and "above max_reward" in bad.stderr
