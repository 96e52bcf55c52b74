"""The shipped bug set regenerates identically, and its instances are real: regenerating the first
held-out cachetools instance with the shipped command (seed 0) gives the same JSON line and the same
archive bytes, and in the sandbox its FAIL_TO_PASS tests fail on the bug and pass with the gold
patch, PASS_TO_PASS passing both ways. Every shipped line reads as an instance whose archive is
beside it, and held-out functions never appear in train. Real sdist, real git, the real sandbox."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.real_projects import PROJECTS
from training.scenarios.bug_tasks.attempt import BugTask, pose, score
from training.scenarios.bug_tasks.generate import generate
from training.scenarios.bug_tasks.judge import SandboxRuns
from training.scenarios.task_file import read_task_file

BUGS = Path(__file__).resolve().parents[3] / "benchmarks" / "bugs"
SHIPPED = BUGS / "cachetools-heldout.jsonl"


def _function(instance_id: str) -> str:
    return instance_id.split("__")[1]


def test_every_shipped_file_reads_and_splits_share_no_function() -> None:
    files = sorted(BUGS.glob("*.jsonl"))
    assert {p.name for p in files} >= {"more-itertools-train.jsonl", "more-itertools-heldout.jsonl", SHIPPED.name}
    read = {p.name: read_task_file(p) for p in files}  # checks each archive is beside its file
    assert all(file.instances and not file.tasks for file in read.values())
    train = {_function(i.instance_id) for _, i in read["more-itertools-train.jsonl"].instances}
    heldout = {_function(i.instance_id) for _, i in read["more-itertools-heldout.jsonl"].instances}
    assert train and heldout and not train & heldout
    for file in read.values():
        for _, instance in file.instances:
            assert instance.bug_patch and instance.patch and instance.fail_to_pass
            for line in instance.bug_patch.splitlines():  # the statement never quotes the mutated line
                if line.startswith("+") and not line.startswith("+++") and line[1:].strip():
                    assert line[1:].strip() not in instance.problem_statement, instance.instance_id


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")
def test_an_instance_regenerates_identically_and_its_tests_fail_on_the_bug_and_pass_on_the_fix(tmp_path: Path) -> None:
    sdist = PROJECTS / "cachetools-8.0.2.tar.gz"
    if not sdist.is_file():
        pytest.skip(f"{sdist} is missing: `make setup` fetches it (scripts/setup_projects.sh)")
    made = generate(sdist, tmp_path, "tkem/cachetools", seed=0, train=0, heldout=1, heldout_share=0.3)
    [again] = made["heldout"]
    first = SHIPPED.read_text(encoding="utf-8").splitlines()[0]
    assert json.loads(again.to_json_line()) == json.loads(first)
    archive = again.repo_archive
    assert (tmp_path / archive).read_bytes() == (BUGS / archive).read_bytes()
    (tmp_path / "one.jsonl").write_text(again.to_json_line() + "\n", encoding="utf-8")
    [(_, instance)] = read_task_file(tmp_path / "one.jsonl").instances
    runs = SandboxRuns()
    try:
        posed = pose(BugTask(instance, tmp_path), runs)  # raises unless every FAIL_TO_PASS fails on the bug
        assert not score(posed, "no change", runs).resolved
        fixed = score(posed, f"```diff\n{instance.patch}```", runs)
        assert fixed.resolved, fixed  # every FAIL_TO_PASS passes, every PASS_TO_PASS still does
    finally:
        runs.close()
