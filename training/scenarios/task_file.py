"""Eval tasks from a JSONL file (`rlide eval --tasks PATH`): HumanEval tasks or bug instances.

The format is told by each line's keys, and one file holds one format:

- **HumanEval**: `task_id`, `prompt` (the function's signature and docstring), `test` (the source
  of a `check(candidate)` function), `entry_point` (the function's name) and, optionally,
  `canonical_solution` (the body that completes the prompt). Other keys are ignored, so
  HumanEval's own file and its derivatives read as they are.
- **Bug instances** (a line with `instance_id`): SWE-bench's instance format plus `repo_archive`,
  `bug_patch` and `test_command` (`training.scenarios.bug_tasks.instance`, docs/bug-tasks.md). The
  archive is named relative to the JSONL file's folder; a path that leads out of it, or names no
  file, is refused.

Each line is validated on its own; the first bad one stops the read with its line number and field.
The file's SHA-256 goes into the eval report, so a score names exactly what it was measured on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from training.scenarios.bug_tasks.instance import INSTANCE_KEY, BugInstance


class TaskFileError(ValueError):
    """A task file that cannot be read as tasks; the message names the file, the line and the field."""


class TaskLine(BaseModel):
    """One task, as HumanEval's JSONL writes it."""

    model_config = ConfigDict(extra="ignore", strict=True)

    task_id: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    test: str = Field(min_length=1)
    entry_point: str
    canonical_solution: str | None = None
    """Used, when given, to record the calls the check makes (`envpool.verifiers.values`); without
    it the candidate's own run records them (`training.scenarios.reference_free`)."""

    @field_validator("entry_point")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value.isidentifier():
            raise ValueError("must be the name of the function to test (a Python identifier)")
        return value


@dataclass(frozen=True)
class TaskFile:
    path: Path
    sha256: str
    """Of the file's bytes."""
    tasks: list[tuple[int, TaskLine]]
    """Each HumanEval task with its line number (from 1)."""
    instances: list[tuple[int, BugInstance]] = field(default_factory=list)
    """Each bug instance with its line number (a file holds tasks or instances, not both)."""


def read_task_file(path: Path) -> TaskFile:
    """The tasks of `path`, or `TaskFileError` naming the first problem."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise TaskFileError(f"no task file at {path}") from exc
    except IsADirectoryError as exc:
        raise TaskFileError(f"{path} is a directory, not a JSONL task file") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFileError(f"{path} is not UTF-8 text (byte {exc.start})") from exc
    tasks: list[tuple[int, TaskLine]] = []
    instances: list[tuple[int, BugInstance]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), start=1):  # not splitlines: JSON text may hold U+2028
        if not line.strip():
            continue
        task = _task(path, number, line)
        field_name, key = (
            ("instance_id", task.instance_id) if isinstance(task, BugInstance) else ("task_id", task.task_id)
        )
        if key in seen:
            raise TaskFileError(f"{path} line {number}: {field_name} {key!r} is already on line {seen[key]}")
        seen[key] = number
        if isinstance(task, BugInstance):
            instances.append((number, task))
        else:
            tasks.append((number, task))
        if tasks and instances:
            raise TaskFileError(
                f"{path} line {number}: the file mixes HumanEval tasks (task_id) and bug instances (instance_id);"
                " put each kind in its own file"
            )
    if not tasks and not instances:
        raise TaskFileError(
            f"{path} holds no tasks: write one JSON object a line (HumanEval: task_id, prompt, test, entry_point;"
            " a bug instance: instance_id, repo, base_commit, patch, FAIL_TO_PASS, ...)"
        )
    return TaskFile(path, hashlib.sha256(data).hexdigest(), tasks, instances)


def _task(path: Path, number: int, line: str) -> TaskLine | BugInstance:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise TaskFileError(f"{path} line {number} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise TaskFileError(f"{path} line {number} is a JSON {type(value).__name__}, not an object")
    model: type[TaskLine] | type[BugInstance] = BugInstance if INSTANCE_KEY in value else TaskLine
    try:
        task = model.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(f"field {'.'.join(map(str, e['loc']))!r}: {e['msg']}" for e in exc.errors())
        raise TaskFileError(f"{path} line {number}: {problems}") from exc
    if isinstance(task, BugInstance):
        try:
            archive = task.archive_path(path.parent)
        except ValueError as exc:
            raise TaskFileError(f"{path} line {number}: field 'repo_archive': {exc}") from exc
        if not archive.is_file():
            raise TaskFileError(
                f"{path} line {number}: field 'repo_archive': no file at {archive} (a .tar.gz of the repository"
                " with its .git, beside the JSONL file; benchmarks/bugs/README.md says how to make one)"
            )
    return task


__all__ = ["BugInstance", "TaskFile", "TaskFileError", "TaskLine", "read_task_file"]
