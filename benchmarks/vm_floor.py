"""What the machine itself charges for the steps of a warm fork-server run, without rlide's code.

    python -P benchmarks/vm_floor.py [--runs 300]

Prints one JSON object: the median (and p90) of
  pipe_round_trip_us     one byte to a child process and back over two pipes, both processes busy
  fork_exit_wait_us      fork a Python process of ~22 MB RSS (the fork server's), the child exits at once, reap it
  fork_only_us           the same fork, timed until it returns in the parent
  compile_exec_pass_us   compile and run `pass`, what the fork server does with a trivial program
The fork server pays a fork and a teardown per run (the spare for the next run, and the reaping of
this one), so a trivial run cannot cost less than about `fork_exit_wait_us` plus two pipe trips
when the runs come back to back. Compare with `benchmarks/forkserver_ab.py` taken in the same minute.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered) * 1e6, 1),
        "p90": round(ordered[int(len(ordered) * 0.9)] * 1e6, 1),
    }


def _timed(step: Callable[[], None], runs: int, warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return samples


def pipe_round_trip(runs: int) -> list[float]:
    from_parent, to_child = os.pipe()
    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(to_child)
        os.close(from_child)
        while byte := os.read(from_parent, 1):
            os.write(to_parent, byte)
        os._exit(0)
    os.close(from_parent)
    os.close(to_parent)

    def trip() -> None:
        os.write(to_child, b"x")
        os.read(from_child, 1)

    samples = _timed(trip, runs)
    os.close(to_child)
    os.waitpid(pid, 0)
    os.close(from_child)
    return samples


def fork_exit_wait(runs: int) -> tuple[list[float], list[float]]:
    forks: list[float] = []

    def cycle() -> None:
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        forks.append(time.perf_counter() - start)
        os.waitpid(pid, 0)

    whole = _timed(cycle, runs)
    return whole, forks[-runs:]


def compile_exec(runs: int) -> list[float]:
    return _timed(lambda: exec(compile("pass", "<run>", "exec"), {}), runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    heap = [str(i) * 10 for i in range(100_000)]  # RSS ~22 MB, as the fork server inside bwrap
    whole, forks = fork_exit_wait(args.runs)
    figures = {
        "benchmark": "vm_floor",
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "heap_objects": len(heap),
        "pipe_round_trip_us": _quantiles(pipe_round_trip(args.runs * 5)),
        "fork_exit_wait_us": _quantiles(whole),
        "fork_only_us": _quantiles(forks),
        "compile_exec_pass_us": _quantiles(compile_exec(args.runs * 5)),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
