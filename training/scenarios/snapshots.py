"""Workspace snapshots for the sandbox: the files of a git commit (test-command scenarios), or of a
working tree as it is on disk (`run_tests` on the served workspace).

A scenario taken from an episode in a real repository names a commit (`workspace_ref`) of the
episode's workspace (`workspace`). `GitSnapshots.files(repo, ref)` resolves the ref to a commit and
reads its tree as raw objects (`git ls-tree`, `git cat-file`: no worktree, no checkout, nothing
written to the repository), so the sandbox run gets exactly the committed files, with the student's
patch applied on top. A verifier trusts these as the commit's tests, and an agent can write the
repository's `git replace` refs, attributes and filter drivers: none of them applies here
(`GIT_NO_REPLACE_OBJECTS`; `git archive` would apply `export-ignore`, `export-subst` and filters).

Limits, checked before the objects are read (from `git ls-tree`) and again after: at most
`max_files` files and `max_bytes` bytes (defaults: what one sandbox request takes). Binary files
(not UTF-8) and symlinks cannot travel as text files: they are left out and listed in
`Snapshot.skipped`. Submodules are not included. Every failure (no git, no repository, no such ref, too large) is a
`SnapshotUnavailable` (a `VerifierUnavailable`) whose message says which.

Resolved snapshots are cached per (repository, commit id): a commit's tree never changes.

`GitSnapshots.working_tree(repo)` reads what a test run of the working tree needs: the tracked and
untracked files that are not ignored (`git ls-files --cached --others --exclude-standard`), as they
are on disk, uncommitted edits included, under the same limits and with the same files left out,
and untracked files that hold credentials too (`memory.indexing.files.is_secret_path`: a `.env`, a key or
a `.docker/config.json` nobody committed; the sandbox's output reaches the agent);
its `commit` is HEAD's id, so a run recorded with it can be re-checked from the commit later.
`GitSnapshots.changes(repo)` reads only what differs from HEAD (the served workspace's state at each
tool call of an episode: `training.recording.capture`), `texts_at` what those paths held at a commit, and
`unified_diff` turns two such file sets into a diff `patch -p1` applies.

Untracked folders that hold installed or generated files are left out as the indexer leaves them
out (`memory.indexing.files.VENDORED_DIRS`: `.venv`, `node_modules`, caches, `build`, …, plus any
folder holding a `pyvenv.cfg`, whatever its name): `python -m venv .venv` writes no `.gitignore`
entry, and a virtualenv's thousands of files would make every checkout "too large". Tracked files
are always sent. A tree still too large names its largest folders and how to leave them out.
"""

from __future__ import annotations

import difflib
import os
import shutil
import stat
import subprocess
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from envpool.sandbox.base import MAX_FILES, MAX_REQUEST_BYTES
from memory.indexing.files import VENDORED_DIRS, is_secret_path
from training.scenarios.errors import VerifierUnavailable

DEFAULT_MAX_BYTES = MAX_REQUEST_BYTES // 2
"""Half a sandbox request: the rest is left for the patch and the test command."""
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""git's empty tree: what a repository held before its first commit."""
_RECORD_FILES = "record the files the tests need with the episode instead"


class SnapshotUnavailable(VerifierUnavailable):
    """The files cannot be read for the sandbox (no git, no repository, no such ref, too large);
    the message says which."""


class NotAWorkingTree(SnapshotUnavailable):
    """The directory is not inside a git working tree: there is no telling which of its files a
    test run needs (it could be a home directory)."""


@dataclass(frozen=True)
class Snapshot:
    commit: str
    """The full commit id the ref resolved to; for a working tree, HEAD's ("" before a first commit)."""
    files: dict[str, str]
    """Relative path -> text content of every regular UTF-8 file of the commit."""
    skipped: tuple[str, ...] = ()
    """Paths left out: binary files, symlinks (and, in a working tree, submodules)."""
    changed: tuple[str, ...] = ()
    """Of a working tree: the paths whose state differs from HEAD's (edited, added, deleted)."""


@dataclass(frozen=True)
class Changes:
    """A working tree against its HEAD: the files that differ, as text (None: deleted)."""

    commit: str
    files: dict[str, str | None]
    omitted: tuple[str, ...] = ()
    """Changed paths left out, each with why: "a/.venv/ (installed files)", "logo.png (binary)"."""


def unified_diff(old: dict[str, str | None], new: dict[str, str | None]) -> str:
    """A `git apply`/`patch -p1` diff from `old` to `new` (path -> text, None or absent: no file)."""
    out: list[str] = []
    for path in sorted(old.keys() | new.keys()):
        before, after = old.get(path), new.get(path)
        if before == after:
            continue
        lines = difflib.unified_diff(
            _lines(before), _lines(after),
            fromfile="/dev/null" if before is None else f"a/{path}",
            tofile="/dev/null" if after is None else f"b/{path}",
        )  # fmt: skip
        for line in lines:
            # A last line without a newline gets the marker `patch` expects after it.
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _lines(text: str | None) -> list[str]:
    """Lines as `patch` counts them: split at "\\n" only (a "\\r" or form feed stays in its line)."""
    if text is None:
        return []
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


class GitSnapshots:
    """Reads commits of local git repositories as sandbox file sets, within size limits."""

    def __init__(
        self,
        *,
        max_files: int = MAX_FILES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timeout_s: float = 60.0,
        cache_size: int = 8,
    ) -> None:
        if max_files < 1 or max_bytes < 1:
            raise ValueError("max_files and max_bytes must be positive")
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str], Snapshot] = OrderedDict()
        self._lock = threading.Lock()

    def files(self, repo: str | Path, ref: str) -> Snapshot:
        """The files of `ref` (a commit id, branch or tag) in the git repository at `repo`."""
        if not isinstance(ref, str) or not ref or ref.startswith("-") or any(c.isspace() or c == "\0" for c in ref):
            raise SnapshotUnavailable(f"{ref!r} is not a git ref: expected a commit id, branch or tag")
        root = self._repository(repo)
        commit = self._resolve(root, ref)
        key = (str(root), commit)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        self._check_size(root, commit, ref)
        snapshot = self._read_tree(root, commit, ref)
        with self._lock:
            self._cache[key] = snapshot
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return snapshot

    def working_tree(self, repo: str | Path) -> Snapshot:
        """The tracked and untracked, not ignored, files of the git working tree at `repo` as they are
        on disk; `commit` is HEAD's id. Never cached: the tree changes under us."""
        root = self._repository(repo)
        listed = self._git(root, "ls-files", "-z", "-t", "--cached", "--others", "--exclude-standard")
        if listed.returncode != 0:
            raise NotAWorkingTree(f"{root} is not a git working tree: {self._why(listed)}")
        skipped: list[str] = []
        names: list[str] = []
        installed = _InstalledFolders(root)
        for entry in dict.fromkeys(listed.stdout.split(b"\0")):  # a conflicted file comes thrice
            tag, name = entry[:1], entry[2:]
            if not name:
                continue
            try:
                rel = name.decode("utf-8")
            except UnicodeDecodeError:  # a name no JSON request can carry
                skipped.append(os.fsdecode(name))
                continue
            if tag == b"?":
                folder = installed.holding(rel)
                if folder is not None:
                    if folder not in skipped:
                        skipped.append(folder)  # one entry per virtualenv, not its 10,000 files
                    continue
                if is_secret_path(rel):
                    skipped.append(rel)  # an untracked .env or key: the sandbox's output reaches the agent
                    continue
            names.append(rel)
        what = f"the working tree of {root}"
        advice = (
            "add the folders the tests do not need to .gitignore (or .git/info/exclude),"
            " or pass use_workspace=false and the files the tests need"
        )
        if len(names) > self.max_files:  # before a stat per file of a monorepo
            self._refuse_if_large(len(names), 0, what, f"{_largest_folders((n, 0) for n in names)}; {advice}")
        entries: list[tuple[str, int]] = []
        for rel in names:
            try:
                st = (root / rel).lstat()
            except FileNotFoundError:  # deleted from the tree, not yet from the index
                continue
            if stat.S_ISREG(st.st_mode):
                entries.append((rel, st.st_size))
            else:  # a symlink (may point anywhere on the host), a submodule's directory
                skipped.append(rel)
        total = sum(size for _, size in entries)
        if len(entries) > self.max_files or total > self.max_bytes:
            self._refuse_if_large(len(entries), total, what, f"{_largest_folders(entries)}; {advice}")
        files: dict[str, str] = {}
        for rel, _ in entries:
            try:
                raw = _read_no_follow(root / rel)
            except FileNotFoundError:  # deleted since it was listed
                continue
            try:
                files[rel] = raw.decode("utf-8")
            except UnicodeDecodeError:
                skipped.append(rel)
        self._refuse_if_large(len(files), sum(len(t) for t in files.values()), what, advice)  # grew since lstat
        head = self._git(root, "rev-parse", "--verify", "--quiet", "HEAD")
        commit = head.stdout.decode().strip() if head.returncode == 0 else ""
        return Snapshot(commit=commit, files=files, skipped=tuple(skipped), changed=self._changed(root))

    def changes(self, repo: str | Path, *, max_bytes: int | None = None) -> Changes:
        """What differs from HEAD in the working tree at `repo`, as `working_tree` would send it:
        the text of every changed or new file, None for a deleted one; installed folders, untracked
        credentials, binaries, symlinks and what would pass `max_bytes` (default: this reader's)
        are left out and named. Reads only the changed files: cheap at every tool call."""
        root = self._repository(repo)
        probe = self._git(root, "rev-parse", "--is-inside-work-tree")
        if probe.returncode != 0:
            raise NotAWorkingTree(f"{root} is not a git working tree: {self._why(probe)}")
        head = self._git(root, "rev-parse", "--verify", "--quiet", "HEAD")
        commit = head.stdout.decode().strip() if head.returncode == 0 else ""
        tracked = set(self._git(root, "ls-files", "-z").stdout.decode("utf-8", "replace").split("\0"))
        installed = _InstalledFolders(root)
        budget = self.max_bytes if max_bytes is None else max_bytes
        files: dict[str, str | None] = {}
        omitted: list[str] = []
        for rel in self._changed(root):
            if rel not in tracked:
                folder = installed.holding(rel)
                if folder is not None:
                    if f"{folder} (installed files)" not in omitted:
                        omitted.append(f"{folder} (installed files)")
                    continue
                if is_secret_path(rel):
                    omitted.append(f"{rel} (credentials)")
                    continue
            try:
                raw = _read_no_follow(root / rel)
            except FileNotFoundError:
                files[rel] = None  # deleted
                continue
            except OSError:  # a symlink, a submodule's folder
                omitted.append(f"{rel} (not a regular file)")
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                omitted.append(f"{rel} (binary)")
                continue
            if len(raw) > budget:
                omitted.append(f"{rel} (too large: {len(raw)} bytes)")
                continue
            budget -= len(raw)
            files[rel] = text
        return Changes(commit=commit, files=files, omitted=tuple(omitted))

    def texts_at(self, repo: str | Path, commit: str, paths: Iterable[str]) -> dict[str, str | None]:
        """The text of each path at `commit` (None: absent there, or not text), in one git call."""
        wanted = sorted(set(paths))
        if not wanted or not commit:
            return dict.fromkeys(wanted)
        root = self._repository(repo)
        prefix = self._git(root, "rev-parse", "--show-prefix").stdout.decode().strip()
        bodies = self._objects(root, [f"{commit}:{prefix}{path}" for path in wanted])
        return {path: _text(body) for path, body in zip(wanted, bodies, strict=True)}

    def _objects(self, root: Path, names: list[str]) -> list[bytes | None]:
        """The raw content of each blob named (None: missing, or not a blob), in one `git cat-file`:
        the objects as stored, with no attribute, filter or replacement applied (`_git`)."""
        if not names:
            return []
        done = self._git(root, "cat-file", "--batch", stdin="".join(f"{name}\n" for name in names).encode())
        out, at = done.stdout, 0
        bodies: list[bytes | None] = []
        for _ in names:
            end = out.index(b"\n", at)
            header = out[at:end].split()
            at = end + 1
            if len(header) != 3:  # "<name> missing": not in that commit
                bodies.append(None)
                continue
            size = int(header[2])
            body, at = out[at : at + size], at + size + 1
            bodies.append(body if header[1] == b"blob" else None)
        return bodies

    def changed_between(self, repo: str | Path, first: str, last: str) -> set[str]:
        """The paths under `repo` that differ between two commits ("" for none yet: every path of `last`)."""
        root = self._repository(repo)
        done = self._git(root, "diff", "--name-only", "--relative", "-z", first or _EMPTY_TREE, last)
        if done.returncode != 0:
            raise SnapshotUnavailable(f"git diff {first[:12]}..{last[:12]} in {root} failed: {self._why(done)}")
        return {name for name in done.stdout.decode("utf-8", "replace").split("\0") if name}

    # -- steps ------------------------------------------------------------------------------------

    @staticmethod
    def _repository(repo: str | Path) -> Path:
        root = Path(repo).expanduser()
        if not root.is_dir():
            raise SnapshotUnavailable(f"the workspace repository {str(root)!r} does not exist on this machine")
        if shutil.which("git") is None:
            raise SnapshotUnavailable("reading a git snapshot needs git: apt-get install git")
        return root.resolve()

    def _changed(self, root: Path) -> tuple[str, ...]:
        """Paths under `root` whose state differs from HEAD's, relative to `root` as `ls-files` gives them."""
        done = self._git(root, "status", "-z", "--porcelain=v1", "--untracked-files=all", "--no-renames", ".")
        prefix = self._git(root, "rev-parse", "--show-prefix").stdout.decode().strip()
        names = (entry[3:].decode("utf-8", "replace") for entry in done.stdout.split(b"\0") if len(entry) > 3)
        return tuple(sorted(n.removeprefix(prefix) for n in names if n.startswith(prefix)))

    @staticmethod
    def _why(done: subprocess.CompletedProcess[bytes]) -> str:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "git failed"

    def _git(self, root: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """git in `root`, never prompting; `git replace` refs ignored, so that a commit read here is
        the commit its id names (an agent can write the repository's replace refs and attributes)."""
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_NO_REPLACE_OBJECTS": "1"}
        try:
            return subprocess.run(
                ["git", "-C", str(root), *args],
                input=stdin, capture_output=True, timeout=self.timeout_s, env=env, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise SnapshotUnavailable(f"git {args[0]} in {root} took longer than {self.timeout_s:.0f}s") from exc

    def _resolve(self, root: Path, ref: str) -> str:
        done = self._git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
        if done.returncode == 0:
            return done.stdout.decode().strip()
        probe = self._git(root, "rev-parse", "--git-dir")
        if probe.returncode != 0:
            raise SnapshotUnavailable(f"{root} is not a git repository this process can read ({self._why(probe)})")
        raise SnapshotUnavailable(f"the repository {root} has no commit {ref!r} (deleted branch, or not fetched?)")

    def _check_size(self, root: Path, commit: str, ref: str) -> None:
        done = self._git(root, "ls-tree", "-r", "-l", "-z", "--full-tree", commit)
        if done.returncode != 0:
            raise SnapshotUnavailable(f"git ls-tree {ref} in {root} failed: {done.stderr.decode(errors='replace')}")
        count = size = 0
        for entry in done.stdout.split(b"\0"):
            meta = entry.split(b"\t", 1)[0].split()
            if len(meta) == 4 and meta[1] == b"blob" and meta[0] != b"120000":
                count += 1
                size += int(meta[3])
        self._refuse_if_large(count, size, f"snapshot {ref!r} of {root}", _RECORD_FILES)

    def _refuse_if_large(self, count: int, size: int, what: str, advice: str) -> None:
        if count > self.max_files or size > self.max_bytes:
            raise SnapshotUnavailable(
                f"{what} is too large to run in the sandbox: {count} files, {size} bytes"
                f" (limits {self.max_files} files, {self.max_bytes} bytes); {advice}"
            )

    def _read_tree(self, root: Path, commit: str, ref: str) -> Snapshot:
        """The regular files of `commit`, read as raw objects: no `export-ignore`, `export-subst` or
        filter driver (which `git archive` would apply, from attributes an agent can write) changes
        what a verifier trusts as the commit's tests."""
        listed = self._git(root, "ls-tree", "-r", "-z", "--full-tree", commit)
        if listed.returncode != 0:
            raise SnapshotUnavailable(f"git ls-tree {ref} in {root} failed: {self._why(listed)}")
        blobs: list[tuple[str, str]] = []
        skipped: list[str] = []
        for entry in listed.stdout.split(b"\0"):
            meta, _, name = entry.partition(b"\t")
            if not name:
                continue
            path = os.fsdecode(name)
            mode, kind, sha = meta.split()
            if kind == b"blob" and mode in (b"100644", b"100755"):
                blobs.append((path, sha.decode()))
            else:  # a symlink (may point anywhere), a submodule
                skipped.append(path)
        files: dict[str, str] = {}
        for (path, _), body in zip(blobs, self._objects(root, [sha for _, sha in blobs]), strict=True):
            text = _text(body)
            if text is None:
                skipped.append(path)
            else:
                files[path] = text
        size = sum(len(text) for text in files.values())
        self._refuse_if_large(len(files), size, f"snapshot {ref!r} of {root}", _RECORD_FILES)
        return Snapshot(commit=commit, files=files, skipped=tuple(sorted(skipped)))


def _text(body: bytes | None) -> str | None:
    """A blob's text, or None when it is missing or not UTF-8 (it cannot travel as a text file)."""
    if body is None:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


class _InstalledFolders:
    """Which untracked paths lie in a folder of installed or generated files (a virtualenv,
    `node_modules`, a cache, a build output), answered once per folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._is_installed: dict[str, bool] = {}

    def holding(self, rel: str) -> str | None:
        """The outermost such folder holding `rel` ("a/.venv/"), or None."""
        parts = rel.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            known = self._is_installed.get(folder)
            if known is None:
                name = parts[depth - 1]
                known = (
                    name in VENDORED_DIRS
                    or name.endswith(".egg-info")
                    or (self.root / folder / "pyvenv.cfg").is_file()  # a virtualenv of any name
                )
                self._is_installed[folder] = known
            if known:
                return folder + "/"
        return None


def _largest_folders(entries: Iterable[tuple[str, int]], shown: int = 5) -> str:
    """The top-level folders holding the most bytes (then files), for a "too large" message."""
    files: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for rel, size in entries:
        top = rel.split("/", 1)[0] + ("/" if "/" in rel else "")
        files[top] += 1
        sizes[top] += size
    largest = sorted(files, key=lambda top: (sizes[top], files[top]), reverse=True)[:shown]
    return "largest: " + ", ".join(f"{top} ({files[top]} files, {sizes[top]} bytes)" for top in largest)


def _read_no_follow(path: Path) -> bytes:
    """A file's bytes, refusing a symlink swapped in since it was listed (it may point anywhere)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        return f.read()


__all__ = [
    "DEFAULT_MAX_BYTES",
    "Changes",
    "GitSnapshots",
    "NotAWorkingTree",
    "Snapshot",
    "SnapshotUnavailable",
    "unified_diff",
]
