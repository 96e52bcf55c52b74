"""Curating the log (`EpisodeStore.delete_episode|relabel_episode|exclude_episode` and `rlide episodes
delete|relabel|exclude|include|history`): each is recorded, and an excluded episode reaches no export,
replay or training step. Real SQLite and PostgreSQL, the real CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from episodes.db import EpisodeNotFound, StoreError
from episodes.records import CurationAction, EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from mcp_server.cli.app import app
from mcp_server.settings import load_settings
from tests.logdata import external_episode, replayable
from training.data.export import export
from training.scenarios.base import scenarios_from_log

LONG = "x = 1\n" * 200
"""Long enough to be stored once per content in the `blobs` table."""


def _blob_count(store: EpisodeStore) -> int:
    with store.db.transaction(write=False) as cur:
        return int(cur.execute("SELECT COUNT(*) FROM blobs").fetchone()[0])


def _texts(store: EpisodeStore, episode_id: str, text: str) -> None:
    store.add_step(
        episode_id, tool="run_tests", arguments={"files": {"a.py": text}, "test_command": "pytest"},
        result_summary="1 failed", error=None, duration_ms=1,
    )  # fmt: skip


def test_deleting_takes_the_episode_and_the_texts_only_it_held(any_store: EpisodeStore) -> None:
    shared = external_episode(any_store, "keep me", 1.0)
    doomed = external_episode(any_store, "paste a secret by mistake", 1.0)
    _texts(any_store, shared, LONG)
    _texts(any_store, doomed, LONG)  # the same text: stored once, held by both
    _texts(any_store, doomed, "mine alone\n" * 200)
    assert _blob_count(any_store) == 2
    any_store.delete_episode(doomed, "had a token in it")
    with pytest.raises(EpisodeNotFound):
        any_store.get_episode(doomed)
    assert _blob_count(any_store) == 1  # the shared text stays for the other episode
    assert any_store.detail(shared).steps[-1].arguments["files"]["a.py"] == LONG
    with any_store.db.transaction(write=False) as cur:
        for table in ("steps", "rewards", "verifiers"):
            assert cur.execute(f"SELECT COUNT(*) FROM {table} WHERE episode_id = ?", (doomed,)).fetchone()[0] == 0
    [event] = any_store.curation_log(doomed)
    assert event.action is CurationAction.delete and event.detail["reason"] == "had a token in it"
    assert event.detail["task"] == "paste a secret by mistake"
    assert any_store.integrity_check() == []
    with pytest.raises(EpisodeNotFound):
        any_store.delete_episode(doomed)
    still_open = any_store.start_episode("in progress")
    with pytest.raises(StoreError, match="is open"):
        any_store.delete_episode(still_open.id)
    assert any_store.get_episode(still_open.id).status is EpisodeStatus.open


def test_relabelling_moves_the_outcome_and_the_reward(any_store: EpisodeStore) -> None:
    """A person's relabel is their word on the episode: its outcome and their rating, both evidence
    beside the measured tests."""
    episode = external_episode(any_store, "said it was done", 1.0)
    assert any_store.get_episode(episode).reward_total == 1.0
    relabelled = any_store.relabel_episode(episode, EpisodeStatus.failure, "the build was red")
    assert relabelled.status is EpisodeStatus.failure and relabelled.reward_total == pytest.approx((0.5 - 0.2) / 0.7)
    rewards = any_store.detail(episode).rewards
    assert [(r.source, r.value, r.verified) for r in rewards][-2:] == [
        (RewardSource.outcome, -1.0, False),
        (RewardSource.feedback, -1.0, True),
    ]
    assert "success -> failure: the build was red" in (rewards[-1].comment or "")
    assert any_store.relabel_episode(episode, EpisodeStatus.aborted).reward_total == pytest.approx(0.5 / 0.7)
    [first, second] = any_store.curation_log(episode)
    assert (first.detail["from"], first.detail["to"], second.detail["to"]) == ("success", "failure", "aborted")
    with pytest.raises(ValueError, match="relabel to one of success, failure, aborted"):
        any_store.relabel_episode(episode, EpisodeStatus.open)
    with pytest.raises(StoreError, match="is open"):
        any_store.relabel_episode(any_store.start_episode("going").id, EpisodeStatus.success)


def test_an_excluded_episode_reaches_no_export_replay_or_training(any_store: EpisodeStore) -> None:
    kept = external_episode(any_store, "fix the parser", 1.0)
    excluded = external_episode(any_store, "fix the lexer", 1.0)
    for episode in (kept, excluded):
        replayable(any_store, episode)
    assert {s.source_episode for s in scenarios_from_log(any_store)} == {kept, excluded}
    assert any_store.exclude_episode(excluded, reason="a user's private repo").excluded is True

    assert [e.id for e in any_store.terminal_episodes()] == [kept]
    assert {s.source_episode for s in scenarios_from_log(any_store)} == {kept}
    assert [e.id for e in any_store.runs.sft_candidates("default", min_reward=-1.0, limit=10)] == [kept]
    for fmt in ("sft", "dpo", "art"):
        out = io.StringIO()
        export(any_store, fmt, -1.0, out)
        assert excluded not in out.getvalue() and "fix the lexer" not in out.getvalue(), fmt
    assert any_store.get_episode(excluded).excluded  # still in the log, and listed
    assert excluded in {e.id for e in any_store.list_episodes()}

    any_store.exclude_episode(excluded, excluded=False, reason="asked and allowed")
    assert {e.id for e in any_store.terminal_episodes()} == {kept, excluded}
    actions = [e.action for e in any_store.curation_log(excluded)]
    assert actions == [CurationAction.exclude, CurationAction.include]


def test_the_cli_curates_and_says_what_it_did(rlide_home: Path) -> None:
    cli = CliRunner()
    store = EpisodeStore.open(load_settings().episode_db_url)
    first = external_episode(store, "rename the loader", 1.0)
    second = external_episode(store, "add a flag", -1.0, status=EpisodeStatus.failure)
    store.close()

    relabelled = cli.invoke(app, ["episodes", "relabel", second, "--status", "success", "--note", "it worked"])
    assert relabelled.exit_code == 0, relabelled.output
    assert f"{second} is now success, reward -0.43" in relabelled.stderr  # the tests still failed
    assert cli.invoke(app, ["episodes", "exclude", first, "--reason", "private"]).exit_code == 0
    listed = cli.invoke(app, ["episodes", "list"]).stdout
    assert "excluded" in next(line for line in listed.splitlines() if line.startswith(first))
    exported = cli.invoke(app, ["episodes", "export"]).stdout
    assert first not in exported and second in exported

    refused = cli.invoke(app, ["episodes", "delete", second], input="n\n")
    assert refused.exit_code != 0
    assert cli.invoke(app, ["episodes", "show", second]).exit_code == 0  # not deleted
    assert cli.invoke(app, ["episodes", "delete", second, "--yes"]).exit_code == 0
    gone = cli.invoke(app, ["episodes", "show", second])
    assert gone.exit_code == 1 and "no episode with id" in gone.stderr
    missing = cli.invoke(app, ["episodes", "exclude", "ep_nope"])
    assert missing.exit_code == 1 and "rlide episodes list" in missing.stderr

    history = json.loads(cli.invoke(app, ["episodes", "history", "--json"]).stdout)
    assert [(h["episode_id"], h["action"]) for h in history] == [
        (second, "relabel"),
        (first, "exclude"),
        (second, "delete"),
    ]
    human = cli.invoke(app, ["episodes", "history", second]).stdout
    assert "relabel" in human and "delete" in human and "note=it worked" in human
