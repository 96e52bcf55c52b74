"""Judging a candidate fix of a bug instance with the project's own tests, as SWE-bench does.

`prepare` reads the instance's repository at `base_commit` from its archive and builds:

- the **trusted test files**: the commit's test code (`envpool.verifiers.project`: what pytest's
  configuration and rlide's rules call test code: test folders, `conftest.py`, pytest's
  configuration, start-up files) with `test_patch` applied last; files `test_patch` touches outside
  those are trusted too. Every judged run gets these back, whatever the candidate's tree holds
  there (`judged_tree`), so a candidate that edits a test or adds a `conftest.py` changes nothing;
- the **start state**: the commit with `bug_patch` applied (what the model is given);
- **how the tests run**: rlide's trusted pytest runner with the test files of FAIL_TO_PASS and
  PASS_TO_PASS (or the instance's `pytest ...` test_command), or the instance's shell command.

`judge_files` runs a candidate tree through the episode verifiers' judged run
(`training.scenarios.verification.judge_tree`, `envpool.verifiers.fail_to_pass`): resolved means
every FAIL_TO_PASS test passes and every PASS_TO_PASS test still does. Nothing here is a second
verifier: it only assembles the instance's start state and trusted files for the existing one.
"""

from __future__ import annotations

import posixpath
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from envpool.sandbox import Sandbox, make_sandbox
from envpool.sandbox.base import RunResult
from envpool.verifiers.patches import PatchError, apply_patch
from envpool.verifiers.project import ProjectTests, changed_doctests, detect, judged_tree, trusted_files
from envpool.verifiers.reports import APPLIED_MARK, REPORT_MARK, TestReport
from training.scenarios.bug_tasks.instance import BugInstance
from training.scenarios.bug_tasks.repo import commit_files
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.verification import JudgedRun, Runner, judge_tree, run_judged

RunsFor = Callable[[tuple[str, ...]], Runner]
"""A sandbox runner whose runs put these workspace folders (import roots, `src`) on the path."""


@dataclass(frozen=True)
class PreparedInstance:
    instance: BugInstance
    head: dict[str, str]
    """The files of base_commit, test_patch applied (the trusted side's tree)."""
    start: dict[str, str]
    """base_commit with bug_patch applied: the tree the model fixes."""
    tests: ProjectTests
    trusted: dict[str, str | None]
    import_roots: tuple[str, ...]

    @property
    def sets(self) -> tuple[list[str], list[str]]:
        return list(self.instance.fail_to_pass), list(self.instance.pass_to_pass)


def import_roots(files: dict[str, str]) -> tuple[str, ...]:
    """`("src",)` for a src layout (a package under `src/`), else none: what `pip install -e .` adds."""
    return ("src",) if any(p.startswith("src/") and p.endswith("/__init__.py") for p in files) else ()


_CACHE: dict[tuple[str, int, int, str], dict[str, str]] = {}
_CACHE_LOCK = threading.Lock()


def _commit(archive: Path, commit: str) -> dict[str, str]:
    """The commit's files, read once per archive version (instances of one library share one archive)."""
    info = archive.stat() if archive.is_file() else None
    key = (str(archive), info.st_mtime_ns if info else 0, info.st_size if info else 0, commit)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key]
    files = commit_files(archive, commit)
    with _CACHE_LOCK:
        _CACHE[key] = files
    return files


def prepare(instance: BugInstance, folder: Path) -> PreparedInstance:
    """The instance's trees and tests (`folder`: the JSONL file's). Raises `VerifierUnavailable` when
    its archive, commit or patches do not give a tree (the instance's fault, not a candidate's)."""
    try:
        archive = instance.archive_path(folder)
    except ValueError as exc:
        raise VerifierUnavailable(f"{instance.instance_id}: {exc}") from exc
    base = _commit(archive, instance.base_commit)
    head: dict[str, str] = base
    touched: tuple[str, ...] = ()
    try:
        if instance.test_patch.strip():
            applied = apply_patch(base, instance.test_patch)
            head, touched = applied.files, applied.touched
        start = apply_patch(base, instance.bug_patch).files if instance.bug_patch.strip() else dict(base)
    except PatchError as exc:
        raise VerifierUnavailable(f"{instance.instance_id}: a patch of the instance does not apply: {exc}") from exc
    roots = import_roots(head)
    tests = detect(head, import_roots=roots) or ProjectTests(import_roots=roots)
    args = instance.pytest_args()
    tests = (
        replace(tests, pytest_args=args, command=None)
        if args is not None
        else replace(tests, command=instance.test_command)
    )
    tests = tests.with_data_files([path for path in touched if not tests.is_test(path)])
    return PreparedInstance(instance, head, start, tests, trusted_files(head, tests), roots)


def judge_files(prepared: PreparedInstance, runs_for: RunsFor, candidate: dict[str, str]) -> JudgedRun:
    """A candidate tree judged by fail-to-pass: reward 1.0 is resolved, -1.0 anything less."""
    changed = {p for p in prepared.start.keys() | candidate.keys() if prepared.start.get(p) != candidate.get(p)}
    doctests = changed_doctests(prepared.start, candidate, prepared.tests, changed)
    judged = judged_tree(candidate, prepared.trusted, prepared.tests)
    run = runs_for(prepared.import_roots)
    return judge_tree(run, prepared.tests, prepared.sets, judged, prepared.head, doctests, partial=False)


def failure_run(
    prepared: PreparedInstance, runs_for: RunsFor, files: dict[str, str] | None = None
) -> tuple[TestReport | None, str]:
    """FAIL_TO_PASS run on `files` (the start state by default) with short tracebacks: its report
    and its output as pytest printed it (what a prompt or a problem statement quotes)."""
    tests = replace(prepared.tests, pytest_args=(*prepared.instance.fail_to_pass, "--tb=short", "-q"), command=None)
    tree = judged_tree(files if files is not None else prepared.start, prepared.trusted, tests)
    result, report, _ = run_judged(runs_for(prepared.import_roots), tests, tree, prepared.head)
    return report, shown_output(result)


def shown_output(result: RunResult) -> str:
    """The output without the lines rlide's plugin and script wrote (and the separators before them)."""
    kept = [
        line.replace("\x1f", "")
        for line in result.stdout.splitlines()
        if not line.startswith((REPORT_MARK, APPLIED_MARK))
    ]
    return "\n".join(kept) + result.stderr


def is_source(prepared: PreparedInstance, path: str) -> bool:
    """A Python file of the project that is not test code: what a fix may change."""
    return path.endswith(".py") and path in prepared.start and not prepared.tests.is_test(posixpath.normpath(path))


__all__ = [
    "PreparedInstance",
    "RunsFor",
    "SandboxRuns",
    "failure_run",
    "import_roots",
    "is_source",
    "judge_files",
    "prepare",
]


class SandboxRuns:
    """Sandboxes of one backend, one per set of import roots (a src layout needs `src` on the path),
    started on first use: a `RunsFor`. Close it when done."""

    def __init__(self, backend: str = "bwrap") -> None:
        self.backend = backend
        self._boxes: dict[tuple[str, ...], Sandbox] = {}
        self._sites: list[tempfile.TemporaryDirectory[str]] = []
        self._lock = threading.Lock()

    def __call__(self, roots: tuple[str, ...]) -> Runner:
        with self._lock:
            if roots not in self._boxes:
                # The fork-server puts `project_paths` on the path only beside a project site: an
                # empty one stands in (the repository's dependencies are the standard library's).
                site = None
                if roots:
                    self._sites.append(tempfile.TemporaryDirectory(prefix="rlide-empty-site-"))
                    site = self._sites[-1].name
                self._boxes[roots] = make_sandbox(self.backend, project_paths=roots, project_site=site)
            return self._boxes[roots].run

    def close(self) -> None:
        with self._lock:
            boxes, self._boxes = list(self._boxes.values()), {}
            sites, self._sites = self._sites, []
        for box in boxes:
            box.close()
        for site in sites:
            site.cleanup()
