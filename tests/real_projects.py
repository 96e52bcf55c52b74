"""Real open-source libraries as IDE users have them: the sdist (fetched with its pinned hash by
`scripts/setup_projects.sh`) committed to a git repository, with a project virtualenv, and a bug as
one uncommitted edit."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tests.git_repos import git, plain_venv

PROJECTS = Path(__file__).resolve().parents[1] / ".tools" / "projects"


def checkout(sdist: str, dest: Path, *, src_layout: bool = False) -> Path:
    """`sdist` (a file of .tools/projects) unpacked into a new git repository under `dest`, committed,
    with a `.venv` that puts the library on the path as `pip install -e .` would (its `src` for a src
    layout). Skips the test when the set-up could not fetch it."""
    archive = PROJECTS / sdist
    if not archive.is_file():
        pytest.skip(f"{archive} is missing: `make setup` fetches it (scripts/setup_projects.sh)")
    unpacked = dest / "checkout"
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    [root] = [path for path in unpacked.iterdir() if path.is_dir()]
    (root / ".gitignore").write_text(".venv/\n*.egg-info/\n")
    plain_venv(root / ".venv")
    if src_layout:
        [site] = (root / ".venv" / "lib").glob("python3.*/site-packages")
        (site / f"__editable__.{root.name}.pth").write_text(f"{root / 'src'}\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", root.name]):
        git(root, *args)
    return root


def break_code(root: Path, path: str, old: str, new: str) -> None:
    """The bug: one uncommitted edit of `path` (`old` must occur exactly once)."""
    target = root / path
    text = target.read_text()
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {path}"
    target.write_text(text.replace(old, new))
