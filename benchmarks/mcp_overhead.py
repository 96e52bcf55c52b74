"""Per-call overhead of rlide over a bare MCPServer, over stdio, in one run. Prints JSON.

Three servers expose the same trivial `echo` tool and run as stdio subprocesses:
  bare          a plain `MCPServer` (the baseline)
  rlide         rlide's server (recording middleware, episode log in a temp RLIDE_HOME)
  rlide-nolog   rlide's server with the recording middleware removed (isolates logging's cost)
Rounds alternate between servers so machine drift hits all of them alike. The cost of logging is
also measured directly: `EpisodeStore.add_step` per call, in process.

    python benchmarks/mcp_overhead.py [--calls 2000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

VARIANTS = ("bare", "rlide", "rlide-nolog")


async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def serve(variant: str) -> None:
    """Child process: serve one variant over stdio."""
    if variant == "bare":
        from mcp.server.mcpserver import MCPServer

        bare: MCPServer = MCPServer("bare")
        bare.add_tool(echo)
        bare.run("stdio")
        return
    from mcp_server.logs import configure_logging
    from mcp_server.middleware import RecordingMiddleware
    from mcp_server.server import build_server
    from mcp_server.settings import load_settings

    settings = load_settings(log_level="WARNING")
    configure_logging(settings)
    server = build_server(settings)
    server.add_tool(echo)
    if variant == "rlide-nolog":
        server.middleware[:] = [m for m in server.middleware if not isinstance(m, RecordingMiddleware)]
    server.run("stdio")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _time_calls(variant: str, calls: int, home: str) -> list[float]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        # -P: keep benchmarks/ off sys.path, where benchmarks/envpool.py would shadow the envpool package.
        args=["-P", __file__, "--serve", variant],
        env={**os.environ, "RLIDE_HOME": home, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    timings: list[float] = []
    async with Client(params, mode="legacy") as client:
        for _ in range(50):  # warm-up: imports, first episode, SQLite page cache
            await client.call_tool("echo", {"text": "hi"})
        for _ in range(calls):
            start = time.perf_counter()
            result = await client.call_tool("echo", {"text": "hi"})
            timings.append((time.perf_counter() - start) * 1e6)
            assert not result.is_error
    return timings


def _store_add_step_us(n: int) -> dict[str, float]:
    from episodes.store import EpisodeStore

    with tempfile.TemporaryDirectory() as home:
        store = EpisodeStore.open(f"sqlite:///{home}/e.db")
        episode = store.start_episode("bench")
        samples = []
        for i in range(n):
            start = time.perf_counter()
            store.add_step(
                episode.id, tool="echo", arguments={"text": f"hi {i}"}, result_summary="hi", error=None, duration_ms=0.1
            )
            samples.append((time.perf_counter() - start) * 1e6)
        store.close()
    return {"p50_us": statistics.median(samples), "p99_us": _percentile(samples, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per server per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--serve", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return

    samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as home:
        for _ in range(args.rounds):
            for variant in VARIANTS:
                samples[variant] += anyio.run(_time_calls, variant, args.calls, home)

    def stats(values: list[float]) -> dict[str, float]:
        return {
            "p50_us": round(statistics.median(values), 1),
            "p99_us": round(_percentile(values, 0.99), 1),
            "mean_us": round(statistics.fmean(values), 1),
        }

    figures = {v: stats(samples[v]) for v in VARIANTS}
    bare, rlide, nolog = (figures[v]["p50_us"] for v in VARIANTS)
    report = {
        "benchmark": "mcp_overhead",
        "transport": "stdio, protocol 2025-11-25 (SDK client)",
        "calls_per_server": args.calls * args.rounds,
        "servers": figures,
        "rlide_over_bare_p50": round(rlide / bare, 3),
        "rlide_over_bare_p99": round(figures["rlide"]["p99_us"] / figures["bare"]["p99_us"], 3),
        "logging_cost_per_call_us": {
            "end_to_end_p50": round(rlide - nolog, 1),
            "store_add_step": {k: round(v, 1) for k, v in _store_add_step_us(2000).items()},
        },
        "goals": {"rlide_over_bare": "<= 1.2", "logging_per_call_ms": "<= 0.5"},
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
