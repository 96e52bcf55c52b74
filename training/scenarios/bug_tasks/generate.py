"""Make bug instances from a real library's sdist, SWE-smith style (`python -m training.scenarios.bug_tasks.generate`).

Here, not under `benchmarks/`, because it is library code the tests and `benchmarks/learning.py`
import; `benchmarks/bugs/` holds what it made and the commands that made it (its README).

1. The sdist is unpacked and committed to a fresh git repository with fixed dates and identity
   (`repo`): `base_commit` and the archive's bytes are the same on every machine.
2. The library's whole suite runs once in the sandbox (a run per test module) with a profiler
   plugin (`TRACE_PLUGIN`) that records which project functions each test calls: the tests that
   cover a function.
3. Functions are taken in an order drawn from the seed; each is assigned to train or held-out by
   a hash of (seed, file, function), so no function has bugs on both sides. For each, its
   mutations (`mutate`) are tried in a seeded order, running only its covering tests (by node id),
   until one makes some of them fail: FAIL_TO_PASS are those (they passed on the pristine source),
   PASS_TO_PASS a seeded sample of the covering tests that pass both ways.
4. The instance: `bug_patch` is the mutation as a diff, `patch` its reverse, `problem_statement`
   the failing tests and what their own frames and assertion messages said (frames inside the
   project are left out: they would show the mutated line).

Progress goes to stderr; the instances to the JSONL files named.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import fnmatch
import hashlib
import json
import random
import re
import shlex
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from envpool.sandbox.base import TestRunRequest, prepare_test_run, read_test_run
from envpool.verifiers.project import ProjectTests, detect
from envpool.verifiers.reports import PASSED
from training.scenarios.bug_tasks.instance import BugInstance
from training.scenarios.bug_tasks.judge import SandboxRuns, import_roots, shown_output
from training.scenarios.bug_tasks.mutate import Mutation, mutations
from training.scenarios.bug_tasks.repo import commit_tree, write_archive
from training.scenarios.verification import Runner, run_judged

TRACE_MARK = "RLIDE-TRACE "
TRACE_MODULE = "rlide_trace_test"
MAX_COVERING = 80
"""Covering tests run per mutation (a seeded sample when more): keeps a try to a few seconds."""
PASS_TO_PASS = 10
TRY_TIMEOUT_S = 90.0
"""A mutation that makes the tests hang (a negated loop condition) is dropped after this."""
MUTATIONS_PER_FUNCTION = 3
STATEMENT_LINES = 14
TRACE_PLUGIN = (
    '''"""Which project functions each test calls (bug-task generation only)."""
import json, os, sys, threading
import pytest
_OUT = os.fdopen(os.dup(1), "w")
_ROOT = os.getcwd() + "/"
_SOURCES = frozenset(json.loads(os.environ["RLIDE_TRACE_SOURCES"]))
_calls = {}
_tests = []
_keys = {}
def _trace(frame, event, arg):  # call events only: returning None asks for no line events
    code = frame.f_code
    key = _keys.get(code, 0)
    if key == 0:
        path = code.co_filename[len(_ROOT):] if code.co_filename.startswith(_ROOT) else None
        key = _keys[code] = f"{path}:{code.co_firstlineno}" if path in _SOURCES else None
    if key is not None:
        _calls.setdefault(key, set()).add(len(_tests) - 1)
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _tests.append(item.nodeid)
    sys.settrace(_trace)
    threading.settrace(_trace)
    try:
        yield
    finally:
        sys.settrace(None)
        threading.settrace(None)
def pytest_sessionfinish(session):
    _OUT.write("\\n'''
    + TRACE_MARK
    + """" + json.dumps({"tests": _tests, "calls": {k: sorted(v) for k, v in _calls.items()}}) + "\\n")
    _OUT.flush()
"""
)


def log(message: str) -> None:
    print(f"[bug-tasks] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Library:
    name: str
    repo: str
    files: dict[str, str]
    base_commit: str
    archive: Path
    tests: ProjectTests
    roots: tuple[str, ...]

    def test_files(self) -> list[str]:
        """The suite's test modules (what pytest collects by the project's patterns)."""
        return sorted(
            p for p in self.files
            if p.endswith(".py") and self.tests.is_test(p)
            and p.rsplit("/", 1)[-1] not in ("conftest.py", "__init__.py")
            and any(fnmatch.fnmatchcase(p.rsplit("/", 1)[-1], pattern) for pattern in self.tests.python_files)
        )  # fmt: skip

    def sources(self) -> list[str]:
        return sorted(p for p in self.files if p.endswith(".py") and not self.tests.is_test(p) and "/" in p)


def checkout(sdist: Path, archive: Path, repo: str) -> Library:
    """The sdist as a committed repository; its archive written at `archive`."""
    with tempfile.TemporaryDirectory(prefix="rlide-bug-gen-") as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        [root] = [p for p in Path(tmp).iterdir() if p.is_dir()]
        commit = commit_tree(root)
        archive.parent.mkdir(parents=True, exist_ok=True)
        write_archive(root, archive)
        files = {
            str(p.relative_to(root)): p.read_text(encoding="utf-8")
            for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts
        }
    roots = import_roots(files)
    tests = detect(files, import_roots=roots) or ProjectTests(import_roots=roots)
    return Library(sdist.name.split("-")[0].replace("_", "-"), repo, files, commit, archive, tests, roots)


def trace(lib: Library, run: Runner) -> tuple[dict[str, str], dict[tuple[str, int], list[str]]]:
    """The pristine suite's outcomes and, per (file, first line of a function), the tests that call
    it: one traced run per test module (each within the sandbox's time limit)."""
    outcomes: dict[str, str] = {}
    covering: dict[tuple[str, int], set[str]] = {}
    sources = shlex.quote(json.dumps(lib.sources()))
    # Named as test code: the report refuses hooks from any other file (a candidate's rewrite).
    files = dict(lib.files) | {f"{TRACE_MODULE}.py": TRACE_PLUGIN}
    for module in lib.test_files():
        command = f"RLIDE_TRACE_SOURCES={sources} python3 -m pytest -q -p {TRACE_MODULE} {shlex.quote(module)}"
        request = prepare_test_run(TestRunRequest(files=files, test_command=command, timeout_s=600, memory_mb=4096))
        result = run(request)
        outcome = read_test_run(request, result)
        traced = [line for line in result.stdout.splitlines() if line.startswith(TRACE_MARK)]
        if outcome.report is None or not traced:
            raise RuntimeError(f"the traced run of {module} gave no report: {outcome.reason}\n{result.stderr[-2000:]}")
        outcomes |= outcome.report.outcomes
        data = json.loads(traced[-1][len(TRACE_MARK) :])
        for key, indices in data["calls"].items():
            path, line = key.rsplit(":", 1)
            covering.setdefault((path, int(line)), set()).update(data["tests"][i] for i in indices)
        log(f"{lib.name}: traced {module}: {len(outcome.report.outcomes)} tests")
    return outcomes, {key: sorted(tests) for key, tests in covering.items()}


@dataclass(frozen=True)
class Target:
    path: str
    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    covering: list[str]


def targets(lib: Library, covering: dict[tuple[str, int], list[str]], passing: set[str]) -> list[Target]:
    found = []
    for path in lib.sources():
        tree = ast.parse(lib.files[path])
        nodes: list[tuple[str, ast.AST]] = [
            (n.name, n) for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            nodes += [
                (f"{cls.name}.{m.name}", m) for m in cls.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
        for qualname, node in nodes:
            assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            tests = sorted({*covering.get((path, node.lineno), []), *covering.get((path, first), [])} & passing)
            if tests:
                found.append(Target(path, qualname, node, tests))
    return found


def side(seed: int, target: Target, heldout_share: float) -> str:
    digest = hashlib.sha256(f"{seed}:{target.path}:{target.qualname}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") / 2**64 < heldout_share else "train"


def diff(path: str, before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}"))


def statement(failing: list[str], output: str, tests: ProjectTests) -> str:
    """What the failing tests say, never a frame inside the project (it would show the mutated line)."""
    lines = ["These tests fail and should pass:", *(f"- {t}" for t in failing[:8])]
    if len(failing) > 8:
        lines.append(f"- and {len(failing) - 8} more")
    shown: list[str] = []
    keep = False
    for line in output.splitlines():
        if re.match(r"^_{3,} .* _{3,}$", line):
            if shown:
                break
            shown.append(line.strip("_ ").join(["First failure, ", ":"]))
            continue
        frame = re.match(r"^(\S+\.py):\d+: in \w+", line)
        if frame:
            keep = tests.is_test(frame.group(1))
        elif line.startswith("E "):
            keep = True
        elif line.startswith(("=", "FAILED")):
            keep = False
        if keep and shown and line.strip():
            shown.append(line)
    return "\n".join([*lines, "", *shown[: STATEMENT_LINES + 1]]).rstrip()


def try_mutation(
    lib: Library, run: Runner, target: Target, mutation: Mutation, passing: list[str], rng: random.Random
) -> tuple[list[str], list[str], str] | None:
    """Run the function's covering tests (and a sample of the other passing tests of their files)
    with the mutation: (FAIL_TO_PASS, PASS_TO_PASS, problem statement), or None if no test fails."""
    covering = target.covering
    if len(covering) > MAX_COVERING:
        covering = sorted(rng.sample(covering, MAX_COVERING))
    files_of = {t.split("::", 1)[0] for t in covering}
    others = [t for t in passing if t.split("::", 1)[0] in files_of and t not in target.covering]
    extra = sorted(rng.sample(others, min(PASS_TO_PASS, len(others))))
    args = (*covering, *extra, "--tb=short", "-q")
    tests = replace(lib.tests, pytest_args=args, command=None, timeout_s=TRY_TIMEOUT_S)
    files = dict(lib.files) | {target.path: mutation.apply(lib.files[target.path])}
    result, report, _ = run_judged(run, tests, files, lib.files)
    if report is None or not report.complete:
        return None  # a crash or a hang is not a bug a test names
    failing = sorted(t for t in covering if report.outcomes.get(t) not in PASSED)
    if not failing:
        return None
    both = [t for t in [*covering, *extra] if report.outcomes.get(t) in PASSED]
    p2p = sorted(rng.sample(both, min(PASS_TO_PASS, len(both))))
    return failing, p2p, statement(failing, shown_output(result), lib.tests)


def generate(
    sdist: Path,
    out_dir: Path,
    repo: str,
    *,
    seed: int,
    train: int,
    heldout: int,
    heldout_share: float,
    backend: str = "bwrap",
) -> dict[str, list[BugInstance]]:
    archive_name = sdist.name.removesuffix(".tar.gz") + ".repo.tar.gz"
    lib = checkout(sdist, out_dir / archive_name, repo)
    log(f"{lib.name}: base_commit {lib.base_commit}, archive {archive_name}, import roots {list(lib.roots) or 'none'}")
    runs = SandboxRuns(backend)
    run = runs(lib.roots)
    try:
        log(f"{lib.name}: running its suite once with a per-test trace")
        started = time.perf_counter()
        outcomes, covering = trace(lib, run)
        log(f"{lib.name}: traced in {time.perf_counter() - started:.0f}s")
        passing = {test for test, outcome in outcomes.items() if outcome == "passed"}
        found = targets(lib, covering, passing)
        log(f"{lib.name}: {len(passing)} tests pass; {len(found)} functions are covered by them")
        rng = random.Random(seed)
        rng.shuffle(found)
        wanted = {"train": train, "heldout": heldout}
        made: dict[str, list[BugInstance]] = {"train": [], "heldout": []}
        for target in found:
            split = side(seed, target, heldout_share) if train and heldout else ("train" if train else "heldout")
            if len(made[split]) >= wanted[split]:
                if all(len(made[s]) >= wanted[s] for s in made):
                    break
                continue
            options = mutations(lib.files[target.path], target.node)
            rng.shuffle(options)
            for mutation in options[:MUTATIONS_PER_FUNCTION]:
                started = time.perf_counter()
                kept = try_mutation(lib, run, target, mutation, sorted(passing), rng)
                verdict = "kept" if kept else "dropped (no test fails, or the run did not finish)"
                log(f"{lib.name}: {target.qualname} {mutation.kind}: {verdict} ({time.perf_counter() - started:.0f}s)")
                if kept is None:
                    continue
                failing, p2p, problem = kept
                text = lib.files[target.path]
                bugged = mutation.apply(text)
                number = len(made["train"]) + len(made["heldout"])
                made[split].append(
                    BugInstance.model_validate(
                        {
                            "instance_id": f"{lib.name}__{target.qualname}__{mutation.kind}__{seed}_{number}",
                            "repo": repo,
                            "base_commit": lib.base_commit,
                            "patch": diff(target.path, bugged, text),
                            "test_patch": "",
                            "FAIL_TO_PASS": failing,
                            "PASS_TO_PASS": p2p,
                            "problem_statement": problem,
                            "repo_archive": archive_name,
                            "bug_patch": diff(target.path, text, bugged),
                            "test_command": "pytest " + " ".join(sorted({t.split("::")[0] for t in failing + p2p})),
                        }
                    )
                )
                break
        return made
    finally:
        runs.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sdist", type=Path, help="the library's sdist (.tar.gz with its tests)")
    parser.add_argument("--repo", required=True, help="owner/name, for the instances' repo field")
    parser.add_argument("--out-dir", type=Path, required=True, help="folder of the JSONL files and the archive")
    parser.add_argument("--train", type=int, default=0, help="train instances to make")
    parser.add_argument(
        "--heldout", type=int, default=0, help="held-out instances to make (no function shared with train)"
    )
    parser.add_argument("--heldout-share", type=float, default=0.3, help="share of functions assigned to held-out")
    parser.add_argument("--prefix", default=None, help="JSONL names: PREFIX-train.jsonl, PREFIX-heldout.jsonl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sandbox", default="bwrap")
    args = parser.parse_args(argv)
    if args.train < 0 or args.heldout < 0 or args.train + args.heldout == 0:
        parser.error("ask for at least one instance: --train N and/or --heldout N")
    if not args.sdist.is_file():
        parser.error(f"no sdist at {args.sdist}: scripts/setup_projects.sh fetches the pinned ones")
    made = generate(
        args.sdist, args.out_dir, args.repo, seed=args.seed, train=args.train, heldout=args.heldout,
        heldout_share=args.heldout_share, backend=args.sandbox,
    )  # fmt: skip
    prefix = args.prefix or args.sdist.name.split("-")[0].replace("_", "-")
    for split, instances in made.items():
        if instances:
            path = args.out_dir / f"{prefix}-{split}.jsonl"
            path.write_text("".join(i.to_json_line() + "\n" for i in instances), encoding="utf-8")
            log(f"wrote {len(instances)} {split} instances to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
