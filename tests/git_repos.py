"""Running git on a test's own repository, untouched by the machine's or the user's git config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """`git -C repo args...`, with a fixed author and no global or system config; its stdout."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def plain_venv(path: Path) -> None:
    """`python -m venv` as it was before 3.13, which makes the venv ignore itself in git (its own
    `.gitignore`): a project's venv that its .gitignore does not name, as tests of what is left out
    of a working tree need on every Python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    (path / ".gitignore").unlink(missing_ok=True)
