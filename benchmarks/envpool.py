"""Sandbox and pool throughput. Prints one JSON object on stdout.

- per-run cost of a trivial Python program (`pass`) for each backend, end to end as seen by the
  caller (p50/p99 ms), next to a bare `python3 -c pass` start and one without site (`-I -S`,
  as the sandbox's interpreter runs), and the differences ("overhead"),
  measured in interleaved rounds after a warm-up so that drift in machine speed hits all alike;
- HumanEval-164 canonical solutions, runs/s (median of --passes interleaved passes): a plain serial
  loop over one warm sandbox, a thread pool over that same sandbox object, the same thread pool
  judging each solution with the value verifier (what every pool step does: `_verified`), and the
  pufferlib-vectorized EnvPool (gym send/recv), with the best pool's ratio to both thread pools;
- seconds from `EnvPool(...)` until its first job is answered, for the first pool of the process
  (what the MCP server's first `run_code` waits for beyond its imports) and for two later ones.

Usage: python benchmarks/envpool.py [--runs 200] [--threads 8] [--envs 8] [--passes 5] [--pool-start-only]
       python benchmarks/envpool.py --baseline REF [--rounds 2] [...]

With `--baseline REF` (a git ref), the whole benchmark runs in child processes, alternately on
`envpool/` as it was at REF and as it is in the working tree (ABAB, the first variant swapped each
round), so that drift in machine speed hits both alike; it prints every round's figures and, per
figure, the median of each variant's rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# Run as a script, this file's folder is sys.path[0] and this file would shadow the `envpool`
# package it measures: drop that entry before importing it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import anyio  # noqa: E402
import numpy as np  # noqa: E402
import structlog  # noqa: E402

from envpool.env import encode_bytes  # noqa: E402
from envpool.pool import EnvPool  # noqa: E402
from envpool.sandbox import make_sandbox  # noqa: E402
from envpool.sandbox.base import RunRequest, RunStatus, Sandbox, SandboxUnavailable  # noqa: E402
from envpool.tasks import load_humaneval  # noqa: E402
from envpool.verifiers.values import judge  # noqa: E402

BASE_PYTHON = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}")


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
    }


def timed(fn: Callable[[], Any], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


def bare_python_once(*flags: str) -> None:
    subprocess.run([BASE_PYTHON, *flags, "-c", "pass"], check=True)


def trivial_runs(runs: int, rounds: int = 5) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Bare `python3 -c pass` and a trivial run in each backend, measured in interleaved rounds so
    that drift in the machine's speed (large on this shared VM) hits every figure alike. Each
    sandbox gets 20 warm-up runs first."""
    boxes: dict[str, Sandbox] = {}
    report: dict[str, Any] = {}
    req = RunRequest(code="pass")
    for name in ("bwrap", "bwrap-fresh", "unsafe-local", "docker"):
        try:
            sb = make_sandbox(name)
        except SandboxUnavailable as exc:
            report[name] = {"skipped": str(exc)}
            continue
        first = sb.run(req)
        if first.status is not RunStatus.OK:
            report[name] = {"skipped": f"trivial run failed: {first.status.value} {first.detail}"}
            sb.close()
            continue
        for _ in range(2 if name.endswith("fresh") else 20):
            sb.run(req)
        boxes[name] = sb
    bare_python_once()
    samples: dict[str, list[float]] = {"bare": [], "bare_isolated": [], **{name: [] for name in boxes}}
    try:
        for _ in range(rounds):
            samples["bare"] += timed(bare_python_once, max(4, runs // (4 * rounds)))
            # Without site: a .pth file of the interpreter (this machine's imports certifi, ~90 ms) is
            # no part of a start the sandbox makes, whose interpreter runs -I -S as well.
            without_site = functools.partial(bare_python_once, "-I", "-S")
            samples["bare_isolated"] += timed(without_site, max(4, runs // (4 * rounds)))
            for name, sb in boxes.items():
                n = runs if not name.endswith("fresh") else max(20, runs // 5)
                samples[name] += timed(functools.partial(sb.run, req), max(1, n // rounds))
    finally:
        for sb in boxes.values():
            sb.close()
    bare, isolated = percentiles(samples["bare"]), percentiles(samples["bare_isolated"])
    for name in boxes:
        stats: dict[str, Any] = percentiles(samples[name])
        stats["runs"] = len(samples[name])
        stats["overhead_vs_bare_p50_ms"] = round(stats["p50_ms"] - bare["p50_ms"], 3)
        stats["overhead_vs_bare_isolated_p50_ms"] = round(stats["p50_ms"] - isolated["p50_ms"], 3)
        report[name] = stats
    bares = {"python3 -c pass": bare, "python3 -I -S -c pass": isolated}
    return bares, {name: report[name] for name in ("bwrap", "bwrap-fresh", "unsafe-local", "docker")}


def humaneval_rates(sb: Sandbox, threads: int, envs: int, passes: int) -> dict[str, float]:
    """Median runs/s over `passes` passes of HumanEval-164 for each way of running it, the passes of
    all ways interleaved (after warm-up passes) so that drift in machine speed hits every way alike:
    a plain serial loop over one warm sandbox, a thread pool over that same sandbox object running
    each solution as one program (exit status), the same thread pool judging each solution with the
    value verifier as a `CodingEnv` step does, and the pufferlib-vectorized EnvPool (gym
    send/recv) in sync and async-half batches."""
    tasks = load_humaneval()

    def serial() -> float:
        t0 = time.perf_counter()
        for task in tasks:
            assert sb.run(task.request(task.canonical_solution)).ok, task.task_id
        return len(tasks) / (time.perf_counter() - t0)

    def verify(task: Any) -> bool:
        def run(program: str, timeout_s: float) -> tuple[bool, str]:
            result = sb.run(RunRequest(code=program, timeout_s=timeout_s, memory_mb=task.memory_mb))
            return result.ok, result.stdout

        return judge(task, task.canonical_solution, run).passed

    with contextlib.ExitStack() as stack:
        ex = stack.enter_context(ThreadPoolExecutor(threads))

        def threaded() -> float:
            t0 = time.perf_counter()
            results = list(ex.map(lambda t: sb.run(t.request(t.canonical_solution)), tasks))
            assert all(r.ok for r in results)
            return len(tasks) / (time.perf_counter() - t0)

        def threaded_verified() -> float:
            t0 = time.perf_counter()
            assert all(ex.map(verify, tasks))
            return len(tasks) / (time.perf_counter() - t0)

        runners: dict[str, Callable[[], float]] = {
            "serial_loop": serial,
            f"thread_pool_{threads}": threaded,
            f"thread_pool_{threads}_verified": threaded_verified,
        }
        for name, batch in ((f"pufferlib_pool_{envs}_sync", envs), (f"pufferlib_pool_{envs}_async_half", envs // 2)):
            pool = stack.enter_context(EnvPool(num_envs=envs, num_workers=envs, batch_size=batch))
            runners[name] = pool_pass(pool, {t.task_id: t for t in tasks})
        # Warm-up: the pools' sandboxes start on their first programs, and each worker records the
        # calls of a task's check the first time it serves it. Env i of 8 serves the tasks i mod 8
        # in one pass and i+4 mod 8 in the next (164 = 4 mod 8): two passes record them all.
        for _ in range(2):
            for run_pass in runners.values():
                run_pass()
        rates: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(passes):
            for name, run_pass in runners.items():
                rates[name].append(run_pass())
    report = {name: round(statistics.median(r), 1) for name, r in rates.items()}
    report.update({f"{name}_spread": round(max(r) - min(r), 1) for name, r in rates.items()})
    return report


def pool_pass(pool: EnvPool, tasks: dict[str, Any]) -> Callable[[], float]:
    """A pass of every task through `pool`, each env served its next task in the step that ran its
    last one; returns runs/s."""
    _, infos = pool.reset()
    serving = {i["env_id"]: i["task_id"] for i in infos}
    ids = sorted(serving)

    def one_pass() -> float:
        nonlocal ids
        done = 0
        t0 = time.perf_counter()
        while done < len(tasks):
            pool.send(np.stack([encode_bytes(tasks[serving[e]].canonical_solution, 8192) for e in ids]))
            _, _, _, _, infos, env_ids, _ = pool.recv()
            for info in infos:
                if "status" in info:  # a step result (async batches may also carry reset infos)
                    assert info["status"] == "ok", info
                    serving[info["env_id"]] = info["next_task_id"]
                    done += 1
                else:
                    serving[info["env_id"]] = info["task_id"]
            ids = env_ids.tolist()
        return done / (time.perf_counter() - t0)

    return one_pass


def pool_first_job_s(envs: int, starts: int = 3) -> dict[str, float]:
    """The first start also starts the helper process that workers fork from; later pools reuse it."""
    seconds = []
    for _ in range(starts):
        t0 = time.perf_counter()
        with EnvPool(num_envs=envs, num_workers=envs) as pool:
            assert anyio.run(pool.run, RunRequest(code="pass")).ok
            seconds.append(time.perf_counter() - t0)
    return {"first": round(seconds[0], 3), "later_median": round(statistics.median(seconds[1:]), 3)}


def flatten(report: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every number of a report under its dotted path."""
    out: dict[str, float] = {}
    for key, value in report.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = float(value)
    return out


def compare(ref: str, rounds: int, forwarded: list[str]) -> dict[str, Any]:
    """This benchmark on envpool at `ref` and in the working tree, in alternating child processes."""
    root = os.path.dirname(_HERE)
    commit = subprocess.run(
        ["git", "-C", root, "rev-parse", "--short", ref], capture_output=True, text=True, check=True
    )
    with tempfile.TemporaryDirectory(prefix="rlide-baseline-") as tmp:
        archive = subprocess.run(["git", "-C", root, "archive", ref, "envpool"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        variants = {"baseline": {**os.environ, "PYTHONPATH": tmp}, "current": dict(os.environ)}
        runs: list[dict[str, Any]] = []
        for n in range(rounds):
            order = list(variants) if n % 2 == 0 else list(reversed(variants))
            row = {}
            for name in order:
                child = [sys.executable, os.path.abspath(__file__), *forwarded]
                out = subprocess.run(child, env=variants[name], capture_output=True, text=True, check=True)
                row[name] = json.loads(out.stdout)
            runs.append(row)
    medians: dict[str, dict[str, float]] = {}
    ranges: dict[str, dict[str, list[float]]] = {}
    for name in variants:
        figures = [flatten(row[name]) for row in runs]
        shared = [k for k in figures[0] if all(k in f for f in figures)]
        medians[name] = {k: round(statistics.median(f[k] for f in figures), 3) for k in shared}
        ranges[name] = {k: [min(f[k] for f in figures), max(f[k] for f in figures)] for k in shared if "humaneval" in k}
    return {
        "baseline": f"{ref} ({commit.stdout.strip()})",
        "rounds": runs,
        "median_of_rounds": medians,
        "humaneval_range_of_rounds": ranges,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--pool-start-only", action="store_true", help="only pool_first_job_s (paired runs)")
    parser.add_argument("--baseline", help="git ref: also run the benchmark on envpool as it was there (ABAB)")
    parser.add_argument("--rounds", type=int, default=2, help="with --baseline: rounds of each variant")
    args = parser.parse_args()
    if args.baseline:
        forwarded = [
            f"--runs={args.runs}",
            f"--threads={args.threads}",
            f"--envs={args.envs}",
            f"--passes={args.passes}",
        ]
        print(json.dumps(compare(args.baseline, args.rounds, forwarded), indent=2))
        return
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout is the JSON
    if args.pool_start_only:
        print(json.dumps({"loadavg_1m": round(os.getloadavg()[0], 2), "pool_first_job_s": pool_first_job_s(args.envs)}))
        return

    load = round(os.getloadavg()[0], 2)  # other work on the box skews all figures
    bare, trivial = trivial_runs(args.runs)
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "loadavg_1m_at_start": load,
        },
        "bare_python3": bare,
        "trivial_run": trivial,
    }
    # Before any other pool: the first one of a process also starts the helper process workers fork from.
    report[f"pool_{args.envs}_first_job_s"] = pool_first_job_s(args.envs)
    sb = make_sandbox("bwrap")
    try:
        he = humaneval_rates(sb, args.threads, args.envs, args.passes)
    finally:
        sb.close()
    best_pool = max(he[f"pufferlib_pool_{args.envs}_sync"], he[f"pufferlib_pool_{args.envs}_async_half"])
    he["pool_over_thread_pool"] = round(best_pool / he[f"thread_pool_{args.threads}"], 3)
    he["pool_over_verified_thread_pool"] = round(best_pool / he[f"thread_pool_{args.threads}_verified"], 3)
    report[f"humaneval164_runs_per_s_median_of_{args.passes}"] = he
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
