"""Bug instances in SWE-bench's format as `rlide eval --tasks FILE` reads them: both forms of the
test-id lists, clear errors naming file, line and field, archive paths that leave the JSONL's
folder refused, formats not mixed. Nothing runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from training.scenarios.eval import EvalRefused, select_tasks
from training.scenarios.task_file import BugInstance, TaskFileError, read_task_file

F2P = ["tests/test_x.py::test_a"]
INSTANCE: dict[str, Any] = {
    "instance_id": "lib__f__off_by_one__0_0",
    "repo": "owner/lib",
    "base_commit": "fad4ca23e3c60203f0e44b38b42fb41eb22bdb7e",
    "patch": "--- a/lib/f.py\n+++ b/lib/f.py\n@@ -1 +1 @@\n-x = 2\n+x = 1\n",
    "test_patch": "",
    "FAIL_TO_PASS": json.dumps(F2P),  # as SWE-bench stores it: a JSON string
    "PASS_TO_PASS": ["tests/test_x.py::test_b"],
    "problem_statement": "test_a fails",
    "repo_archive": "lib.repo.tar.gz",
    "bug_patch": "",
    "test_command": None,
    "version": "1.0",  # SWE-bench's other keys are ignored
}


def write(folder: Path, *lines: dict[str, Any]) -> Path:
    (folder / "lib.repo.tar.gz").write_bytes(b"placeholder")
    path = folder / "bugs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_an_instance_reads_with_test_ids_as_a_json_string_or_a_list(tmp_path: Path) -> None:
    path = write(tmp_path, INSTANCE, INSTANCE | {"instance_id": "two", "FAIL_TO_PASS": F2P})
    file = read_task_file(path)
    assert file.tasks == [] and [line for line, _ in file.instances] == [1, 2]
    first: BugInstance = file.instances[0][1]
    assert first.fail_to_pass == F2P == file.instances[1][1].fail_to_pass
    assert first.pytest_args() == ("tests/test_x.py",)
    tasks = select_tasks(str(path))
    assert [bug.id for bug in tasks.bugs] == ["lib__f__off_by_one__0_0", "two"] and tasks.scenarios == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"FAIL_TO_PASS": "[1, 2]"}, "line 1: field 'FAIL_TO_PASS'"),
        ({"FAIL_TO_PASS": "not json"}, "line 1: field 'FAIL_TO_PASS'.*JSON string"),
        ({"FAIL_TO_PASS": []}, "line 1: field 'FAIL_TO_PASS'"),
        ({"base_commit": "HEAD"}, "line 1: field 'base_commit': .*commit id"),
        ({"patch": ""}, "line 1: field 'patch'"),
        ({"repo_archive": "../outside.tar.gz"}, "line 1: field 'repo_archive'.*without '..'"),
        ({"repo_archive": "/etc/passwd"}, "line 1: field 'repo_archive'.*relative"),
        ({"repo_archive": "missing.tar.gz"}, "line 1: field 'repo_archive': no file at"),
    ],
)
def test_a_bad_instance_is_named_by_file_line_and_field(tmp_path: Path, change: dict[str, Any], expected: str) -> None:
    path = write(tmp_path, INSTANCE | change)
    with pytest.raises(TaskFileError, match=expected) as refused:
        read_task_file(path)
    assert str(path) in str(refused.value)
    with pytest.raises(EvalRefused, match=expected):
        select_tasks(str(path))


def test_an_archive_symlinked_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.tar.gz"
    outside.write_bytes(b"x")
    folder = tmp_path / "set"
    folder.mkdir()
    path = write(folder, INSTANCE | {"repo_archive": "link.tar.gz"})
    os.symlink(outside, folder / "link.tar.gz")
    with pytest.raises(TaskFileError, match="line 1: field 'repo_archive': .*leads out of"):
        read_task_file(path)


def test_a_file_does_not_mix_humaneval_tasks_and_instances(tmp_path: Path) -> None:
    task = {"task_id": "t/1", "prompt": "def f():\n", "test": "def check(c):\n    pass\n", "entry_point": "f"}
    path = write(tmp_path, INSTANCE, task)
    with pytest.raises(TaskFileError, match="line 2: the file mixes HumanEval tasks"):
        read_task_file(path)
    dup = write(tmp_path, INSTANCE, INSTANCE)
    with pytest.raises(TaskFileError, match="line 2: instance_id 'lib__f__off_by_one__0_0' is already on line 1"):
        read_task_file(dup)
