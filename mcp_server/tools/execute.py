"""Sandboxed execution tools: run code, run tests. A run of the episode's verifier becomes its verified
`tests` reward (fail-to-pass, from pytest's structured report); other runs are progress only."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, get_args

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from envpool.sandbox.base import (
    LANGUAGE_ALIASES,
    InvalidRequest,
    Language,
    RunRequest,
    RunResult,
    RunStatus,
    SandboxError,
    TestRunRequest,
    prepare_test_run,
    read_test_run,
    request_problem,
    shown_test_run,
)
from envpool.verifiers.reports import TestRunOutcome
from episodes.db import EpisodeNotFound
from episodes.records import StateKind
from mcp_server.middleware import note_step
from mcp_server.result_size import fit_result
from mcp_server.settings import Settings
from mcp_server.state import app_state
from mcp_server.tools.episodes import EpisodeId, progress_while
from training.recording.capture import capture
from training.recording.verification_hub import describe_verifier
from training.scenarios.snapshots import GitSnapshots, NotAWorkingTree, Snapshot, SnapshotUnavailable

Files = Annotated[
    dict[str, str] | None,
    Field(description="Files to create in the sandbox's workspace: relative path -> text content."),
]
TimeoutS = Annotated[float, Field(gt=0, le=300, description="Wall-clock limit in seconds.")]
FAILING_LISTED = 50


class RunCodeResult(BaseModel):
    status: str = Field(description="ok | error | timeout | memory_limit | output_limit | killed | sandbox_error")
    exit_code: int | None
    stdout: str
    stderr: str
    duration_ms: float
    truncated: bool = Field(description="True if stdout or stderr was cut (by the sandbox or to fit the reply).")
    detail: str = ""


class RunTestsResult(RunCodeResult):
    passed: bool = Field(description="True when pytest reported every test it collected as passing.")
    tests_passed: int | None = Field(None, description="Passing tests, from pytest's report (None without one).")
    tests_failed: int | None = Field(None, description="Failing tests (errors too), from pytest's report.")
    failing: list[str] = Field(
        default_factory=list, description=f"Ids of the failing tests (the first {FAILING_LISTED}), from the report."
    )
    verdict: str = Field(
        description="What this run counts for: progress only; the episode's verified reward is rlide's own run of "
        "the project's tests on the end state at end_episode. Says where that verifier stands and why a run "
        "has no report (pytest crashed, a limit was hit)."
    )
    episode_id: str
    workspace: str | None = Field(None, description="What of the served workspace was sent, or why nothing was.")


def _fit(text: str, budget: int) -> tuple[str, bool]:
    """Head and tail of `text` within `budget` characters: errors are usually at the end."""
    if len(text) <= budget:
        return text, False
    half = max(budget // 2, 0)
    return text[:half] + f"\n[... {len(text) - 2 * half} characters omitted ...]\n" + text[len(text) - half :], True


_FAILURES = re.compile(r"^=+ (?:FAILURES|ERRORS) =+$", re.MULTILINE)
_SUMMARY = re.compile(r"^=+ short test summary info =+$", re.MULTILINE)
_SECTION = re.compile(r"^_{3,} .+ _{3,}$", re.MULTILINE)
MIN_SECTION = 300
"""Characters a failure section keeps at least when a long report is cut: its end holds the assertion."""


def fit_test_output(text: str, budget: int) -> tuple[str, bool]:
    """pytest's output within `budget`, cut so that what an agent acts on survives: the short test
    summary (every failing test's id and message) and a share of each failure section (its start and
    its end, where the assertion is), before the progress lines (a real suite's dots and names).
    Output without pytest's failure sections is cut to its head and tail."""
    found = _FAILURES.search(text)
    if len(text) <= budget or found is None:
        return _fit(text, budget)
    summary = _SUMMARY.search(text, found.start())
    end = summary.start() if summary else len(text)
    head, body, tail = text[: found.start()], text[found.start() : end], text[end:]
    tail, _ = _fit(tail, budget * 3 // 10)
    head, _ = _fit(head, min(len(head), budget // 10))
    left = max(budget - len(head) - len(tail) - 100, MIN_SECTION)
    starts = [m.start() for m in _SECTION.finditer(body)] or [0]
    sections = [body[: starts[0]]] + [body[a:b] for a, b in zip(starts, [*starts[1:], len(body)], strict=True)]
    kept = max(1, min(len(sections), left // MIN_SECTION))
    share = left // kept
    parts = [_fit(section, share)[0] for section in sections[:kept]]
    if kept < len(sections):
        parts.append(f"\n[... {len(sections) - kept} more failure sections omitted: see the summary below ...]\n")
    return head + "".join(parts) + tail, True


def _longest(result: RunResult) -> int:
    return max(len(result.stdout), len(result.stderr))


def _result_fields(
    result: RunResult, budget: int, keep: Callable[[str, int], tuple[str, bool]] = _fit
) -> dict[str, Any]:
    stdout, cut_out = keep(result.stdout, budget)
    stderr, cut_err = _fit(result.stderr, budget)
    return {
        "status": result.status.value,
        "exit_code": result.exit_code,
        "stdout": stdout,
        "stderr": stderr,
        "duration_ms": round(result.duration_ms, 2),
        "truncated": result.truncated or cut_out or cut_err,
        "detail": result.detail,
    }


async def _run(ctx: Context[Any, Any], request: RunRequest) -> RunResult:
    """Run in the pool, reporting progress each second; cancelling the call kills the run."""
    state = app_state(ctx)
    try:
        pool = await state.execution.pool()
    except SandboxError as exc:
        raise ToolError(f"code execution is unavailable here: {exc}") from exc
    return await progress_while(ctx, lambda: pool.run(request), "running", total=request.timeout_s)


SKIPPED_NAMED = 5  # left-out paths named in run_tests' workspace line
CHANGED_RECORDED = 100  # paths differing from HEAD recorded with a run_tests step


def workspace_files(settings: Settings) -> tuple[Snapshot | None, str]:
    """The served working tree as sent to a test run (None when there is none) and a line saying what
    was sent (nothing, and why, when no workspace is served or it is not a git working tree). The
    commit it is at goes into the recorded step, so the episode can be re-checked from that commit
    later (`training.scenarios.base`)."""
    root = settings.served_workspace
    if root is None:
        return None, f"not sent: {settings.no_workspace_reason()}"
    try:
        snapshot = GitSnapshots().working_tree(root)
    except NotAWorkingTree as exc:
        return None, f"not sent: {exc}; only `files` were (run `git init` there to send its files)"
    except SnapshotUnavailable as exc:
        raise ToolError(f"the served workspace cannot be sent: {exc}") from exc
    if snapshot.commit:  # and what differs from it: the files an agent edited on disk (files_touched)
        note_step(commit=snapshot.commit, repo=str(root), changed=list(snapshot.changed[:CHANGED_RECORDED]))
    at = f" (HEAD {snapshot.commit[:12]})" if snapshot.commit else " (no commit yet)"
    line = f"{len(snapshot.files)} files of {root} as on disk{at}, then `files` and `patch`"
    if snapshot.skipped:
        named = ", ".join(snapshot.skipped[:SKIPPED_NAMED])
        more = f" and {len(snapshot.skipped) - SKIPPED_NAMED} more" if len(snapshot.skipped) > SKIPPED_NAMED else ""
        line += f"; left out (binary, symlink, submodule or an untracked credentials file): {named}{more}"
    return snapshot, line


def _request(**fields: Any) -> RunRequest:
    try:
        return RunRequest(**fields)
    except (ValidationError, InvalidRequest) as exc:
        raise ToolError(f"invalid run request: {request_problem(exc)}") from exc


async def run_code(
    code: Annotated[
        str, Field(min_length=1, max_length=1_000_000, description="Program (python, node) or script (shell, bash).")
    ],
    ctx: Context[Any, Any],
    language: Annotated[
        str,
        Field(
            max_length=20,
            description="shell is POSIX sh, bash is bash.",
            json_schema_extra={"enum": [*get_args(Language), *LANGUAGE_ALIASES]},
        ),
    ] = "python",
    stdin: Annotated[str | None, Field(max_length=1_000_000)] = None,
    timeout_s: TimeoutS = 10.0,
    files: Files = None,
) -> RunCodeResult:
    """Run code in an isolated sandbox (no network, no host files, CPU/memory/time limits) and return its output."""
    result = await _run(
        ctx, _request(language=language, code=code, stdin=stdin, timeout_s=timeout_s, files=files or {})
    )
    limit = app_state(ctx).settings.max_result_chars
    return fit_result(lambda budget: RunCodeResult(**_result_fields(result, budget)), limit, _longest(result))


async def run_tests(
    ctx: Context[Any, Any],
    test_command: Annotated[
        str | None, Field(max_length=10_000, description="Shell command, e.g. 'python -m pytest -q'.")
    ] = None,
    tests: Annotated[
        str | None,
        Field(
            max_length=1_000_000,
            description="Python test code to run instead: test_* functions and Test* classes run under pytest; "
            "code without them runs as a script, its asserts being the tests.",
        ),
    ] = None,
    files: Files = None,
    patch: Annotated[
        str | None, Field(max_length=2_000_000, description="Unified diff applied to files first.")
    ] = None,
    use_workspace: Annotated[
        bool,
        Field(
            description="Start from the served workspace's files (a git working tree: tracked and untracked files "
            "that are not ignored, as on disk now); `files` and `patch` go on top. False: only `files`."
        ),
    ] = True,
    timeout_s: TimeoutS = 60.0,
    memory_mb: Annotated[
        int, Field(ge=64, le=16384, description="Memory the run may hold (all its processes), in MB.")
    ] = 2048,
    episode_id: EpisodeId = None,
) -> RunTestsResult:
    """Run a test command (or test code) in the sandbox on the served workspace's files, with `files` written
    over them and an optional patch applied, and return the failing tests. Runs show progress: the episode's
    verified reward is rlide's own run of the project's tests on the workspace at end_episode (the tests
    that failed at start_episode must pass, none that passed may break), whatever runs are made here."""
    if (test_command is None) == (tests is None):
        raise ToolError("give exactly one of test_command (a shell command) or tests (Python test code)")
    state = app_state(ctx)
    target = episode_id or await state.recorder.ensure_episode(ctx.request_context, "run_tests")
    snapshot: Snapshot | None = None
    workspace: str | None = None
    try:
        verifier = await state.recorder.run(state.store.verifier, target)
        if use_workspace:
            snapshot, workspace = await anyio.to_thread.run_sync(workspace_files, state.settings)
            # The agent's work so far, as the tests see it.
            root = state.settings.served_workspace
            await state.recorder.run(capture, state.store, root, target, StateKind.run_tests, snapshot=snapshot)
    except EpisodeNotFound as exc:  # an episode id the log does not know (its verifier reads as none)
        raise ToolError(f"{exc}: call list_episodes, or start_episode") from exc
    run_files = {**(snapshot.files if snapshot is not None else {}), **(files or {})}
    try:
        given = TestRunRequest(
            files=run_files,
            patch=patch,
            test_command=test_command,
            tests=tests,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
        )
        request = await anyio.to_thread.run_sync(prepare_test_run, given)
    except (ValidationError, InvalidRequest) as exc:
        raise ToolError(f"invalid test run: {request_problem(exc)}") from exc
    result = await _run(ctx, request)
    outcome = read_test_run(request, result)
    result = shown_test_run(request, result)
    report = outcome.report
    failing = sorted(report.ids("failed", "error")) if report is not None else []
    verdict = f"{_what_happened(result, outcome)}progress only: the verifier is {describe_verifier(verifier)}"
    return fit_result(
        lambda budget: RunTestsResult(
            **_result_fields(result, budget, keep=fit_test_output),
            passed=report is not None and report.failed == 0 and report.passed > 0,
            tests_passed=None if report is None else report.passed,
            tests_failed=None if report is None else report.failed,
            failing=failing[:FAILING_LISTED],
            verdict=verdict,
            episode_id=target,
            workspace=workspace,
        ),
        state.settings.max_result_chars,
        _longest(result),
    )


def _what_happened(result: RunResult, outcome: TestRunOutcome) -> str:
    """Why a run has no complete report, said first: a crash or a limit must never read as a result."""
    if result.status is RunStatus.SANDBOX_ERROR:
        return f"the sandbox failed, not the tests ({result.detail}); "
    if result.status in (RunStatus.TIMEOUT, RunStatus.MEMORY_LIMIT, RunStatus.OUTPUT_LIMIT, RunStatus.KILLED):
        return f"the run ended by {result.status.value} ({result.detail or 'a limit'}): tests after that never ran; "
    report = outcome.report
    if report is None:
        return f"no test report: {outcome.reason}; "
    if report.unreported:
        return f"pytest stopped before {len(report.unreported)} collected tests ran (counted as errors); "
    if report.exitstatus not in (0, 1):
        return f"pytest ended with exit status {report.exitstatus} (an internal or usage error: read stderr); "
    return ""


_EXEC = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
TOOLS = (
    (run_code, _EXEC.model_copy(update={"title": "Run code (sandboxed)"})),
    (run_tests, _EXEC.model_copy(update={"title": "Run tests (sandboxed)"})),
)
