"""How the episode log grows with a long agent session. Prints JSON.

Two sessions, each written through the store's real write path into a fresh SQLite log:
  steps   `run_tests` calls that each send the whole workspace (50 files, ~200 KB) with one file
          edited since the last call, as an IDE agent does
  turns   policy turns of one conversation that grows by an answer and a tool result per turn
          (prompt ids: the last prompt and completion plus 40 new tokens), as the policy endpoint
          records them (each after the context of the one before)
For each: bytes the log grows by per call/turn, first quarter against last quarter (flat means
the log grows with what is new, not with the session's length), and the time to write and to
read the session back whole.

    python benchmarks/episode_log.py [--calls 40]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from episodes.policy_turns import EncodedTurn  # noqa: E402
from episodes.records import EpisodeSource  # noqa: E402
from episodes.run_records import TurnContext  # noqa: E402
from episodes.store import EpisodeStore  # noqa: E402


def log_bytes(path: str) -> int:
    """The log file's size with its write-ahead log folded in (a WAL file is reused, not grown)."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return os.path.getsize(path)


def growth(sizes: list[int]) -> dict[str, float]:
    """Bytes per call over the first and the last quarter of the session."""
    steps = [b - a for a, b in zip(sizes, sizes[1:], strict=False)]
    quarter = max(len(steps) // 4, 1)
    return {
        "bytes_per_call_first_quarter": round(statistics.mean(steps[:quarter])),
        "bytes_per_call_last_quarter": round(statistics.mean(steps[-quarter:])),
    }


def steps_session(calls: int) -> dict[str, Any]:
    path = os.path.join(tempfile.mkdtemp(), "episodes.db")
    store = EpisodeStore.open(path)
    episode = store.start_episode("make the tests pass")
    files = {f"pkg/mod_{i}.py": f"# module {i}\n" + "def f(x):\n    return x + 1\n" * 150 for i in range(50)}
    sizes, write_s = [log_bytes(path)], 0.0
    for call in range(calls):
        files[f"pkg/mod_{call % 50}.py"] += f"# edit {call}\n"
        started = time.perf_counter()
        store.add_step(
            episode.id,
            tool="run_tests",
            arguments={"files": dict(files), "test_command": "python -m pytest -q"},
            result_summary="3 passed",
            error=None,
            duration_ms=120,
        )
        write_s += time.perf_counter() - started
        sizes.append(log_bytes(path))
    started = time.perf_counter()
    detail = store.detail(episode.id)
    read_s = time.perf_counter() - started
    assert detail.steps[-1].arguments["files"] == files  # read back whole
    store.close()
    return {
        "calls": calls,
        "workspace_bytes": sum(len(text) for text in files.values()),
        **growth(sizes),
        "log_bytes": sizes[-1],
        "write_ms_per_call": round(write_s / calls * 1e3, 2),
        "read_session_ms": round(read_s * 1e3, 1),
    }


def turns_session(calls: int) -> dict[str, Any]:
    path = os.path.join(tempfile.mkdtemp(), "episodes.db")
    store = EpisodeStore.open(path)
    episode = store.start_episode("fix the parser", source=EpisodeSource.policy)
    context: TurnContext | None = store.turns.turn_context(episode.id)
    line = "    result = compute_reward(episode, verifier=tests)  # check the tool output here\n"
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the parser.\n" + line * 20}]
    prompt = list(range(600))
    sizes, write_s = [log_bytes(path)], 0.0
    for turn in range(calls):
        completion = [(turn * 31 + i) % 32000 for i in range(60)]
        choice = {"__choice__": {"index": 0, "message": {"role": "assistant", "content": f"step {turn}"}}}
        started = time.perf_counter()
        encoded = EncodedTurn.of(
            model="student@0",
            request={"messages": list(messages), "tools": None, "params": {"max_tokens": 256}},
            choice=choice,
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            after=context,
        )
        turn_id = store.turns.add_policy_turn(episode.id, encoded, open_policy_only=True)
        write_s += time.perf_counter() - started
        context = encoded.context(turn_id)
        sizes.append(log_bytes(path))
        messages += [
            {"role": "assistant", "content": f"step {turn}"},
            {"role": "tool", "content": f"output of step {turn}\n" + line * 8},
        ]
        prompt = [*prompt, *completion, *range(40)]
    started = time.perf_counter()
    turns = store.turns.policy_turns(episode.id)
    read_s = time.perf_counter() - started
    assert len(turns[-1].prompt_token_ids or []) == len(prompt) - 60 - 40  # read back whole
    store.close()
    return {
        "turns": calls,
        "last_prompt_tokens": len(turns[-1].prompt_token_ids or []),
        **growth(sizes),
        "log_bytes": sizes[-1],
        "write_ms_per_turn": round(write_s / calls * 1e3, 2),
        "read_session_ms": round(read_s * 1e3, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    args = parser.parse_args()
    out = {
        "benchmark": "episode_log",
        "cpus": os.cpu_count(),
        "steps": steps_session(args.calls),
        "policy_turns": turns_session(args.calls),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
