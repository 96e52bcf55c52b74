"""How long an IDE waits on a fresh `rlide serve` (stdio), in one run. Prints JSON.

Per launch, with a fresh RLIDE_HOME: seconds until the MCP `initialize` handshake is answered, until
the first `run_code` is answered (it starts the sandbox pool), and for a second `run_code`. With
`--pythonpath DIR`, the server runs the code in DIR instead (a worktree of another commit, through
the same console-script entry), and launches alternate between it and this checkout, so drift in
machine speed hits both alike.

    python -P benchmarks/mcp_first_run.py [--launches 5] [--pythonpath /tmp/wt_old]
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
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

# The `rlide` console script pip writes, for a worktree whose package is not the installed one. A
# script file, as that is: multiprocessing's workers re-import a script (not `python -c`) as their main.
ENTRY = "import sys\nfrom mcp_server.cli.app import main\nif __name__ == '__main__':\n    sys.exit(main())\n"


async def launch(pythonpath: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "RLIDE_HOME": home}
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
            script = Path(home) / "rlide"
            script.write_text(ENTRY)
            params = StdioServerParameters(command=sys.executable, args=[str(script), "serve"], env=env)
        else:
            params = StdioServerParameters(command=str(Path(sys.executable).parent / "rlide"), args=["serve"], env=env)
        with open(os.devnull, "w") as errlog:
            t0 = time.perf_counter()
            async with Client(stdio_client(params, errlog=errlog)) as client:
                t1 = time.perf_counter()
                first = await client.call_tool("run_code", {"code": "print(1)"})
                t2 = time.perf_counter()
                second = await client.call_tool("run_code", {"code": "print(2)"})
                t3 = time.perf_counter()
        assert not first.is_error and not second.is_error, (first.content, second.content)
        return {"initialize_s": t1 - t0, "first_run_code_s": t2 - t1, "second_run_code_s": t3 - t2}


def summary(samples: list[dict[str, float]]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        figures[key] = {"median": round(statistics.median(values), 3), "all": [round(v, 3) for v in values]}
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--pythonpath", help="also time the server from this directory, alternating")
    args = parser.parse_args()
    variants = {"this_checkout": None} | ({"other": args.pythonpath} if args.pythonpath else {})
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(args.launches):
        for name, pythonpath in variants.items():
            samples[name].append(await launch(pythonpath))
    report = {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    report |= {name: summary(runs) for name, runs in samples.items()}
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(main)
