"""The verifier of live episodes, run beside whoever records them: the MCP server for an IDE agent's
episodes, the policy endpoint for a scaffold's (`training.gateway`).

Each episode of a workspace the hub verifies gets the project's verifier (`verification`): its start
state runs in the background after the episode starts, its end state is verified when it ends (the
caller waits) or when it goes idle past the timeout, and at start the hub finishes what a stopped
one left pending. An episode of a workspace it does not verify is left to a hub that does: its end
is marked pending in the log (`EpisodeStore.request_end_verification`), never judged here against
another project's environment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import structlog
from anyio.abc import TaskGroup

from episodes.records import EpisodeSource, EpisodeVerifier, StateKind, VerifierState, VerifierVerdict
from episodes.store import EpisodeStore
from training.recording.capture import capture
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.snapshots import Snapshot
from training.scenarios.verification import EpisodeVerification

log = structlog.get_logger(__name__)

IDLE_CHECK_S = 60.0
"""How often a hub looks for open episodes gone idle past their timeout."""


@dataclass
class VerificationHub:
    """`verification_of(root)`: the project's verification of `root`'s episodes, run in a sandbox that
    sees that project's virtualenv; `verifies(root)`: whether this hub verifies `root`'s episodes;
    `source`: the episodes its recorder makes, which it times out when idle."""

    store: EpisodeStore
    verification_of: Callable[[Path], EpisodeVerification]
    verifies: Callable[[Path], bool]
    idle_timeout_s: float
    source: EpisodeSource
    _tasks: TaskGroup | None = None
    _locks: dict[str, anyio.Lock] = field(default_factory=dict)
    _starts: dict[str, dict[str, str]] = field(default_factory=dict)
    """Each open episode's start state as read when it started: the log keeps it redacted."""

    def start(self, tasks: TaskGroup) -> None:
        """Run in `tasks` from now on, beginning with what a stopped hub left; then, as open episodes
        go idle past `idle_timeout_s`, time them out and verify their end."""
        self._tasks = tasks
        tasks.start_soon(self._in_thread, "pending", self._finish_pending)
        tasks.start_soon(self._expire_idle)

    def root(self, episode_id: str) -> Path | None:
        """The workspace of the episode, when this hub verifies it."""
        workspace = self.store.get_episode(episode_id).workspace
        if workspace is None:
            return None
        try:
            root = Path(workspace).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):
            return None
        return root if self.verifies(root) else None

    def _finish_pending(self) -> int:
        done = 0
        for episode_id in self.store.pending_verifications():
            root = self.root(episode_id)
            if root is not None:
                done += self.verification_of(root).finish_pending(episode_id)
        return done

    async def _expire_idle(self) -> None:
        timeout = self.idle_timeout_s
        while True:
            await anyio.sleep(min(max(timeout / 10, 1.0), IDLE_CHECK_S))
            for episode_id in await anyio.to_thread.run_sync(self.store.expire_idle, timeout, self.source):
                # Its end is its workspace now: what the agent left when it stopped.
                root = await anyio.to_thread.run_sync(self.root, episode_id)
                await anyio.to_thread.run_sync(capture, self.store, root, episode_id, StateKind.end)
                await self.verify_end(episode_id, None)

    async def begin(self, episode_id: str, root: Path, start: Snapshot) -> EpisodeVerifier:
        """The project's verifier for an episode whose workspace `root` was `start` at its start; its
        start state runs in the background (with no task group yet: before its end is verified)."""
        verification = self.verification_of(root)
        verifier = await anyio.to_thread.run_sync(verification.begin, episode_id, root, start.commit)
        self._starts[episode_id] = start.files
        if verifier.state is VerifierState.pending and self._tasks is not None:
            self._tasks.start_soon(self._locked, episode_id, lambda: verification.establish(episode_id, start.files))
        return verifier

    async def refuse(self, episode_id: str, root: Path, reason: str) -> EpisodeVerifier:
        """No verifier for an episode whose workspace cannot be read for one, and why."""
        return await anyio.to_thread.run_sync(self.verification_of(root).unavailable, episode_id, reason)

    async def verify_end(self, episode_id: str, end: Snapshot | None) -> VerifierVerdict | None:
        """Verify the episode's end state (`end`, its workspace as it is now, else its last recorded
        state) after its start state's run; None when it has no verifier to run, when another hub
        verifies it, or when the sandbox failed (then it stays pending: the next start runs it)."""
        if not await anyio.to_thread.run_sync(self.store.request_end_verification, episode_id):
            return None
        root = await anyio.to_thread.run_sync(self.root, episode_id)
        start = self._starts.pop(episode_id, None)
        if root is None:
            return None
        verification = self.verification_of(root)
        files = None if end is None else end.files
        done = await self._locked(episode_id, lambda: verification.verify_end(episode_id, files, start))
        return done if isinstance(done, VerifierVerdict) else None

    async def _locked(self, episode_id: str, work: Callable[[], object]) -> object:
        """One verification run at a time per episode (an end waits for its start's run)."""
        lock = self._locks.setdefault(episode_id, anyio.Lock())
        async with lock:
            return await self._in_thread(episode_id, work)

    @staticmethod
    async def _in_thread(episode_id: str, work: Callable[[], object]) -> object:
        try:
            # Abandoned on cancel (the server stopping): the episode stays pending in the log.
            return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except (VerifierUnavailable, OSError) as exc:
            log.warning("verification.failed", episode_id=episode_id, error=str(exc))
            return None


def describe_verifier(verifier: EpisodeVerifier | None) -> str:
    """One line for the agent: what verifies the episode and where that stands."""
    if verifier is None:
        return "none: no served git workspace, so the episode is verified only by a person's rating"
    if verifier.state is VerifierState.unavailable:
        return f"none: {verifier.reason}"
    if verifier.state is VerifierState.pending:
        return f"`{verifier.command}`, running on the start state now: its failing tests will be the task"
    failing = verifier.fail_to_pass or []
    shown = ", ".join(failing[:5]) + (f" and {len(failing) - 5} more" if len(failing) > 5 else "")
    return f"`{verifier.command}`: {len(failing)} tests fail at the start and must pass at the end: {shown}"
