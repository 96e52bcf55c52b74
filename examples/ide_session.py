"""A scripted IDE session: what an IDE agent does through rlide, as an MCP SDK client over stdio.

    .venv/bin/python examples/ide_session.py [--era legacy|modern]

It launches `rlide serve` exactly as an IDE host would, starts an episode, calls tools, gives
feedback, ends the episode and prints the recorded episode (from the `episode://` resource).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters


def rlide_command() -> str:
    beside = Path(sys.executable).parent / "rlide"
    found = str(beside) if beside.exists() else shutil.which("rlide")
    if found is None:
        sys.exit("rlide is not installed: run `make setup` first")
    return found


async def session(era: str) -> dict[str, object]:
    server = StdioServerParameters(command=rlide_command(), args=["serve"], env=dict(os.environ))
    async with Client(server, mode="legacy" if era == "legacy" else "auto") as client:
        tools = [t.name for t in (await client.list_tools()).tools]
        print(f"connected ({client.protocol_version}); tools: {', '.join(tools)}", file=sys.stderr)

        started = await client.call_tool("start_episode", {"task": "Fix the off-by-one in pagination"})
        episode_id = started.structured_content["episode_id"]  # type: ignore[index]
        print(f"episode {episode_id} started", file=sys.stderr)

        # The agent works: here it only looks at earlier episodes; later tools (run_tests,
        # search_code) are recorded the same way.
        await client.call_tool("list_episodes", {"status": "success", "limit": 3, "episode_id": episode_id})
        await client.call_tool("give_feedback", {"episode_id": episode_id, "rating": 0.8, "comment": "good fix"})
        await client.call_tool(
            "end_episode", {"episode_id": episode_id, "outcome": "success", "summary": "limit-1 → limit"}
        )
        resource = await client.read_resource(f"episode://{episode_id}")
        return json.loads(resource.contents[0].text)  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--era",
        choices=["legacy", "modern"],
        default="legacy",
        help="legacy: the 2025-11-25 handshake IDE hosts use today; modern: 2026-07-28",
    )
    args = parser.parse_args()
    episode = anyio.run(session, args.era)
    json.dump(episode, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
