"""One bug task in SWE-bench's instance format, as a line of a JSONL file reads it.

SWE-bench's keys: `instance_id`, `repo`, `base_commit`, `patch` (the gold fix), `test_patch`,
`FAIL_TO_PASS`, `PASS_TO_PASS` (pytest node ids; SWE-bench stores them as JSON strings inside the
JSON, both forms are read), `problem_statement`. For offline use rlide adds `repo_archive` (a
tarball of the repository with its `.git` holding `base_commit`, named relative to the JSONL file),
`bug_patch` (the uncommitted change that makes the start state, when the bug is not committed) and
`test_command`. Other keys (SWE-bench's `version`, `hints_text`, ...) are ignored.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

INSTANCE_KEY = "instance_id"
"""The key that tells a bug instance from a HumanEval task (`task_id`)."""
PYTEST_COMMANDS = ("pytest", "python -m pytest", "python3 -m pytest")


class BugInstance(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)

    instance_id: str = Field(min_length=1, max_length=200)
    repo: str = Field(min_length=1)
    """owner/name, as SWE-bench names it (for people: nothing is fetched)."""
    base_commit: str
    patch: str = Field(min_length=1)
    """The gold fix, a unified diff from the start state (base_commit with bug_patch applied)."""
    test_patch: str = ""
    """Applied to the trusted test files (never shown to the model); empty when the tests that catch
    the bug are already in the repository."""
    fail_to_pass: list[str] = Field(alias="FAIL_TO_PASS", min_length=1)
    pass_to_pass: list[str] = Field(alias="PASS_TO_PASS", default_factory=list)
    problem_statement: str = Field(min_length=1)
    repo_archive: str = Field(min_length=1)
    """A .tar.gz of the repository (its `.git` holds base_commit), relative to the JSONL file's folder."""
    bug_patch: str = ""
    test_command: str | None = None
    """`pytest ARGS` (run by rlide's trusted pytest runner, the instance's tests added), or another
    shell command run at the repository root in the sandbox; None: `pytest` with the test files of
    FAIL_TO_PASS and PASS_TO_PASS."""

    @field_validator("base_commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{7,64}", value):
            raise ValueError("must be a commit id (7 to 64 lowercase hex digits)")
        return value

    @field_validator("fail_to_pass", "pass_to_pass", mode="before")
    @classmethod
    def _test_ids(cls, value: Any) -> Any:
        if isinstance(value, str):  # SWE-bench's files hold the list as a JSON string
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ValueError(f"a JSON string must hold a list of test ids ({exc})") from exc
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise ValueError("must be a list of pytest node ids (non-empty strings)")
        if any("\n" in v or "\0" in v for v in value):
            raise ValueError("a test id holds a line break or NUL")
        return value

    @field_validator("repo_archive")
    @classmethod
    def _relative(cls, value: str) -> str:
        path = Path(value)
        if path.is_absolute() or ".." in path.parts or "\\" in value or "\0" in value:
            raise ValueError("must be a path relative to the JSONL file's folder, without '..'")
        return value

    def archive_path(self, folder: Path) -> Path:
        """The archive's path, checked to lie inside `folder` (a symlink out of it is refused too)."""
        root = folder.resolve()
        path = (root / self.repo_archive).resolve()
        if not path.is_relative_to(root):
            raise ValueError(f"repo_archive {self.repo_archive!r} leads out of {root}")
        return path

    def pytest_args(self) -> tuple[str, ...] | None:
        """The arguments of a `pytest ...` test_command (the default: the instance's test files), or
        None when test_command is another shell command."""
        command = (self.test_command or "pytest").strip()
        for prefix in PYTEST_COMMANDS:
            if command == prefix or command.startswith(prefix + " "):
                args = tuple(command[len(prefix) :].split())
                return args or self.test_files()
        return None

    def test_files(self) -> tuple[str, ...]:
        return tuple(sorted({test.split("::", 1)[0] for test in [*self.fail_to_pass, *self.pass_to_pass]}))

    def to_json_line(self) -> str:
        return json.dumps(self.model_dump(by_alias=True), sort_keys=False, ensure_ascii=False)


__all__ = ["INSTANCE_KEY", "BugInstance"]
