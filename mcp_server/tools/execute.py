"""Sandboxed execution tools: run code, run tests. A run of the episode's verifier becomes its verified
`tests` reward (fail-to-pass, from pytest's structured report); other runs are progress only."""

from __future__ import annotations

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
from envpool.verifiers import fail_to_pass
from envpool.verifiers.reports import TestRunOutcome
from envpool.verifiers.trusted import trusted_files, trusted_in_patch, with_trusted
from episodes.db import EpisodeNotFound
from episodes.records import EpisodeVerifier, RewardSource, StateKind
from episodes.store import EpisodeStore
from mcp_server.capture import capture
from mcp_server.middleware import note_step
from mcp_server.result_size import fit_result
from mcp_server.settings import Settings
from mcp_server.state import app_state
from mcp_server.tools.episodes import EpisodeId
from training.scenarios.snapshots import GitSnapshots, NotAWorkingTree, Snapshot, SnapshotUnavailable

Files = Annotated[
    dict[str, str] | None,
    Field(description="Files to create in the sandbox's workspace: relative path -> text content."),
]
TimeoutS = Annotated[float, Field(gt=0, le=300, description="Wall-clock limit in seconds.")]


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
    reward: float | None = Field(
        None,
        description="The verified `tests` reward recorded on the episode, in [-1, 1]; None when this run earns none.",
    )
    verdict: str = Field(description="What this run counts for: the episode's verifier and how it judged, or why not.")
    episode_id: str
    workspace: str | None = Field(None, description="What of the served workspace was sent, or why nothing was.")


def _fit(text: str, budget: int) -> tuple[str, bool]:
    """Head and tail of `text` within `budget` characters: errors are usually at the end."""
    if len(text) <= budget:
        return text, False
    half = budget // 2
    return text[:half] + f"\n[... {len(text) - 2 * half} characters omitted ...]\n" + text[len(text) - half :], True


def _longest(result: RunResult) -> int:
    return max(len(result.stdout), len(result.stderr))


def _result_fields(result: RunResult, budget: int) -> dict[str, Any]:
    stdout, cut_out = _fit(result.stdout, budget)
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
    outcome: list[RunResult] = []

    async def work() -> None:
        outcome.append(await pool.run(request))
        tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(work)
        elapsed = 0
        while True:
            await anyio.sleep(1)
            elapsed += 1
            await ctx.report_progress(min(elapsed, request.timeout_s), request.timeout_s, f"running ({elapsed}s)")
    return outcome[0]


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
    episode_id: EpisodeId = None,
) -> RunTestsResult:
    """Run a test command (or test code) in the sandbox on the served workspace's files, with `files` written
    over them and an optional patch applied. The episode's verifier is its first run with a failing test (or the
    command named at start_episode): its later runs earn the verified `tests` reward, -1 while a test that passed
    then fails and 2 * (share of its failing tests now passing) - 1 otherwise, with the test and configuration
    files of that first run. Other commands (a narrower -k, one file) show progress and earn nothing."""
    if (test_command is None) == (tests is None):
        raise ToolError("give exactly one of test_command (a shell command) or tests (Python test code)")
    state = app_state(ctx)
    target = episode_id or await state.recorder.ensure_episode(ctx.request_context, "run_tests")
    command = fail_to_pass.verifier_command(test_command, tests)
    snapshot: Snapshot | None = None
    workspace: str | None = None
    try:
        verifier = await state.recorder.run(state.store.verifier, target)
        if use_workspace:
            snapshot, workspace = await anyio.to_thread.run_sync(workspace_files, state.settings)
            # The agent's work so far, as the tests see it (kept whether or not the run earns a reward).
            root = state.settings.served_workspace
            await state.recorder.run(capture, state.store, root, target, StateKind.run_tests, snapshot=snapshot)
    except EpisodeNotFound as exc:  # an episode id the log does not know (its verifier reads as none)
        raise ToolError(f"{exc}: call list_episodes, or start_episode") from exc
    run_files = {**(snapshot.files if snapshot is not None else {}), **(files or {})}
    if verifier is not None and verifier.command == command and verifier.fail_to_pass is not None:
        touched = trusted_in_patch(patch) if patch else []
        if touched:
            raise ToolError(
                f"this is the episode's verifier ({command}), which runs its tests and their configuration as they"
                f" were on its first failing run: the patch changes {', '.join(touched[:5])}; change other files"
                " (a narrower command shows progress without the verified reward)"
            )
        run_files = with_trusted(run_files, verifier.trusted_files)
    try:
        given = TestRunRequest(
            files=run_files, patch=patch, test_command=test_command, tests=tests, timeout_s=timeout_s
        )
        request = await anyio.to_thread.run_sync(prepare_test_run, given)
    except (ValidationError, InvalidRequest) as exc:
        raise ToolError(f"invalid test run: {request_problem(exc)}") from exc
    result = await _run(ctx, request)
    outcome = read_test_run(request, result)
    result = shown_test_run(request, result)
    try:
        reward, verdict = await state.recorder.run(
            judge_run, state.store, target, command, verifier, outcome, result, run_files
        )
    except EpisodeNotFound as exc:
        raise ToolError(f"{exc}: the tests ran, but their reward has no episode; call list_episodes") from exc
    report = outcome.report
    return fit_result(
        lambda budget: RunTestsResult(
            **_result_fields(result, budget),
            passed=report is not None and report.failed == 0 and report.passed > 0,
            tests_passed=None if report is None else report.passed,
            tests_failed=None if report is None else report.failed,
            reward=reward,
            verdict=verdict,
            episode_id=target,
            workspace=workspace,
        ),
        state.settings.max_result_chars,
        _longest(result),
    )


def judge_run(
    store: EpisodeStore,
    episode_id: str,
    command: str,
    verifier: EpisodeVerifier | None,
    outcome: TestRunOutcome,
    result: RunResult,
    files: dict[str, str],
) -> tuple[float | None, str]:
    """The verified tests reward a run earns (recorded on the episode), or None, and a line saying why.
    A run with no structured report earns none: the sandbox failed, the patch did not apply, or no
    pytest ran to its end; neither does a command other than the episode's verifier."""
    if result.status is RunStatus.SANDBOX_ERROR:
        return None, f"no tests reward: the sandbox failed, not the tests ({result.detail})"
    if not outcome.applied:
        return None, "no tests reward: the patch did not apply (no test ran)"
    report = outcome.report
    if report is None:
        return None, f"no tests reward: {outcome.reason}"
    if verifier is not None and verifier.command != command:
        return None, f"progress only: the episode's verified reward comes from its verifier, `{verifier.command}`"
    if verifier is None or verifier.fail_to_pass is None:
        sets = fail_to_pass.start(report)
        if sets is None:
            return None, "no tests reward: no test failed, so this run names no work to verify"
        verifier = store.establish_verifier(episode_id, command, *sets, trusted_files(files))
        if verifier.command != command or verifier.fail_to_pass is None:  # another call established it first
            return None, f"progress only: the episode's verified reward comes from its verifier, `{verifier.command}`"
    judged = fail_to_pass.judge(report, verifier.fail_to_pass, verifier.pass_to_pass or [])
    store.add_reward(episode_id, RewardSource.tests, judged.reward, judged.line, verified=True)
    return judged.reward, f"the episode's verifier `{command}`: {judged.line}"


_EXEC = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
TOOLS = (
    (run_code, _EXEC.model_copy(update={"title": "Run code (sandboxed)"})),
    (run_tests, _EXEC.model_copy(update={"title": "Run tests (sandboxed)"})),
)
