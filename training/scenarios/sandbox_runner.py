"""Runs model-written programs for rewards and evaluation inside envpool's sandbox.

The student's code is as hostile as an IDE agent's: rollouts and `rlide eval` go through the same
sandbox as the MCP tools, never a bare subprocess.
"""

from __future__ import annotations

from envpool.sandbox import RunRequest, RunResult, RunStatus, Sandbox, make_sandbox
from training.scenarios.base import RunOutcome
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.snapshots import GitSnapshots

OUTPUT_TAIL = 4_000


def _outcome(result: RunResult) -> RunOutcome:
    if result.status is RunStatus.SANDBOX_ERROR:  # the harness failed, not the student: no reward either way
        raise VerifierUnavailable(f"the sandbox failed: {result.detail}")
    output = (result.stdout + result.stderr)[-OUTPUT_TAIL:]
    return RunOutcome(
        passed=result.ok,
        output=output,
        timed_out=result.status is RunStatus.TIMEOUT,
        stdout=result.stdout,
    )


class SandboxRunner:
    """A `ProgramRunner` and `WorkspaceRunner` over one envpool sandbox backend (thread-safe).

    A workspace's commit is read by `snapshots` (size-capped; git runs here, outside the sandbox,
    only to read the repository; the tests run inside it)."""

    def __init__(self, backend: str = "bwrap", *, snapshots: GitSnapshots | None = None) -> None:
        self.sandbox: Sandbox = make_sandbox(backend)
        self.snapshots = snapshots or GitSnapshots()

    def run_python(self, program: str, *, timeout_s: float) -> RunOutcome:
        return _outcome(self.sandbox.run(RunRequest(language="python", code=program, timeout_s=timeout_s)))

    def commit_files(self, workspace: str, commit: str) -> dict[str, str]:
        """The files of `commit` in the repository at `workspace` (cached per commit)."""
        return self.snapshots.files(workspace, commit).files

    def run(self, request: RunRequest) -> RunResult:
        return self.sandbox.run(request)

    def close(self) -> None:
        self.sandbox.close()
