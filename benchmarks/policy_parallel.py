"""N agents calling a cpu policy endpoint at once: requests decoded together (`TransformersEngine`'s
batches) against the same engine answering one at a time (`max_batch=1`), in the same run.

Each of `--agents` threads sends `--calls` chat completions in a row (an agent's turns), each a
different short coding prompt, `--max-tokens` tokens at temperature 0.8 (no seed: what agents send).
Prints JSON: per mode, completions/s, generated tokens/s, and p50/p99 seconds per completion, plus
the batch sizes the engine formed. Run it on a quiet machine:

    python benchmarks/policy_parallel.py --model qwen2.5-coder-0.5b-instruct --agents 4 --calls 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ASKS = [
    "Write a Python function that reverses a string.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain what a Python generator is in one sentence.",
    "Write a Python function that checks whether a number is prime.",
    "Write a Python function that flattens a nested list.",
    "Name three uses of Python's itertools module.",
    "Write a Python function that counts vowels in a string.",
    "Write a Python function that merges two sorted lists.",
]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_mode(engine: Any, agents: int, calls: int, max_tokens: int) -> dict[str, Any]:
    engine.batch_sizes.clear()
    latencies: list[float] = []
    tokens = 0

    def agent(index: int) -> list[tuple[float, int]]:
        done = []
        for call in range(calls):
            text = ASKS[(index * calls + call) % len(ASKS)]
            began = time.perf_counter()
            answer = engine.complete(
                [{"role": "user", "content": text}],
                n=1,
                max_tokens=max_tokens,
                temperature=0.8,
                seed=None,
                tools=None,
            )
            done.append((time.perf_counter() - began, len(answer.completion_token_ids[0])))
        return done

    began = time.perf_counter()
    with ThreadPoolExecutor(agents) as pool:
        for done in pool.map(agent, range(agents)):
            for seconds, count in done:
                latencies.append(seconds)
                tokens += count
    wall = time.perf_counter() - began
    return {
        "wall_s": round(wall, 2),
        "completions_per_s": round(len(latencies) / wall, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "p50_s": round(statistics.median(latencies), 2),
        "p99_s": round(_percentile(latencies, 0.99), 2),
        "batches": {str(size): count for size, count in sorted(engine.batch_sizes.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-qwen2", help="the student's base model (a packaged name or folder)")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3, help="completions each agent asks for, one after another")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the endpoint's default)")
    args = parser.parse_args()

    from training.backends.base import BackendConfig
    from training.gateway.engines import TransformersEngine, serving_threads

    threads = args.threads or serving_threads()
    with tempfile.TemporaryDirectory() as home:
        config = BackendConfig(path=Path(home) / "art", base_model=args.model)
        engine = TransformersEngine(config, reload_interval_s=3600.0, threads=threads)
        engine.complete([{"role": "user", "content": "Hi"}], n=1, max_tokens=4, temperature=0.0, seed=None, tools=None)
        results: dict[str, Any] = {}
        for mode, size in (("one_at_a_time", 1), ("batched", 8), ("one_at_a_time_again", 1)):
            engine.max_batch = size
            results[mode] = run_mode(engine, args.agents, args.calls, args.max_tokens)
            print(f"{mode}: {results[mode]}", file=sys.stderr, flush=True)
    sequential = results["one_at_a_time"]["completions_per_s"]
    report = {
        "benchmark": "policy_parallel",
        "model": args.model,
        "agents": args.agents,
        "calls_per_agent": args.calls,
        "max_tokens": args.max_tokens,
        "torch_threads": threads,
        "modes": results,
        "throughput_ratio_batched_vs_one_at_a_time": round(results["batched"]["completions_per_s"] / sequential, 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
