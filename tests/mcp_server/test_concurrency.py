"""Four `rlide serve` processes write into one SQLite log at once while a fifth process reads it
the way the training worker does: nothing is lost, duplicated or torn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from tests.conftest import StdioServer

SERVERS = 4
EPISODES_PER_SERVER = 6
STEPS_PER_EPISODE = 8  # list_episodes calls between start and the end
RECORDED_STEPS = STEPS_PER_EPISODE + 3  # + start_episode, give_feedback, end_episode


def _rating(server_no: int, episode_no: int) -> float:
    return round(-1 + (server_no * EPISODES_PER_SERVER + episode_no) / (SERVERS * EPISODES_PER_SERVER), 4)


def _drive(server: StdioServer, server_no: int) -> dict[str, float]:
    """One IDE session: K episodes of M steps, each rated and ended. Returns episode id -> rating."""
    server.initialize("2025-06-18")
    ratings: dict[str, float] = {}
    for episode_no in range(EPISODES_PER_SERVER):
        started = server.call_tool("start_episode", {"task": f"server {server_no} episode {episode_no}"})
        assert started["isError"] is False, started
        episode_id = started["structuredContent"]["episode_id"]
        for _ in range(STEPS_PER_EPISODE):
            assert server.call_tool("list_episodes", {"limit": 2})["isError"] is False
        rating = _rating(server_no, episode_no)
        feedback = server.call_tool("give_feedback", {"rating": rating, "episode_id": episode_id})
        assert feedback["isError"] is False, feedback
        ended = server.call_tool("end_episode", {"outcome": "success", "episode_id": episode_id})
        assert ended["isError"] is False, ended
        ratings[episode_id] = rating
    assert server.close() == 0, server.stderr()
    return ratings


# The training worker's pattern: poll the log, read every episode in full, until the expected
# number of finished episodes is there. It checks what it sees is never torn or going backwards.
READER = r"""
import json, sys, time
from episodes.store import EpisodeStore

url, expected, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = EpisodeStore.open(url)
seen, problems, polls, complete = {}, [], 0, 0
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    polls += 1
    complete = 0
    for episode in store.list_episodes(limit=10_000):
        detail = store.detail(episode.id)
        n = len(detail.steps)
        if n < episode.step_count or n < seen.get(episode.id, 0) or n > steps:
            problems.append(f"{episode.id}: {n} steps after {seen.get(episode.id)} (count {episode.step_count})")
        if [s.id for s in detail.steps] != sorted(s.id for s in detail.steps):
            problems.append(f"{episode.id}: steps out of order")
        seen[episode.id] = n
        if episode.status.value == "success" and n == steps and len(detail.rewards) == 2:
            complete += 1
    if complete == expected:
        break
    time.sleep(0.02)  # the worker's poll interval; not a synchronisation
print(json.dumps({"polls": polls, "complete": complete, "episodes": len(seen), "problems": problems[:20]}))
"""


def test_four_servers_and_a_reader_share_one_log(
    stdio_server: Callable[..., StdioServer], rlide_home: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{rlide_home / 'episodes.db'}"
    expected = SERVERS * EPISODES_PER_SERVER
    # All five processes open a fresh log at once: the migrations race too.
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, url, str(expected), str(RECORDED_STEPS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
        cwd=Path(__file__).parents[2],
    )
    servers = [stdio_server() for _ in range(SERVERS)]
    try:
        with ThreadPoolExecutor(SERVERS) as pool:
            futures = [pool.submit(_drive, server, n) for n, server in enumerate(servers)]
            ratings: dict[str, float] = {}
            for future in futures:
                ratings.update(future.result(timeout=120))
        out, err = reader.communicate(timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert reader.returncode == 0, err.decode()
    report = json.loads(out)
    assert report["problems"] == []
    assert report["complete"] == expected, report
    assert report["polls"] >= 1

    assert len(ratings) == expected
    store = EpisodeStore.open(url)
    try:
        assert store.integrity_check() == []
        episodes = store.list_episodes(limit=10_000)
        assert {e.id for e in episodes} == set(ratings), "an episode was lost or an implicit one appeared"
        for episode in episodes:
            detail = store.detail(episode.id)
            assert episode.status is EpisodeStatus.success
            assert episode.step_count == RECORDED_STEPS == len(detail.steps)
            assert [s.tool for s in detail.steps] == (
                ["start_episode"] + ["list_episodes"] * STEPS_PER_EPISODE + ["give_feedback", "end_episode"]
            )
            assert all(s.error is None for s in detail.steps)
            assert [(r.source, r.value) for r in detail.rewards] == [
                (RewardSource.feedback, ratings[episode.id]),
                (RewardSource.outcome, 1.0),
            ]
            assert episode.reward_total is not None
            assert abs(episode.reward_total - (ratings[episode.id] + 1.0) / 2) < 1e-9
        with store.db.transaction(write=False) as cur:
            assert cur.execute("SELECT COUNT(*) FROM steps").fetchone()[0] == expected * RECORDED_STEPS
            assert cur.execute("SELECT COUNT(*) FROM rewards").fetchone()[0] == expected * 2
            assert cur.execute("SELECT COUNT(*) FROM _migrations").fetchone()[0] >= 2
    finally:
        store.close()
