"""A separate indexer/searcher process for the multi-process tests (prints JSON lines)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from memory.config import MemoryConfig
from memory.indexing.sync import Progress
from memory.service import MemoryService


def main() -> None:
    workspace, action = Path(sys.argv[1]), sys.argv[2]
    with MemoryService(MemoryConfig(workspace=workspace)) as svc:
        svc.indexer.embed_batch = 4  # small batches: many commits, so a kill lands mid-way

        def report(p: Progress) -> None:
            sys.stdout.write(
                json.dumps({"phase": p.phase.value, "files_done": p.files_done, "vectors_done": p.vectors_done}) + "\n"
            )
            sys.stdout.flush()

        if action == "index-and-search":
            svc.index_workspace(progress_callback=report)
            found = []
            for _ in range(20):
                found.append([h.path for h in svc.search_code("fibonacci number", k=3).results][0])
            sys.stdout.write(
                json.dumps({"done": True, "found": found, "status": svc.index_status().model_dump()}) + "\n"
            )
        elif action == "index":
            svc.index_workspace(progress_callback=report)
            sys.stdout.write(json.dumps({"done": True}) + "\n")


if __name__ == "__main__":
    main()
