"""Eval tasks from a JSONL file in HumanEval's format (`rlide eval --tasks PATH`).

One JSON object a line: `task_id`, `prompt` (the function's signature and docstring), `test` (the
source of a `check(candidate)` function), `entry_point` (the function's name) and
`canonical_solution` (the body that completes the prompt). Other keys are ignored, so HumanEval's
own file and its derivatives read as they are. Each line is validated on its own; the first bad one
stops the read with its line number and field. The file's SHA-256 goes into the eval report, so a
score names exactly what it was measured on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


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
    """Needed to verify the task (`training.scenarios.eval` refuses a task without it), optional
    here so that the refusal can say so for every such task at once."""

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
    """Each task with its line number (from 1)."""


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
    seen: dict[str, int] = {}
    for number, line in enumerate(text.split("\n"), start=1):  # not splitlines: JSON text may hold U+2028
        if not line.strip():
            continue
        task = _task(path, number, line)
        if task.task_id in seen:
            raise TaskFileError(
                f"{path} line {number}: task_id {task.task_id!r} is already on line {seen[task.task_id]}"
            )
        seen[task.task_id] = number
        tasks.append((number, task))
    if not tasks:
        raise TaskFileError(f"{path} holds no tasks: write one JSON object a line (task_id, prompt, test, entry_point)")
    return TaskFile(path, hashlib.sha256(data).hexdigest(), tasks)


def _task(path: Path, number: int, line: str) -> TaskLine:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise TaskFileError(f"{path} line {number} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise TaskFileError(f"{path} line {number} is a JSON {type(value).__name__}, not an object")
    try:
        return TaskLine.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(f"field {'.'.join(map(str, e['loc']))!r}: {e['msg']}" for e in exc.errors())
        raise TaskFileError(f"{path} line {number}: {problems}") from exc


__all__ = ["TaskFile", "TaskFileError", "TaskLine", "read_task_file"]
