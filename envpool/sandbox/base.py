"""The boundary types of sandboxed execution and the `Sandbox` protocol every backend implements.

Everything that crosses a process or API boundary is a pydantic model (`RunRequest`, `RunResult`,
`TestRunRequest`); limits inside a backend are plain dataclasses.
"""

from __future__ import annotations

import ast
import contextlib
import os
import posixpath
import shlex
import threading
import uuid
from enum import StrEnum
from typing import Literal, Protocol, get_args, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from envpool.verifiers import reports
from envpool.verifiers.patches import PatchError, apply_patch
from envpool.verifiers.trusted import RUN_FOLDER, is_reserved

Language = Literal["python", "shell", "bash", "node"]
"""shell is POSIX sh (/bin/sh), bash is /bin/bash."""
LANGUAGE_ALIASES: dict[str, Language] = {
    "py": "python",
    "python3": "python",
    "sh": "shell",
    "javascript": "node",
    "js": "node",
    "nodejs": "node",
}
"""Other names agents use for the languages; any letter case is accepted."""

#: Appended to a stream cut at the output limit, so a reader (human or model) knows it was cut.
TRUNCATION_MARKER = "\n[rlide: output truncated at {limit} bytes]\n"


class RunStatus(StrEnum):
    """How a run ended. Exactly one per run."""

    OK = "ok"  # exit code 0
    ERROR = "error"  # non-zero exit (including an uncaught exception)
    TIMEOUT = "timeout"  # wall-clock or CPU-time limit hit
    MEMORY_LIMIT = "memory_limit"  # memory_mb hit: the run's memory group (OOM kill) or an rlimit (MemoryError, V8 OOM)
    OUTPUT_LIMIT = "output_limit"  # stdout or stderr exceeded its cap; the run was killed
    KILLED = "killed"  # ended by a signal we did not send for a limit, or cancelled
    SANDBOX_ERROR = "sandbox_error"  # the sandbox itself failed; the program may never have run


class SandboxError(Exception):
    """Base of envpool's sandbox exceptions.

    SandboxError
    ├── SandboxUnavailable   the backend cannot run here (bwrap missing, no docker engine)
    └── InvalidRequest       a request was refused before running (bad path, too large)
    """


class SandboxUnavailable(SandboxError):
    pass


class InvalidRequest(SandboxError, ValueError):
    pass


MAX_FILES = 4096
"""Files one run may carry: a repository's worth (run_tests sends the served working tree); the
bytes cap below bounds the work they cost (each is one write inside the sandbox)."""
MAX_REQUEST_BYTES = 16 * 1024 * 1024
MAX_PAYLOAD_BYTES = 100 * 1024 * 1024
"""A request as the fork-server's child receives it (JSON, UTF-8): at most 6 bytes a character
(an escaped control character), so every request within `MAX_REQUEST_BYTES` fits."""
MAX_ENV_VARS = 1024
MAX_ENV_ENTRY_BYTES = 128 * 1024 - 1
"""`NAME=value` as execve takes it: the kernel refuses a longer one (MAX_ARG_STRLEN), and sh or
node would then never start."""
MAX_ENV_BYTES = 1024 * 1024


def validate_relative_path(path: str) -> str:
    """Accept only a plain relative path inside the workspace; return it normalised.

    Checked here (the boundary) and again inside the sandbox (the point of the side effect).
    """
    if not path or "\x00" in path or "\\" in path:
        raise InvalidRequest(f"invalid file path {path!r}: empty, NUL or backslash")
    if path.startswith("/") or path.startswith("-"):
        raise InvalidRequest(f"invalid file path {path!r}: must be relative and not start with '-'")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise InvalidRequest(f"invalid file path {path!r}: no '.', '..' or empty components")
    norm = posixpath.normpath(path)
    if norm.startswith("..") or norm.startswith("/"):
        raise InvalidRequest(f"invalid file path {path!r}")
    return norm


def request_problem(exc: ValidationError | InvalidRequest) -> str:
    """What is wrong with a request, as one line a caller (or an agent) can act on:
    `field: problem; ...` instead of pydantic's multi-line report with documentation links."""
    if isinstance(exc, InvalidRequest):
        return str(exc)
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)


class RunRequest(BaseModel):
    """One program to run in a fresh workspace."""

    model_config = ConfigDict(extra="forbid")

    language: Language = "python"
    code: str = Field(description="Program source (python/node) or a shell script (shell).")
    stdin: str | None = None
    files: dict[str, str] = Field(default_factory=dict, description="Relative path -> text content.")
    timeout_s: float = Field(default=10.0, gt=0, le=600, description="Wall-clock limit.")
    cpu_s: float | None = Field(default=None, gt=0, le=600, description="CPU limit; default timeout_s.")
    memory_mb: int = Field(
        default=512,
        ge=16,
        le=65536,
        description="Memory the run may hold (all its processes, files and shared memory: its memory group); "
        "without a group per run (not root), each process's address space (data for node) is capped instead.",
    )
    max_processes: int = Field(default=64, ge=1, le=4096)
    max_file_mb: int = Field(default=64, ge=1, le=4096, description="Largest file the program may write.")
    max_output_bytes: int = Field(default=1 << 20, ge=1024, le=64 << 20, description="Per stream.")
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("language", mode="before")
    @classmethod
    def _canonical_language(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        name = value.strip().lower()
        name = LANGUAGE_ALIASES.get(name, name)
        if name not in get_args(Language):
            known = ", ".join([*get_args(Language), *LANGUAGE_ALIASES])
            raise InvalidRequest(f"unknown language {value!r}: one of {known}")
        return name

    @field_validator("files")
    @classmethod
    def _check_files(cls, files: dict[str, str]) -> dict[str, str]:
        if len(files) > MAX_FILES:
            raise InvalidRequest(f"too many files ({len(files)} > {MAX_FILES})")
        return {validate_relative_path(p): c for p, c in files.items()}

    @model_validator(mode="after")
    def _check_size_and_text(self) -> RunRequest:
        size = len(self.code) + len(self.stdin or "") + sum(len(p) + len(c) for p, c in self.files.items())
        size += sum(len(k) + len(v) for k, v in self.env.items())
        if size > MAX_REQUEST_BYTES:
            raise InvalidRequest(f"request too large ({size} > {MAX_REQUEST_BYTES} characters)")
        # JSON can carry lone surrogates; no file, pipe or program text can. Refused here with the
        # field's name, rather than failing inside the sandbox as a setup error.
        texts = {"code": self.code, "stdin": self.stdin or ""}
        texts.update({f"files[{p!r}]": f"{p}\n{c}" for p, c in self.files.items()})
        texts.update({f"env[{k!r}]": f"{k}={v}" for k, v in self.env.items()})
        for name, text in texts.items():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidRequest(
                    f"{name} is not valid Unicode text (a lone surrogate at position {exc.start}); send UTF-8 text"
                ) from None
        return self

    @field_validator("env")
    @classmethod
    def _check_env(cls, env: dict[str, str]) -> dict[str, str]:
        if len(env) > MAX_ENV_VARS:
            raise InvalidRequest(f"too many environment variables ({len(env)} > {MAX_ENV_VARS})")
        total = 0
        for key, value in env.items():
            if not key or "=" in key or "\x00" in key or key.startswith("LD_"):
                raise InvalidRequest(f"invalid environment variable name {key[:100]!r}")
            if "\x00" in value:
                raise InvalidRequest(f"environment variable {key[:100]!r} holds a NUL character")
            entry = len(key.encode("utf-8", "surrogatepass")) + 1 + len(value.encode("utf-8", "surrogatepass"))
            if entry > MAX_ENV_ENTRY_BYTES:
                raise InvalidRequest(
                    f"environment variable {key[:100]!r} is {entry} bytes (at most {MAX_ENV_ENTRY_BYTES}): "
                    "pass large data as a file or stdin"
                )
            total += entry + 1
        if total > MAX_ENV_BYTES:
            raise InvalidRequest(
                f"the environment is {total} bytes (at most {MAX_ENV_BYTES}): pass large data as a file"
            )
        return env


class RunResult(BaseModel):
    """How a run ended, with its (possibly truncated) output."""

    status: RunStatus
    exit_code: int | None = Field(description="Exit code; negative signal number if killed by one.")
    stdout: str = ""
    stderr: str = ""
    duration_ms: float = 0.0
    truncated: bool = False
    detail: str = Field(default="", description="Why the sandbox chose this status, for humans.")
    backend: str = ""

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.OK


class TestRunRequest(BaseModel):
    """Write `files`, optionally apply a unified diff, then run a test command or test code.

    Exactly one of `test_command` (a shell command) or `tests` (Python test code) is required.
    Test code that defines pytest-style tests (top-level `test*` functions, `Test*` classes,
    `unittest.TestCase` subclasses) runs under pytest; other code runs as a script, its top-level
    asserts being the tests (`defines_tests` decides).
    """

    __test__ = False  # not a pytest class
    model_config = ConfigDict(extra="forbid")

    files: dict[str, str] = Field(default_factory=dict)
    patch: str | None = Field(
        default=None, description="Unified diff applied to `files` first (as `patch -p<strip>` reads it)."
    )
    patch_strip: int = Field(default=1, ge=0, le=8)
    test_command: str | None = None
    tests: str | None = None
    pytest_args: list[str] | None = Field(
        default=None,
        description="Run rlide's trusted pytest runner with these arguments (a judged run: nothing the workspace "
        "holds runs before pytest and rlide's plugin, `envpool/verifiers/pytest_plugin/rlide_run.py`).",
    )
    own_modules: list[str] = Field(
        default_factory=list,
        description="With pytest_args: the top-level modules the project's start commit defines, imported from "
        "the workspace; every other module comes from the trusted sites first.",
    )
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    memory_mb: int = Field(default=2048, ge=16, le=65536, description="As `RunRequest.memory_mb`.")
    """2048: real suites hold a few hundred MB (more-itertools' peaks at 184 MB RSS) and a project's
    own imports (numpy, pandas) more; as memory held, not address space, this leaves them room."""

    @field_validator("files")
    @classmethod
    def _check_files(cls, files: dict[str, str]) -> dict[str, str]:
        return {validate_relative_path(p): c for p, c in files.items()}


TESTS_FILE = f"{RUN_FOLDER}/given_tests.py"  # not tests.py: a workspace's own `tests` package still imports
SCRIPT_TEST_FILE = f"{RUN_FOLDER}/test_given_script.py"
SCRIPT_TEST = f"""import runpy


def test_given_code():  # the script's asserts are the test
    runpy.run_path({TESTS_FILE!r}, run_name="__main__")
"""
"""Test code without test functions is a script whose asserts are the tests: it runs as one pytest
test, so that its result comes from pytest's report like any other."""
PYTEST = "python3 -m pytest -q -p no:cacheprovider --import-mode=importlib"
"""pytest inside the sandbox (bwrap binds it read-only; a backend without it says `No module named pytest`)."""


def defines_tests(code: str) -> bool:
    """Whether Python test code defines tests that pytest would collect, which run as a plain
    script would be defined and never called: a failing test would pass. Parsed, never run here."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False  # run as a script, the interpreter reports it
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            return True
        if isinstance(node, ast.ClassDef) and (
            node.name.startswith("Test")
            or any((b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")) == "TestCase" for b in node.bases)
        ):
            return True
    return False


TEST_PROCESSES = 512
"""Processes (threads count: one per thread) a test run may have: real suites start thread pools
of dozens; a run's memory group and time limit bound what they cost."""
TEST_OUTPUT_BYTES = 8 << 20
"""A test run's output limit per stream: a session's finish line comes last, and a cut stream loses it."""


def prepare_test_run(test: TestRunRequest) -> RunRequest:
    """Turn a TestRunRequest into one shell RunRequest that runs entirely inside the sandbox, with
    rlide's pytest plugin loaded into any pytest it starts, which prints its report
    (`envpool.verifiers.reports`: read it with `read_test_run`). Files or patched paths that are
    rlide's own (`reports.is_reserved`) are refused. Async callers run it in a
    thread: it parses the test code (`defines_tests`), up to ~1 s for 1 MB."""
    if sum(given is not None for given in (test.test_command, test.tests, test.pytest_args)) != 1:
        raise InvalidRequest("give exactly one of test_command, tests or pytest_args")
    files = dict(test.files)
    if test.patch is not None:
        # Applied here, by the one parser that also tells which files it touched: the tree a run
        # gets is exactly the tree a verifier looked at (`envpool.verifiers.patches`).
        try:
            files = apply_patch(files, test.patch, test.patch_strip).files
        except PatchError as exc:
            raise InvalidRequest(f"the patch does not apply: {exc}") from exc
    shadows = sorted(path for path in files if is_reserved(path))
    if shadows:
        raise InvalidRequest(f"{', '.join(shadows[:3])}: reserved for rlide's test runs (its pytest plugin, its files)")
    nonce = uuid.uuid4().hex
    env = reports.environment(nonce)
    steps: list[str] = ["set -e", *reports.shell_steps(nonce)]
    if test.tests is not None:
        files[TESTS_FILE] = test.tests
        target = TESTS_FILE
        if not defines_tests(test.tests):
            files[SCRIPT_TEST_FILE] = SCRIPT_TEST
            target = SCRIPT_TEST_FILE
        steps.append(f'PYTHONPATH="$PWD:$PYTHONPATH" {PYTEST} {target}')  # imports from the workspace root
    elif test.pytest_args is not None:
        steps.append(f'exec python3 -I -S "$RLIDE_RUNNER" {" ".join(shlex.quote(arg) for arg in test.pytest_args)}')
        env = reports.runner_environment(nonce, test.own_modules)
    else:
        assert test.test_command is not None
        steps.append(test.test_command)
    return RunRequest(
        language="shell",
        code="\n".join(steps) + "\n",
        files=files,
        env=env,
        timeout_s=test.timeout_s,
        memory_mb=test.memory_mb,
        max_processes=TEST_PROCESSES,
        max_output_bytes=TEST_OUTPUT_BYTES,
    )


def read_test_run(request: RunRequest, result: RunResult) -> reports.TestRunOutcome:
    """What a run made by `prepare_test_run` says: whether its patch applied, and its test report."""
    return reports.read_report(result.stdout, request.env["RLIDE_NONCE"])


def shown_test_run(request: RunRequest, result: RunResult) -> RunResult:
    """`result` with the report's marker lines left out of its output, for the agent to read."""
    return result.model_copy(update={"stdout": reports.without_marks(result.stdout, request.env["RLIDE_NONCE"])})


class CancelToken:
    """Cancels one in-flight run from another thread; a pipe so backends can select() on it."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self._lock = threading.Lock()
        self._set = False
        self._closed = False

    def fileno(self) -> int:
        return self._r

    def cancel(self) -> None:
        # Under the lock with close(): never write to an fd number that close() freed and the
        # process may already have reused for something else.
        with self._lock:
            if not self._set and not self._closed:
                self._set = True
                os.write(self._w, b"x")

    @property
    def cancelled(self) -> bool:
        return self._set

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._r, self._w):
                with contextlib.suppress(OSError):
                    os.close(fd)


@runtime_checkable
class Sandbox(Protocol):
    """A place to run hostile programs. Thread-safe: `run` may be called from many threads."""

    name: str

    def run(self, request: RunRequest, cancel: CancelToken | None = None) -> RunResult: ...

    def close(self) -> None: ...


def run_tests(sandbox: Sandbox, test: TestRunRequest, cancel: CancelToken | None = None) -> RunResult:
    """Write the files, apply the patch, run the tests: all inside `sandbox`, as one run."""
    return sandbox.run(prepare_test_run(test), cancel)
