"""The one thing every worker process rlide starts does first: keep off its parent's stdout.

A worker (an index worker, a sandbox-pool worker, the helper that forks the latter) inherits the
parent's stdout, which carries data (`rlide index --json`) or an MCP stdio transport; a stray print
or a log line from an unconfigured structlog (which prints to stdout) would land in it. Standard
library only: the index workers import it as their initializer, and their start-up is timed.
`envpool` imports it too (it may import `memory`, like `training`)."""

from __future__ import annotations

import os
import sys


def stdout_to_stderr() -> None:
    """Point fd 1, and `sys.stdout`, at stderr."""
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
