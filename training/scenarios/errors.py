"""The one error every scenario verifier raises when it cannot score: kept apart so that snapshots,
verification and the scenario sets can all raise it without importing each other."""

from __future__ import annotations


class VerifierUnavailable(RuntimeError):
    """A scenario or an episode cannot be verified here (no runner, the repository or commit is gone,
    the sandbox failed); the message says why."""
