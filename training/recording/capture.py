"""The agent's work, captured: the served workspace's state at `start_episode`, at every `run_tests`
and at `end_episode`.

An IDE agent edits files with the IDE's own tools, so rlide never sees the edit; it sees the
workspace. Each state is the commit HEAD is at plus every file that differs from it (tracked and
untracked, not ignored; installed folders, untracked credentials, binaries and files past the size
cap are left out and named), and the unified diff against the commit (`EpisodeStore.add_workspace_state`:
every text stored once per content, secrets redacted). The end state also gets the episode's
solution: the diff from its first state to its end state, whatever commits were made between.

Capturing never fails a tool call: a workspace that is not a git working tree, or git failing, is
logged and the call goes on without a state.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from episodes.records import StateKind, WorkspaceState
from episodes.redaction import redact_text
from episodes.store import EpisodeStore
from training.scenarios.snapshots import Changes, GitSnapshots, Snapshot, SnapshotUnavailable, unified_diff

log = structlog.get_logger(__name__)

STATE_BYTES = 4 << 20
"""The most file text one state keeps; a changed file past what is left is named in `omitted`."""


def changes_from_snapshot(snapshot: Snapshot) -> Changes:
    """The changes a `run_tests` snapshot already read (its changed paths), without reading again."""
    files: dict[str, str | None] = {}
    omitted: list[str] = []
    budget = STATE_BYTES
    folders = [entry for entry in snapshot.skipped if entry.endswith("/")]
    for path in snapshot.changed:
        text = snapshot.files.get(path)
        if text is None:
            folder = next((f for f in folders if path.startswith(f)), None)
            if folder is not None:
                if f"{folder} (installed files)" not in omitted:
                    omitted.append(f"{folder} (installed files)")
            elif path in snapshot.skipped:
                omitted.append(f"{path} (not sent: binary, symlink or credentials)")
            else:
                files[path] = None  # deleted
            continue
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > budget:
            omitted.append(f"{path} (too large: {size} bytes)")
            continue
        budget -= size
        files[path] = text
    return Changes(commit=snapshot.commit, files=files, omitted=tuple(omitted))


def capture(
    store: EpisodeStore,
    root: Path | None,
    episode_id: str,
    kind: StateKind,
    *,
    snapshot: Snapshot | None = None,
    snapshots: GitSnapshots | None = None,
) -> int | None:
    """Record the workspace at `root` as a state of the episode; its id, or None when there is no
    workspace to read. A `run_tests` passes the snapshot it sent, which is read once."""
    if root is None:
        return None
    reader = snapshots or GitSnapshots()
    try:
        changes = (
            changes_from_snapshot(snapshot) if snapshot is not None else reader.changes(root, max_bytes=STATE_BYTES)
        )
        files = {path: None if text is None else redact_text(text) for path, text in changes.files.items()}
        at_commit = _redacted(reader.texts_at(root, changes.commit, files))
        diff = unified_diff(at_commit, files)
        solution = None
        if kind is StateKind.end:
            states = store.workspace_states(episode_id)
            solution = _solution(reader, root, states[0], changes.commit, files) if states else diff
    except (SnapshotUnavailable, OSError) as exc:  # not a git working tree, git missing or failing
        log.info("capture.skipped", episode_id=episode_id, kind=kind.value, reason=str(exc))
        return None
    return store.add_workspace_state(
        episode_id,
        kind,
        commit=changes.commit,
        files=files,
        omitted=list(changes.omitted),
        diff=diff,
        solution=solution,
    )


def _solution(
    reader: GitSnapshots, root: Path, first: WorkspaceState, commit: str, files: dict[str, str | None]
) -> str:
    """The diff from the episode's first state to now: each path either state changed, or a commit
    made since changed, as it was then and as it is now."""
    paths = set(first.files) | set(files)
    if first.commit != commit:
        paths |= reader.changed_between(root, first.commit, commit)
    then = _redacted(reader.texts_at(root, first.commit, paths - set(first.files))) | first.files
    now = _redacted(reader.texts_at(root, commit, paths - set(files))) | files
    return unified_diff(then, now)


def _redacted(texts: dict[str, str | None]) -> dict[str, str | None]:
    """Texts as the log keeps them, so that a diff never shows a secret or a redaction as a change."""
    return {path: None if text is None else redact_text(text) for path, text in texts.items()}
