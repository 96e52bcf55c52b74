"""A bug task's repository as a file: a deterministic tarball holding a git repository whose one
commit is a library's pristine source, and reading that commit back as files.

Deterministic so that regenerating an instance gives the same bytes and the same `base_commit`:
the commit's author, committer and dates are fixed, and the tarball holds only what names the
commit (the objects, the branch, HEAD, a minimal config), in sorted order with fixed owners and
times; git's index, logs and hooks (which hold timestamps and local paths) are left out. The
commit's files are read back with git (`GitSnapshots`), never by trusting the working tree.
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

from training.scenarios.errors import VerifierUnavailable
from training.scenarios.snapshots import GitSnapshots

FIXED_DATE = "2000-01-01T00:00:00+0000"
IDENTITY = {"name": "rlide bug tasks", "email": "bug-tasks@rlide.invalid"}
KEPT = ("HEAD", "config", "objects", "refs")
"""What of `.git` the archive holds."""
_SNAPSHOTS = GitSnapshots()


def commit_tree(root: Path) -> str:
    """Make `root` (a folder of files, no `.git`) a git repository with one commit of everything; its id."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": IDENTITY["name"],
        "GIT_AUTHOR_EMAIL": IDENTITY["email"],
        "GIT_COMMITTER_NAME": IDENTITY["name"],
        "GIT_COMMITTER_EMAIL": IDENTITY["email"],
        "GIT_AUTHOR_DATE": FIXED_DATE,
        "GIT_COMMITTER_DATE": FIXED_DATE,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-q", "--no-gpg-sign", "-m", "pristine source"],
    ):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def write_archive(root: Path, dest: Path) -> None:
    """`root`'s `.git` (the parts in `KEPT`) as a reproducible .tar.gz at `dest`."""
    git = root / ".git"
    paths = sorted(path for name in KEPT for path in [git / name, *sorted((git / name).rglob("*"))] if path.exists())
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            info = tar.gettarinfo(str(path), arcname=str(Path(".git") / path.relative_to(git)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o755 if path.is_dir() else 0o644
            if path.is_dir():
                tar.addfile(info)
            else:
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
    with dest.open("wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        gz.write(buffer.getvalue())


def commit_files(archive: Path, commit: str) -> dict[str, str]:
    """The files of `commit` in the repository `archive` holds. Raises `VerifierUnavailable` when the
    archive is missing or unreadable, or does not hold the commit."""
    if not archive.is_file():
        raise VerifierUnavailable(f"no repository archive at {archive}")
    with tempfile.TemporaryDirectory(prefix="rlide-bug-repo-") as tmp:
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")  # refuses absolute paths, '..', links out
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise VerifierUnavailable(f"{archive} is not a readable .tar.gz: {exc}") from exc
        if not (Path(tmp) / ".git").is_dir():
            raise VerifierUnavailable(f"{archive} holds no .git folder at its top")
        return _SNAPSHOTS.files(tmp, commit).files
