"""A small episode log for the dashboard's tests: two attempts at one task (one fixed, with a monitor
flag, one not), an episode whose task is hostile HTML, a policy episode with sampled tokens, and a
long one."""

from __future__ import annotations

from dataclasses import dataclass

from episodes.records import EpisodeStatus, RewardSource, StateKind
from episodes.store import EpisodeStore
from tests.logdata import policy_episode

TASK = "Fix the failing test in calc.py: add() subtracts"
HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script> tidy the README'
FIX = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
WRONG = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return 5\n"


@dataclass(frozen=True)
class Seeded:
    good: str
    bad: str
    hostile: str
    policy: str
    long: str


def _attempt(store: EpisodeStore, diff: str, *, passed: bool) -> str:
    episode = store.start_episode(TASK, workspace="/tmp/calc")
    store.add_step(
        episode.id,
        tool="search_code",
        arguments={"query": "def add"},
        result_summary="calc.py:1 def add(a, b)",
        error=None,
        duration_ms=12.0,
    )
    store.add_step(
        episode.id,
        tool="run_tests",
        arguments={"command": "pytest -q"},
        result_summary=("1 passed" if passed else "1 failed") + "\n" + "x" * 5_000,
        error=None,
        duration_ms=850.0,
    )
    store.add_workspace_state(episode.id, StateKind.start, commit="abc123", files={}, omitted=[], diff="")
    store.add_workspace_state(
        episode.id,
        StateKind.end,
        commit="abc123",
        files={"calc.py": "def add(a, b):\n    return a + b\n"},
        omitted=[],
        diff=diff,
        solution=diff,
    )
    store.add_reward(episode.id, RewardSource.tests, 1.0 if passed else -1.0, "verified", verified=True)
    store.end_episode(episode.id, EpisodeStatus.success if passed else EpisodeStatus.failure, "done")
    return episode.id


def seed(store: EpisodeStore) -> Seeded:
    good = _attempt(store, FIX, passed=True)
    store.add_flags(
        good, [("touches_tests", "tests/test_calc.py", None, "the agent changed a test: a person reads it")]
    )
    bad = _attempt(store, WRONG, passed=False)
    hostile = store.start_episode(HOSTILE).id
    store.end_episode(hostile, EpisodeStatus.aborted)
    policy = policy_episode(store, "Write a number.", 1.0)
    long = store.start_episode("A long session").id
    for i in range(200):
        store.add_step(
            long, tool="run_code", arguments={"code": f"print({i})"}, result_summary=str(i), error=None, duration_ms=1.0
        )
    store.end_episode(long, EpisodeStatus.success)
    return Seeded(good=good, bad=bad, hostile=hostile, policy=policy, long=long)
