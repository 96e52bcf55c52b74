"""Runs model-written programs for rewards and evaluation inside envpool's sandbox.

The student's code is as hostile as an IDE agent's: rollouts and `rlide eval` go through the same
sandbox as the MCP tools, never a bare subprocess.
"""

from __future__ import annotations

from collections.abc import Sequence

from envpool.sandbox import RunRequest, RunResult, RunStatus, Sandbox, TestRunRequest, make_sandbox, prepare_test_run
from envpool.sandbox.base import InvalidRequest, read_test_run
from envpool.verifiers.reports import TestRunOutcome
from training.scenarios.base import RunOutcome, VerifierUnavailable
from training.scenarios.snapshots import GitSnapshots

OUTPUT_TAIL = 4_000


def _outcome(result: RunResult, tests: TestRunOutcome | None = None) -> RunOutcome:
    if result.status is RunStatus.SANDBOX_ERROR:  # the harness failed, not the student: no reward either way
        raise VerifierUnavailable(f"the sandbox failed: {result.detail}")
    output = (result.stdout + result.stderr)[-OUTPUT_TAIL:]
    return RunOutcome(
        passed=result.ok,
        output=output,
        timed_out=result.status is RunStatus.TIMEOUT,
        stdout=result.stdout,
        tests=tests,
    )


class SandboxRunner:
    """A `ProgramRunner` and `WorkspaceRunner` over one envpool sandbox backend (thread-safe).

    A workspace is the git commit `snapshot` of the repository `workspace`, read by `snapshots`
    (size-capped; git runs here, outside the sandbox, only to read the repository; the tests run
    inside it), with `files` written over it and `deleted` removed (an episode's exact start
    state); without a snapshot, the `files` alone."""

    def __init__(self, backend: str = "bwrap", *, snapshots: GitSnapshots | None = None) -> None:
        self.sandbox: Sandbox = make_sandbox(backend)
        self.snapshots = snapshots or GitSnapshots()

    def run_python(self, program: str, *, timeout_s: float) -> RunOutcome:
        return _outcome(self.sandbox.run(RunRequest(language="python", code=program, timeout_s=timeout_s)))

    def run_tests(
        self,
        *,
        test_command: str | None,
        tests: str | None,
        snapshot: str | None,
        files: dict[str, str],
        patch: str | None,
        timeout_s: float,
        workspace: str | None = None,
        deleted: Sequence[str] = (),
    ) -> RunOutcome:
        files = self._workspace_files(snapshot=snapshot, files=files, workspace=workspace, deleted=deleted)
        test = TestRunRequest(files=files, patch=patch, test_command=test_command, tests=tests, timeout_s=timeout_s)
        try:
            request = prepare_test_run(test)
        except InvalidRequest as exc:  # a workspace or patch the sandbox refuses (rlide's reserved names)
            return RunOutcome(False, str(exc), tests=TestRunOutcome(False, reason=str(exc)))
        result = self.sandbox.run(request)
        return _outcome(result, read_test_run(request, result))

    def prepare(self, *, snapshot: str | None, files: dict[str, str], workspace: str | None) -> None:
        """Materialise the workspace now (a snapshot is cached for the runs that follow), so a
        scenario whose repository or commit is gone is skipped before its completions are sampled."""
        self._workspace_files(snapshot=snapshot, files=files, workspace=workspace)

    def _workspace_files(
        self, *, snapshot: str | None, files: dict[str, str], workspace: str | None, deleted: Sequence[str] = ()
    ) -> dict[str, str]:
        if snapshot is None:
            if not files:
                raise VerifierUnavailable("nothing to run the tests on: no files and no snapshot")
            return files
        if workspace is None:
            raise VerifierUnavailable(
                f"workspace snapshot {snapshot!r} names no repository: record the episode's workspace"
            )
        merged = {**self.snapshots.files(workspace, snapshot).files, **files}
        for path in deleted:
            merged.pop(path, None)
        return merged

    def close(self) -> None:
        self.sandbox.close()
