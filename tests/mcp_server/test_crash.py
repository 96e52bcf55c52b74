"""kill -9 of a stdio server in the middle of an episode: every acknowledged call is on disk, the
log stays healthy, and the next server opens it and works."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from episodes.migrations import MIGRATIONS
from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from tests.conftest import StdioServer

ROUNDS = 5
ACKED_CALLS = 8
UNACKED_CALLS = 25


def _open_log(home: Path) -> EpisodeStore:
    return EpisodeStore.open(f"sqlite:///{home / 'episodes.db'}")


def test_sigkill_mid_episode_loses_no_acknowledged_step(
    stdio_server: Callable[..., StdioServer], rlide_home: Path
) -> None:
    acknowledged: dict[str, tuple[int, int]] = {}  # episode id -> (steps, feedback rewards) acknowledged
    for round_no in range(ROUNDS):
        server = stdio_server()
        server.initialize("2025-06-18")
        started = server.call_tool("start_episode", {"task": f"crash round {round_no}"})
        episode_id = started["structuredContent"]["episode_id"]
        steps, feedbacks = 1, 0
        for i in range(ACKED_CALLS):
            if i % 2:
                result = server.call_tool("give_feedback", {"rating": 0.1, "episode_id": episode_id})
                feedbacks += 1
            else:
                result = server.call_tool("list_episodes", {"limit": 3})
            assert result["isError"] is False, result
            steps += 1
        # In flight when the process dies: none of these may corrupt the log; any may be lost.
        in_flight = [
            server.send_request(
                "tools/call", {"name": "give_feedback", "arguments": {"rating": -0.1 if i % 2 else 0.2}}
            )
            for i in range(UNACKED_CALLS)
        ]
        # Kill once the server is busy with them, at a different point each round.
        server.wait_response(in_flight[round_no * 3])
        server.kill()
        steps += 1  # the call just answered
        feedbacks += 1
        acknowledged[episode_id] = (steps, feedbacks)

        store = _open_log(rlide_home)
        try:
            assert store.integrity_check() == []
            for known_id, (want_steps, want_feedbacks) in acknowledged.items():
                detail = store.detail(known_id)
                assert len(detail.steps) >= want_steps, (round_no, known_id)
                assert detail.episode.step_count == len(detail.steps)
                feedback = [r for r in detail.rewards if r.source is RewardSource.feedback]
                assert len(feedback) >= want_feedbacks, (round_no, known_id)
                # A killed server had no chance to close its episode.
                assert detail.episode.status is EpisodeStatus.open
                # Rows that made it are whole: the acknowledged prefix is exactly what was sent.
                assert [s.tool for s in detail.steps[: ACKED_CALLS + 1]] == ["start_episode"] + [
                    "give_feedback" if i % 2 else "list_episodes" for i in range(ACKED_CALLS)
                ]
        finally:
            store.close()

    # A fresh server opens the log left by five crashes and works normally.
    server = stdio_server()
    server.initialize("2025-11-25")
    listed = server.call_tool("list_episodes", {"limit": 50})
    assert {e["id"] for e in listed["structuredContent"]["episodes"]} >= set(acknowledged)
    episode_id = server.call_tool("start_episode", {"task": "after the crashes"})["structuredContent"]["episode_id"]
    assert server.call_tool("give_feedback", {"rating": 1.0})["isError"] is False
    ended = server.call_tool("end_episode", {"outcome": "success"})
    assert ended["structuredContent"]["episode"]["status"] == "success"
    # An episode left open by a crash can still be ended explicitly.
    crashed = next(iter(acknowledged))
    closed = server.call_tool("end_episode", {"outcome": "aborted", "episode_id": crashed})
    assert closed["isError"] is False, closed
    assert server.close() == 0

    store = _open_log(rlide_home)
    try:
        assert store.integrity_check() == []
        final = store.detail(episode_id)
        assert final.episode.status is EpisodeStatus.success
        assert [s.tool for s in final.steps] == ["start_episode", "give_feedback", "end_episode"]
        assert store.get_episode(crashed).status is EpisodeStatus.aborted
    finally:
        store.close()


def test_sigkill_during_startup_leaves_a_log_that_opens(
    stdio_server: Callable[..., StdioServer], rlide_home: Path
) -> None:
    """Killed while creating and migrating a fresh log (or just after): the migrations run in one
    transaction, so the next opener finds either nothing or a complete schema."""
    for round_no in range(4):
        server = stdio_server()
        if round_no % 2:
            server.initialize()  # the log exists and is migrated by now
        else:
            server.send_request(
                "initialize",
                {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "k", "version": "0"}},
            )
        server.kill()
    store = _open_log(rlide_home)
    try:
        assert store.integrity_check() == []
        with store.db.transaction(write=False) as cur:
            names = [row[0] for row in cur.execute("SELECT name FROM _migrations ORDER BY name").fetchall()]
        assert names == sorted(m.name for m in MIGRATIONS)
        assert store.list_episodes() == []
        episode = store.start_episode("after startup crashes")
        assert store.get_episode(episode.id).task == "after startup crashes"
    finally:
        store.close()
