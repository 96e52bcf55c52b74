"""The fork-server against an earlier version of itself, paired. Prints one JSON object on stdout.

Two warm `bwrap` sandboxes in one process, one running `envpool/sandbox/forkserver.py` as it is in
the working tree and one running it as it was at `--baseline` (a git ref), take turns: each round
runs a block of trivial programs in each (`--block`, 50 by default). On a shared VM whose speed
drifts by 2x within minutes, only such a pairing says whether a change to the fork-server helped.
Blocks rather than single alternating runs: with `--gap-ms 0`, work a server does after its answer
would otherwise land on the other variant's run.

    python -P benchmarks/forkserver_ab.py [--baseline 8f0cb3a] [--runs 600] [--gap-ms 0 5] [--block 50]

Per variant and gap: end-to-end p10/p50/p90 as the caller sees it, and the time inside the server
from handing the run to its child until the child exited (`duration_ms`).

The baseline's fork-server must speak the host's protocol: since 49234de (jobs and output as raw
bytes after the frame) only later ones do. To compare across it, run the whole package at a ref:
`python benchmarks/envpool.py --baseline REF`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envpool.sandbox.base import RunRequest  # noqa: E402
from envpool.sandbox.bwrap import BwrapConfig, BwrapSandbox  # noqa: E402


def sandbox_running(script: Path) -> BwrapSandbox:
    """A warm sandbox whose server runs `script`."""
    sb = BwrapSandbox(BwrapConfig(forkserver=script))
    for _ in range(20):
        sb.run(RunRequest(code="pass"))
    return sb


def time_one_run(sb: BwrapSandbox, request: RunRequest, e2e: list[float], inside: list[float]) -> None:
    started = time.perf_counter()
    result = sb.run(request)
    e2e.append((time.perf_counter() - started) * 1000)
    inside.append(result.duration_ms)
    if not result.ok:
        raise RuntimeError(f"{result.status} {result.detail}")


def figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p10_ms": round(ordered[len(ordered) // 10], 2),
        "p50_ms": round(statistics.median(ordered), 2),
        "p90_ms": round(ordered[9 * len(ordered) // 10], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="8f0cb3a", help="git ref of the fork-server to compare against")
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--gap-ms", type=float, nargs="+", default=[0.0, 5.0])
    parser.add_argument("--block", type=int, default=50, help="runs in a row on one variant")
    args = parser.parse_args()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))  # stdout is the JSON

    old_source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{args.baseline}:envpool/sandbox/forkserver.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        old_script = Path(tmp) / "forkserver.py"
        old_script.write_text(old_source)
        boxes = {"baseline": sandbox_running(old_script), "current": sandbox_running(BwrapConfig().forkserver)}
        request = RunRequest(code="pass")
        report: dict[str, Any] = {
            "baseline": args.baseline,
            "block": args.block,
            "cpus": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
        try:
            for gap in args.gap_ms:
                e2e: dict[str, list[float]] = {name: [] for name in boxes}
                inside: dict[str, list[float]] = {name: [] for name in boxes}
                for _ in range(max(1, args.runs // args.block)):
                    for name, sb in boxes.items():
                        for _ in range(args.block):
                            time_one_run(sb, request, e2e[name], inside[name])
                            time.sleep(gap / 1000)
                report[f"gap_{gap:g}ms"] = {
                    name: {"end_to_end": figures(e2e[name]), "inside_server": figures(inside[name])} for name in boxes
                }
        finally:
            for sb in boxes.values():
                sb.close()
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
