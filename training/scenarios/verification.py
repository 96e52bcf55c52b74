"""An episode's verifier comes from the project, and rlide measures the end state itself.

SWE-bench's rule, applied to an IDE: the tests that judge a fix come from the repository, never from
the candidate. At `start_episode` (`begin`) rlide reads the project's test configuration at the
commit the workspace is at (`envpool.verifiers.project`) and fingerprints its virtualenv; then
(`establish`, in the background) it runs the project's tests on the start state (the commit plus the
uncommitted edits of that moment, where the bug usually is) with the commit's test files: the tests
that fail are FAIL_TO_PASS, those that pass PASS_TO_PASS. A run that crashed, was killed, hit a
limit or left a collected test without an outcome never defines the task. At `end_episode`, or when
an idle episode times out (`verify_end`), rlide runs the same verifier on the captured end state
and that measurement is the episode's verified tests reward, whatever runs the agent chose to make.

Every judged run:
- gets the start commit's test files back, whatever the candidate's tree holds under a test path
  (`judged_tree`: decided on the resulting tree, so renames and quoted names change nothing);
- runs rlide's trusted pytest runner (`rlide_run.py`), so no workspace module runs before pytest
  and rlide's report plugin, and the workspace cannot shadow pytest, a plugin or a dependency;
- is refused when the project's virtualenv changed during the episode (its fingerprint: a
  `sitecustomize.py` or a `pytest11` plugin written into it would run in the sandbox);
- counts a doctest whose examples the candidate edited as failing (`changed_doctests`).

The monitor (`envpool.verifiers.monitor`) reads the episode's change beside the verifier: what no
report can see (an object equal to everything, reaching for pytest's internals) is flagged, and a
flagged episode is not trained on until a person clears it.

Runs go through a `Runner` (a function from a sandbox request to its result): the MCP server passes
its pool, the training worker its `SandboxRunner`.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from envpool.sandbox.base import InvalidRequest, RunRequest, RunResult, RunStatus, TestRunRequest, prepare_test_run
from envpool.sandbox.base import read_test_run as read_outcome
from envpool.sandbox.sites import PythonSites
from envpool.verifiers import fail_to_pass
from envpool.verifiers.monitor import STRONG_KINDS, inspect_change
from envpool.verifiers.project import (
    ProjectConfigError,
    ProjectTests,
    authored_tests,
    changed_doctests,
    detect,
    judged_tree,
    trusted_files,
)
from envpool.verifiers.reports import PASSED, PLUGIN_FOLDER, TestReport
from episodes.records import EpisodeVerifier, StateKind, VerifierState, VerifierVerdict, WorkspaceState, utcnow
from episodes.store import EpisodeStore
from training.scenarios.edits import EditError, FunctionSite, apply_answer
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.snapshots import GitSnapshots

log = structlog.get_logger(__name__)

EXACT_OMISSIONS = ("(installed files)", "(credentials)")
"""What a recorded state may leave out and still be rebuilt exactly: no run ever gets those files."""


class StateNotExact(VerifierUnavailable):
    """A recorded state left out a file a run would get (binary, too large, not a regular file)."""


class TreeRefused(VerifierUnavailable):
    """The sandbox refuses the tree itself (too many files, too large): trying again changes nothing."""


Runner = Callable[[RunRequest], RunResult]
"""Runs one sandbox request (the MCP server's pool, the worker's sandbox)."""
NAMED = 5
"""Tests named in a verdict line; the verdict's lists hold them all."""
OUTPUT_TAIL = 1_500


@dataclass(frozen=True)
class ProjectSetup:
    """What a judged run needs to know of the project besides its files: where its virtualenv is (to
    fingerprint it) and which of its folders are import roots (an editable install's `src`)."""

    settings_command: str | None = None
    settings_memory_mb: int | None = None
    settings_timeout_s: float | None = None
    site: Path | None = None
    import_roots: tuple[str, ...] = ()

    @property
    def trusted_folders(self) -> list[Path]:
        """What a judged run executes besides the workspace and the standard library, all of it
        writable by the user an IDE agent runs as: the project's virtualenv (bound live into the
        sandbox), pytest's site and rlide's plugin folder."""
        folders = [Path(PLUGIN_FOLDER), Path(PythonSites().tools_site)]
        if self.site is not None:
            folders.append(self.site.parents[2] if len(self.site.parents) > 2 else self.site)
        return folders


def environment_fingerprint(folders: Sequence[Path]) -> str:
    """A digest of `folders` as they are now: every file's path, size, modification and change time
    (ctime cannot be set back by a user), `__pycache__` left out (the IDE's own Python writes there;
    judged runs read no cached bytecode: `rlide_run.py`)."""
    digest = hashlib.sha256()
    stack = sorted(folders, reverse=True)
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError as exc:
            digest.update(f"{folder}: {exc.strerror}\n".encode())
            continue
        for entry in entries:
            if entry.name == "__pycache__":
                continue
            info = entry.stat(follow_symlinks=False)
            digest.update(
                f"{entry.path}\0{info.st_mode}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ctime_ns}\n".encode()
            )
            if stat.S_ISDIR(info.st_mode):
                stack.append(Path(entry.path))
    return digest.hexdigest()


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _applied(tree: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """`tree` with a state's changed files written over it and its deleted ones removed."""
    out = dict(tree)
    for path, text in changes.items():
        if text is None:
            out.pop(path, None)
        else:
            out[path] = text
    return out


def _output_tail(result: RunResult) -> str:
    text = (result.stdout + result.stderr).strip()
    return text[-OUTPUT_TAIL:]


def _names(tests: list[str]) -> str:
    more = f" and {len(tests) - NAMED} more" if len(tests) > NAMED else ""
    return ", ".join(tests[:NAMED]) + more


@dataclass(frozen=True)
class JudgedRun:
    """A judged run of the verifier on a tree: the reward, what happened, the tests still failing."""

    reward: float
    line: str
    still_failing: list[str]
    broken: list[str]


def judged_request(tests: ProjectTests, files: dict[str, str], head: Mapping[str, str]) -> TestRunRequest:
    """The sandbox request of a judged run of `files` (a `judged_tree`) with the project's tests; the
    modules it imports from the workspace are those the start commit (`head`) defines."""
    if tests.command is not None:
        return TestRunRequest(
            files=files, test_command=tests.command, timeout_s=tests.timeout_s, memory_mb=tests.memory_mb
        )
    return TestRunRequest(
        files=files,
        pytest_args=list(tests.pytest_args),
        own_modules=tests.own_modules(head),
        timeout_s=tests.timeout_s,
        memory_mb=tests.memory_mb,
    )


_LIMITS = {
    RunStatus.TIMEOUT: "it hit the time limit ({timeout:.0f}s; {timeout_from})",
    RunStatus.MEMORY_LIMIT: "it hit the memory limit ({memory} MB; [tool.rlide] test_memory_mb)",
    RunStatus.OUTPUT_LIMIT: "its output passed the limit",
    RunStatus.KILLED: "it was killed",
}


def run_judged(
    run: Runner, tests: ProjectTests, files: dict[str, str], head: Mapping[str, str]
) -> tuple[RunResult, TestReport | None, str]:
    """Run `files` with the project's tests in the sandbox: the result, its report (None without one)
    and, when the run did not end as a test run does, why. Raises `VerifierUnavailable` when the
    sandbox failed (not the tests' doing: judge nothing)."""
    try:
        request = prepare_test_run(judged_request(tests, files, head))
    except InvalidRequest as exc:
        raise TreeRefused(f"the workspace cannot be sent to the sandbox: {exc}") from exc
    result = run(request)
    if result.status is RunStatus.SANDBOX_ERROR:
        raise VerifierUnavailable(f"the sandbox failed, not the tests: {result.detail}")
    outcome = read_outcome(request, result)
    if result.status in _LIMITS:
        return (
            result,
            outcome.report,
            _LIMITS[result.status].format(
                timeout=tests.timeout_s, timeout_from=tests.timeout_from, memory=tests.memory_mb
            ),
        )
    if outcome.report is None:
        return result, None, outcome.reason
    return result, outcome.report, ""


def judge_tree(
    run: Runner,
    tests: ProjectTests,
    sets: tuple[list[str], list[str]],
    files: dict[str, str],
    head: Mapping[str, str],
    doctests: Sequence[str] = (),
    *,
    partial: bool,
) -> JudgedRun:
    """One judged run of `files` (already a `judged_tree`) against (FAIL_TO_PASS, PASS_TO_PASS): the
    fail-to-pass reward, or -1 when the run did not finish as a test run does (the start state's run
    did, under the same limits: the candidate's code is why). The doctest items of the source files
    in `doctests` (whose examples the candidate edited) count as failing."""
    f2p, p2p = sets
    _, report, why = run_judged(run, tests, files, head)
    if report is None or not report.complete:
        what = why or f"pytest ended with exit status {report.exitstatus if report else '?'}"
        return JudgedRun(-1.0, f"the tests did not finish as a test run does ({what}): all count as failing", f2p, [])
    outcomes = {
        test: "failed" if test.split("::", 1)[0] in doctests else outcome for test, outcome in report.outcomes.items()
    }
    judged = fail_to_pass.judge(TestReport(outcomes, report.exitstatus), f2p, p2p, partial=partial)
    still = [test for test in f2p if outcomes.get(test) not in PASSED]
    broken = [test for test in p2p if outcomes.get(test) not in PASSED]
    line = judged.line
    if still:
        line += f"; still failing: {_names(still)}"
    if doctests:
        line += f"; doctest examples edited (counted as failing): {_names(list(doctests))}"
    return JudgedRun(judged.reward, line, still, broken)


def trusted_texts(digests: Mapping[str, str | None], head: Mapping[str, str], commit: str) -> dict[str, str | None]:
    """The start commit's trusted files as a verifier recorded them (path -> digest, None: must not
    exist), read from the commit and checked against the digests."""
    out: dict[str, str | None] = {}
    for path, digest in digests.items():
        text = head.get(path)
        if digest is not None and (text is None or _text_digest(text) != digest):
            raise VerifierUnavailable(f"{path} at {commit[:12]} is not what the verifier recorded")
        out[path] = text if digest is not None else None
    return out


ANSWER_TIMEOUT_S = 60.0
"""Longest judged run of a model's answer: to a replayed episode (`replay_reward`) or to a bug
instance (`bug_tasks.attempt.pose`), unless the project's own limit is lower."""


def answer_limits(tests: ProjectTests, timeout_s: float | None = None) -> ProjectTests:
    """`tests` as a model's answer is judged with them: within `timeout_s` (default
    `ANSWER_TIMEOUT_S`, read when called), or the project's own limit if lower. An answer sampled
    from a policy in training that loops forever would otherwise hold a rollout for the project's
    whole limit (300 s by default), and a hang is a fail either way."""
    timeout_s = ANSWER_TIMEOUT_S if timeout_s is None else timeout_s
    if tests.timeout_s <= timeout_s:
        return tests
    return replace(tests, timeout_s=timeout_s, timeout_from="the limit on judging a model's answer")


def replay_reward(
    data: Mapping[str, Any], answer: str, *, files_at: Callable[[], dict[str, str]], run: Runner
) -> float:
    """A student's answer to a replayed episode, in [0, 1]: its edits (SEARCH/REPLACE blocks,
    whole-function rewrites of the functions the prompt showed, or a diff: `edits.apply_answer`)
    applied to the episode's start state (`data`: a log scenario's verifier,
    `training.scenarios.base`), then judged like the episode's end state. `files_at` reads the start
    commit's files. An answer with no edit that applies, or one that changes nothing, is the start
    state: 0, with no run. A scenario logged before `shown` was recorded still takes diffs and
    SEARCH/REPLACE blocks that name their file. The run is held to `answer_limits`."""
    tests = answer_limits(ProjectTests.from_json(data["project"]))
    head = files_at()
    start = _applied(head, {**data.get("files", {}), **dict.fromkeys(data.get("deleted", []))})
    shown = {name: FunctionSite(path, qualname) for name, (path, qualname) in data.get("shown", {}).items()}
    try:
        tree = apply_answer(start, answer, shown, data.get("excerpts", ()))
    except EditError:
        return 0.0
    touched = {path for path in start.keys() | tree.keys() if start.get(path) != tree.get(path)}
    if not touched:
        return 0.0
    trusted = trusted_texts(data["trusted"], head, "the start commit")
    doctests = changed_doctests(start, tree, tests, touched)
    sets = (list(data["fail_to_pass"]), list(data.get("pass_to_pass") or []))
    judged = judge_tree(run, tests, sets, judged_tree(tree, trusted, tests), head, doctests, partial=True)
    return (judged.reward + 1.0) / 2.0


class EpisodeVerification:
    """The project's verifier of the MCP server's episodes: `begin`, `establish`, `verify_end`."""

    def __init__(
        self, store: EpisodeStore, run: Runner, setup: ProjectSetup, snapshots: GitSnapshots | None = None
    ) -> None:
        self.store = store
        self.run = run
        self.setup = setup
        self.snapshots = snapshots or GitSnapshots()

    # -- start ----------------------------------------------------------------------------------

    def begin(self, episode_id: str, workspace: Path, commit: str) -> EpisodeVerifier:
        """The project's verifier for an episode starting at `commit` of `workspace`, pending until
        `establish` has run its start state; unavailable, with why, when the project has none."""
        if not commit:
            return self.unavailable(episode_id, "the workspace has no commit yet: its tests are not trusted")
        try:
            head = self.snapshots.files(workspace, commit).files
            tests = detect(
                head,
                command=self.setup.settings_command,
                memory_mb=self.setup.settings_memory_mb,
                timeout_s=self.setup.settings_timeout_s,
                import_roots=self.setup.import_roots,
            )
        except (ProjectConfigError, VerifierUnavailable) as exc:  # a bad [tool.rlide]; a tree too large to send
            return self.unavailable(episode_id, str(exc))
        if tests is None:
            return self.unavailable(
                episode_id,
                "the project has no pytest configuration and no test file at its HEAD commit: nothing can verify"
                " the work (set [tool.rlide] test_command in pyproject.toml, or RLIDE_TEST_COMMAND)",
            )
        return self.store.set_verifier(
            episode_id,
            tests.display,
            project=tests.to_json(),
            commit=commit,
            environment=environment_fingerprint(self.setup.trusted_folders),
        )

    def unavailable(self, episode_id: str, reason: str) -> EpisodeVerifier:
        """Record that the episode has no verifier, and why (it stays unverified unless a person rates it)."""
        return self.store.set_verifier(
            episode_id, "", project=None, commit=None, environment=None, state=VerifierState.unavailable, reason=reason
        )

    def establish(self, episode_id: str, start_tree: Mapping[str, str] | None = None) -> EpisodeVerifier:
        """Run the start state (the files as they were at `start_episode`, else as the log recorded
        them) with the commit's test files, and fix FAIL_TO_PASS and PASS_TO_PASS from it. Raises
        `VerifierUnavailable` when the sandbox failed (try again later: it stays pending)."""
        verifier = self._verifier(episode_id)
        if verifier.state is not VerifierState.pending:
            return verifier
        tests, head = self._tests_and_head(episode_id, verifier)
        try:
            tree = dict(start_tree) if start_tree is not None else self._state_tree(episode_id, StateKind.start, head)
            trusted = trusted_files(head, tests)
            result, report, why = run_judged(self.run, tests, judged_tree(tree, trusted, tests), head)
        except (StateNotExact, TreeRefused) as exc:
            self.store.verifier_unavailable(episode_id, str(exc))
            return self._verifier(episode_id)
        if report is None or not report.complete:
            reason = why or (
                f"{len(report.unreported)} collected tests never got an outcome" if report and report.unreported else
                f"pytest ended with exit status {report.exitstatus if report else '?'}"
            )  # fmt: skip
            self.store.verifier_unavailable(
                episode_id, f"the start state's run cannot define the task: {reason}\n{_output_tail(result)}"
            )
            return self._verifier(episode_id)
        sets = fail_to_pass.start(report)
        if sets is None:
            self.store.verifier_unavailable(episode_id, "no test fails at the start: there is no work to verify")
            return self._verifier(episode_id)
        # Expected values the tests read from files outside the test folders are test code too.
        data = [path for path, by in report.opened.items() if tests.is_test(by) and not tests.is_test(path)]
        tests = tests.with_data_files(data)
        trusted = trusted_files(head, tests)
        digests = {path: None if text is None else _text_digest(text) for path, text in trusted.items()}
        return self.store.establish_verifier(episode_id, sets[0], sets[1], digests, tests.to_json())

    # -- end ------------------------------------------------------------------------------------

    def verify_end(
        self,
        episode_id: str,
        end_tree: Mapping[str, str] | None = None,
        start_tree: Mapping[str, str] | None = None,
    ) -> VerifierVerdict:
        """Run the verifier on the episode's end state (the files as they were at `end_episode`, else
        its last recorded state) and record the measurement as its verified tests reward; the monitor's
        flags on its change (from `start_tree`, else the recorded start) are recorded first. Raises
        `VerifierUnavailable` when the sandbox failed."""
        verifier = self.establish(episode_id, start_tree)
        if verifier.state is VerifierState.unavailable:
            return self._not_verified(episode_id, f"not verified: {verifier.reason}")
        tests, head = self._tests_and_head(episode_id, verifier)
        try:
            start = dict(start_tree) if start_tree is not None else self._state_tree(episode_id, StateKind.start, head)
            tree = dict(end_tree) if end_tree is not None else self._state_tree(episode_id, StateKind.end, head)
        except StateNotExact as exc:
            return self._unverifiable(episode_id, exc)
        assert verifier.commit is not None and verifier.fail_to_pass is not None
        trusted = trusted_texts(verifier.trusted_files, head, verifier.commit)
        changed = {path for path in start.keys() | tree.keys() if start.get(path) != tree.get(path)}
        flags = inspect_change({p: start.get(p) for p in changed}, {p: tree.get(p) for p in changed}, tests.is_test)
        self.store.add_flags(episode_id, [(f.kind, f.path, f.line, f.detail) for f in flags if f.kind in STRONG_KINDS])
        authored = authored_tests(tree, trusted, tests)
        doctests = changed_doctests(start, tree, tests, changed)
        sets = (verifier.fail_to_pass, verifier.pass_to_pass or [])
        try:
            judged = judge_tree(self.run, tests, sets, judged_tree(tree, trusted, tests), head, doctests, partial=False)
        except TreeRefused as exc:
            return self._unverifiable(episode_id, exc)
        # After the run: a change made while it ran, and put back, still moved a change time.
        if verifier.environment != environment_fingerprint(self.setup.trusted_folders):
            line = (
                "not verified: the project's virtualenv, pytest's site or rlide's plugin folder changed during the"
                " episode (a file in one was added, removed or rewritten), so a run in it is not trusted;"
                " recreate the virtualenv and start a new episode"
            )
            self.store.add_flags(episode_id, [("environment_changed", None, None, line)])
            return self._not_verified(episode_id, line, authored)
        line = judged.line
        if authored:
            line += f"; tests the agent wrote or changed, not judged: {_names(authored)}"
            line += self._authored_evidence(tests, tree, trusted, head, authored)
        verdict = VerifierVerdict(
            reward=judged.reward,
            line=line,
            still_failing=judged.still_failing,
            broken=judged.broken,
            authored_tests=authored,
            checked_at=utcnow(),
        )
        self.store.record_verdict(episode_id, verdict)
        return verdict

    def _authored_evidence(
        self,
        tests: ProjectTests,
        tree: Mapping[str, str],
        trusted: Mapping[str, str | None],
        head: Mapping[str, str],
        authored: list[str],
    ) -> str:
        """How the agent's own test modules fare on its end state, for people to read: run on the judged
        tree (the commit's conftest and configuration) with those modules added, never the judge."""
        modules = [p for p in authored if p in tree and p.endswith(".py") and posixpath.basename(p) != "conftest.py"]
        if not modules:
            return ""
        files = judged_tree(tree, trusted, tests) | {path: tree[path] for path in modules}
        own = replace(tests, pytest_args=tuple(modules), command=None)
        try:
            _, report, why = run_judged(self.run, own, files, head)
        except VerifierUnavailable as exc:
            return f" (they did not run: {exc})"
        if report is None:
            return f" (they did not run to a report: {why})"
        return f" (run as evidence: {report.passed} passed, {report.failed} failed)"

    def _unverifiable(self, episode_id: str, why: VerifierUnavailable) -> VerifierVerdict:
        """The end state exists but cannot be judged as it is (left out of the log, refused by the
        sandbox): not verified, and flagged for a person."""
        self.store.add_flags(episode_id, [("unverifiable_state", None, None, str(why))])
        return self._not_verified(episode_id, f"not verified: {why}")

    def _not_verified(self, episode_id: str, line: str, authored: list[str] | None = None) -> VerifierVerdict:
        """Record that the end could not be measured, and why: the episode stays unverified."""
        verdict = VerifierVerdict(reward=None, line=line, authored_tests=authored or [], checked_at=utcnow())
        self.store.record_verdict(episode_id, verdict)
        return verdict

    # -- pieces ---------------------------------------------------------------------------------

    def _verifier(self, episode_id: str) -> EpisodeVerifier:
        verifier = self.store.verifier(episode_id)
        if verifier is None:
            raise VerifierUnavailable(f"episode {episode_id} has no verifier: it started without a served workspace")
        return verifier

    def _tests_and_head(self, episode_id: str, verifier: EpisodeVerifier) -> tuple[ProjectTests, dict[str, str]]:
        if verifier.project is None or not verifier.commit:
            raise VerifierUnavailable(f"episode {episode_id}'s verifier predates project verifiers: not re-checkable")
        workspace = self.store.get_episode(episode_id).workspace
        if workspace is None:
            raise VerifierUnavailable(f"episode {episode_id} names no workspace")
        return ProjectTests.from_json(verifier.project), self.snapshots.files(workspace, verifier.commit).files

    def _state_tree(self, episode_id: str, kind: StateKind, head: dict[str, str]) -> dict[str, str]:
        """A recorded state's whole tree: its commit's files with its changes (the last state of the
        kind; for the end, the last state recorded when no end was)."""
        states = self.store.workspace_states(episode_id)
        state: WorkspaceState | None = next((s for s in reversed(states) if s.kind is kind), None)
        if state is None and kind is StateKind.end and states:
            state = states[-1]
        if state is None:
            raise VerifierUnavailable(f"episode {episode_id} recorded no {kind.value} state of its workspace")
        inexact = [entry for entry in state.omitted if not entry.endswith(EXACT_OMISSIONS)]
        if inexact:  # its commit's version would stand in for what the agent really left there
            raise StateNotExact(
                f"the recorded {kind.value} state left out {_names(inexact)}, so it cannot be rebuilt exactly"
            )
        base = head if not state.commit or state.commit == self._verifier(episode_id).commit else None
        if base is None:
            workspace = self.store.get_episode(episode_id).workspace
            assert workspace is not None
            base = self.snapshots.files(workspace, state.commit).files
        return _applied(base, state.files)

    # -- recovery -------------------------------------------------------------------------------

    def finish_pending(self, episode_id: str) -> bool:
        """Run what a stopped server left of one episode (`EpisodeStore.pending_verifications`): its
        verifier never established, its end state never verified. False when it failed again (it
        stays pending)."""
        try:
            verifier = self.establish(episode_id)
            if verifier.end_requested:
                self.verify_end(episode_id)
        except VerifierUnavailable as exc:
            log.warning("verification.pending_failed", episode_id=episode_id, error=str(exc))
            return False
        return True
