"""A project's own tests: how they run and which files are test code, read from its committed configuration.

An episode's verifier is the project's, never the agent's (SWE-bench's rule: the tests that judge a
fix come from the repository, not from the candidate). This module reads the files of the commit
the episode started at and says

- how the tests run: rlide's trusted pytest runner with the project's arguments (`[tool.rlide]
  pytest_args`), or a shell command a person configured (`[tool.rlide] test_command`, or the
  `RLIDE_TEST_COMMAND` setting), with the memory and time a run of the suite may take;
- which paths are test code, as the project's own pytest configuration says (`python_files`,
  `testpaths`, `--doctest-modules`, `--doctest-glob`, in `pytest.ini`, `.pytest.ini`,
  `pytest.toml`, `pyproject.toml` `[tool.pytest]`/`[tool.pytest.ini_options]`, `tox.ini` `[pytest]`,
  `setup.cfg` `[tool:pytest]`), plus what is test code in every project: `conftest.py`, test
  configuration, start-up files (`sitecustomize.py`, `*.pth`), folders named `test`/`tests`/`testing`,
  and globs a person lists in `[tool.rlide] trusted`.

Test code is trusted from the start commit: a judged run gets it back as it was there, whatever the
candidate's tree holds under those paths (`judged_tree`), so a rename, a quoted name or a new
`conftest.py` changes nothing. Doctest examples live in source files, which the candidate may edit:
`changed_doctests` finds the files whose examples differ, and their doctest items count as failing.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import posixpath
import shlex
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from envpool.verifiers.trusted import TEST_FOLDERS, TRUSTED_NAMES, is_reserved

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
DEFAULT_DOCTEST_GLOBS = ("test*.txt",)
DEFAULT_TEST_MEMORY_MB = 2048
"""A judged run's memory (what it holds: its memory group, not its address space; see docs/sandbox.md)."""
DEFAULT_TEST_TIMEOUT_S = 300.0
PYTEST_CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pytest.toml", "pyproject.toml", "tox.ini", "setup.cfg")
"""Where pytest looks for its configuration in a folder, in its order."""


class ProjectConfigError(ValueError):
    """The project's `[tool.rlide]` configuration is not usable; the message says what to change."""


@dataclass(frozen=True)
class ProjectTests:
    """How a project's test suite runs and which of its paths are test code."""

    pytest_args: tuple[str, ...] = ()
    """Arguments of rlide's trusted pytest runner (the project's ini options apply as well)."""
    command: str | None = None
    """A shell command a person configured instead of the trusted runner."""
    python_files: tuple[str, ...] = DEFAULT_PYTHON_FILES
    testpaths: tuple[str, ...] = ()
    doctest_modules: bool = False
    doctest_globs: tuple[str, ...] = DEFAULT_DOCTEST_GLOBS
    trusted_globs: tuple[str, ...] = ()
    memory_mb: int = DEFAULT_TEST_MEMORY_MB
    timeout_s: float = DEFAULT_TEST_TIMEOUT_S
    timeout_from: str = "rlide's default; [tool.rlide] test_timeout_s"
    """Where `timeout_s` was set, so that a run stopped by it names what to change."""
    source: str = "pytest's defaults"
    """Where the configuration was read from, for the agent and for people."""
    data_files: tuple[str, ...] = field(default=())
    """Non-Python files the tests themselves opened in the start state's run (expected values kept
    outside `tests/`): trusted like test code."""
    import_roots: tuple[str, ...] = ()
    """Workspace folders besides its root that the project imports from (an editable install's `src`)."""

    @property
    def display(self) -> str:
        """The verifier as shown: the shell command, or pytest with the project's arguments."""
        if self.command is not None:
            return self.command
        return " ".join(["python -m pytest", *(shlex.quote(arg) for arg in self.pytest_args)])

    def is_test(self, path: str) -> bool:
        """Whether a workspace-relative POSIX path is test code, test configuration or a start-up file."""
        path = posixpath.normpath(path)
        if is_reserved(path) or path in self.data_files:
            return True
        *folders, name = path.split("/")
        if name in TRUSTED_NAMES or name.endswith(".pth"):
            return True
        if any(folder in TEST_FOLDERS for folder in folders):
            return True
        if name.endswith(".py") and any(_matches(pattern, path) for pattern in self.python_files):
            return True
        if any(_matches(pattern, path) for pattern in self.doctest_globs):
            return True
        if any(path == root or path.startswith(root.rstrip("/") + "/") for root in self.testpaths):
            return True
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in self.trusted_globs)

    def with_data_files(self, paths: Iterable[str]) -> ProjectTests:
        return replace(self, data_files=tuple(sorted({*self.data_files, *paths})))

    def own_modules(self, head: Iterable[str]) -> list[str]:
        """The top-level modules the start commit's files (`head`) define: a judged run imports only
        these from the workspace (`own_modules`)."""
        return own_modules(head, ("", *self.import_roots))

    def to_json(self) -> dict[str, Any]:
        return {
            "pytest_args": list(self.pytest_args),
            "command": self.command,
            "python_files": list(self.python_files),
            "testpaths": list(self.testpaths),
            "doctest_modules": self.doctest_modules,
            "doctest_globs": list(self.doctest_globs),
            "trusted_globs": list(self.trusted_globs),
            "memory_mb": self.memory_mb,
            "timeout_s": self.timeout_s,
            "timeout_from": self.timeout_from,
            "source": self.source,
            "data_files": list(self.data_files),
            "import_roots": list(self.import_roots),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProjectTests:
        return cls(
            pytest_args=tuple(data.get("pytest_args") or ()),
            command=data.get("command"),
            python_files=tuple(data.get("python_files") or DEFAULT_PYTHON_FILES),
            testpaths=tuple(data.get("testpaths") or ()),
            doctest_modules=bool(data.get("doctest_modules")),
            doctest_globs=tuple(data.get("doctest_globs") or DEFAULT_DOCTEST_GLOBS),
            trusted_globs=tuple(data.get("trusted_globs") or ()),
            memory_mb=int(data.get("memory_mb") or DEFAULT_TEST_MEMORY_MB),
            timeout_s=float(data.get("timeout_s") or DEFAULT_TEST_TIMEOUT_S),
            timeout_from=str(data.get("timeout_from") or ProjectTests.timeout_from),
            source=str(data.get("source") or "pytest's defaults"),
            data_files=tuple(data.get("data_files") or ()),
            import_roots=tuple(data.get("import_roots") or ()),
        )


def _matches(pattern: str, path: str) -> bool:
    """pytest's rule: a pattern without a slash matches the file name, one with a slash the path."""
    if "/" in pattern:
        return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, "*/" + pattern)
    return fnmatch.fnmatchcase(posixpath.basename(path), pattern)


def _timeout_from(rlide: dict[str, Any], setting: float | None) -> str:
    if _number(rlide, "test_timeout_s", float):
        return "[tool.rlide] test_timeout_s"
    if setting:
        return "RLIDE_TEST_TIMEOUT_S, or [tool.rlide] test_timeout_s for this project"
    return ProjectTests.timeout_from


def detect(
    files: Mapping[str, str],
    *,
    command: str | None = None,
    memory_mb: int | None = None,
    timeout_s: float | None = None,
    import_roots: tuple[str, ...] = (),
) -> ProjectTests | None:
    """The project's tests as its files at the start commit configure them, or None when it has no
    pytest configuration and no test file (nothing that could verify work). `command`, `memory_mb`
    and `timeout_s` are a person's settings (`RLIDE_TEST_*`); `[tool.rlide]` in the project's
    `pyproject.toml` overrides them for that project. Raises `ProjectConfigError` for a
    `[tool.rlide]` table it cannot use."""
    ini, source = _pytest_ini(files)
    rlide = _rlide_table(files.get("pyproject.toml"))
    addopts = _words(ini.get("addopts"))
    command = _string(rlide, "test_command") or command
    # A script the command runs is the verifier's own code: the candidate must not rewrite it.
    scripts = [path for path in (posixpath.normpath(word) for word in _words(command)) if path in files]
    tests = ProjectTests(
        pytest_args=tuple(_strings(rlide, "pytest_args") or ()),
        command=command,
        python_files=tuple(_words(ini.get("python_files")) or DEFAULT_PYTHON_FILES),
        testpaths=tuple(posixpath.normpath(p) for p in _words(ini.get("testpaths"))),
        doctest_modules="--doctest-modules" in addopts,
        doctest_globs=tuple(_doctest_globs(addopts) or DEFAULT_DOCTEST_GLOBS),
        trusted_globs=tuple([*(_strings(rlide, "trusted") or ()), *scripts]),
        memory_mb=_number(rlide, "test_memory_mb", int) or memory_mb or DEFAULT_TEST_MEMORY_MB,
        timeout_s=_number(rlide, "test_timeout_s", float) or timeout_s or DEFAULT_TEST_TIMEOUT_S,
        timeout_from=_timeout_from(rlide, timeout_s),
        source=source + (" and [tool.rlide]" if rlide else ""),
        import_roots=import_roots,
    )
    if tests.command is None and source == "pytest's defaults" and not any(tests.is_test(p) for p in _py(files)):
        return None
    return tests


def _py(files: Iterable[str]) -> list[str]:
    return [path for path in files if path.endswith(".py") and posixpath.basename(path) not in TRUSTED_NAMES]


def _pytest_ini(files: Mapping[str, str]) -> tuple[dict[str, Any], str]:
    """pytest's options from the first configuration file at the root that has them, and its name."""
    for name in PYTEST_CONFIG_FILES:
        text = files.get(name)
        if text is None:
            continue
        if name in ("pyproject.toml", "pytest.toml"):
            table = _toml(text, name)
            options = table.get("tool", {}).get("pytest", {}) if name == "pyproject.toml" else table.get("pytest", {})
            if isinstance(options, dict) and isinstance(options.get("ini_options"), dict):
                return dict(options["ini_options"]), f"{name} [tool.pytest.ini_options]"
            if isinstance(options, dict) and options:
                return options, f"{name} [tool.pytest]" if name == "pyproject.toml" else name
            if name == "pytest.toml":
                return {}, name
            continue
        section = {"setup.cfg": "tool:pytest", "tox.ini": "pytest"}.get(name, "pytest")
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(text, source=name)
        except configparser.Error:
            continue  # pytest would refuse to start: the baseline run says so
        if parser.has_section(section):
            return dict(parser.items(section)), f"{name} [{section}]"
        if name in ("pytest.ini", ".pytest.ini"):
            return {}, name  # pytest takes the file as its configuration even without the section
    return {}, "pytest's defaults"


def _toml(text: str, name: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}  # not ours to judge; the run reports it


def _rlide_table(pyproject: str | None) -> dict[str, Any]:
    if pyproject is None:
        return {}
    table = _toml(pyproject, "pyproject.toml").get("tool", {}).get("rlide", {})
    if not isinstance(table, dict):
        raise ProjectConfigError("pyproject.toml: [tool.rlide] must be a table")
    return table


def _words(value: Any) -> list[str]:
    """An ini option's values: a TOML list, or a whitespace-separated (shell-quoted) string."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    try:
        return shlex.split(str(value))
    except ValueError:
        return str(value).split()


def _doctest_globs(addopts: list[str]) -> list[str]:
    globs = []
    for i, arg in enumerate(addopts):
        if arg.startswith("--doctest-glob="):
            globs.append(arg.split("=", 1)[1])
        elif arg == "--doctest-glob" and i + 1 < len(addopts):
            globs.append(addopts[i + 1])
    return globs


def _strings(table: dict[str, Any], key: str) -> list[str] | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProjectConfigError(f"pyproject.toml: [tool.rlide] {key} must be a list of strings")
    return value


def _string(table: dict[str, Any], key: str) -> str | None:
    value = table.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ProjectConfigError(f"pyproject.toml: [tool.rlide] {key} must be a non-empty string")
    return value


def _number(table: dict[str, Any], key: str, kind: type[int] | type[float]) -> Any:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ProjectConfigError(f"pyproject.toml: [tool.rlide] {key} must be a positive number")
    return kind(value)


# -- the judged tree --------------------------------------------------------------------------------


def judged_tree(candidate: Mapping[str, str], trusted: Mapping[str, str | None], tests: ProjectTests) -> dict[str, str]:
    """The files a judged run gets: the candidate's, with every test path as the start commit had it
    (changed ones restored, added ones gone) and every trusted path the start commit lacked gone."""
    kept = {path: text for path, text in candidate.items() if not tests.is_test(path) and path not in trusted}
    return kept | {path: text for path, text in trusted.items() if text is not None}


def trusted_files(head: Mapping[str, str], tests: ProjectTests) -> dict[str, str | None]:
    """The start commit's test files (and its absent data files, as None): what every judged run gets back."""
    found: dict[str, str | None] = {path: text for path, text in head.items() if tests.is_test(path)}
    return found | {path: None for path in tests.data_files if path not in head}


def authored_tests(candidate: Mapping[str, str], trusted: Mapping[str, str | None], tests: ProjectTests) -> list[str]:
    """The test paths the candidate's tree adds or changes (its own tests: evidence, never the judge)."""
    changed = {
        path
        for path, text in candidate.items()
        if (tests.is_test(path) or path in trusted) and trusted.get(path) != text
    }
    removed = {path for path, text in trusted.items() if text is not None and path not in candidate}
    return sorted(changed | removed)


# -- doctests ---------------------------------------------------------------------------------------


def doctest_examples(source: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """The doctest examples of a Python source, by the qualified name of the docstring's owner ("" for
    the module): what `--doctest-modules` runs. A source that does not parse has none."""
    import doctest  # imports pdb and unittest: only where doctests are compared, not in every server

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    parser = doctest.DocTestParser()
    found: dict[str, tuple[tuple[str, str], ...]] = {}
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, name = stack.pop()
        doc = ast.get_docstring(node, clean=False) if isinstance(node, _DOC_OWNERS) else None
        if doc and ">>>" in doc:
            try:
                examples = parser.get_examples(doc)
            except ValueError:  # malformed examples: doctest fails them itself
                examples = []
            found[name] = tuple((example.source, example.want) for example in examples) or ((doc, ""),)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                stack.append((child, f"{name}.{child.name}" if name else child.name))
    return found


_DOC_OWNERS = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def changed_doctests(
    start: Mapping[str, str], candidate: Mapping[str, str], tests: ProjectTests, paths: Iterable[str]
) -> list[str]:
    """The source files among `paths` whose doctest examples the candidate changed (added, edited or
    removed), when the project runs doctests: their doctest items are judged as failing."""
    if not tests.doctest_modules:
        return []
    changed = []
    for path in sorted(set(paths)):
        if not path.endswith(".py") or tests.is_test(path):
            continue
        before, after = start.get(path), candidate.get(path)
        if before == after:
            continue
        if doctest_examples(before or "") != doctest_examples(after or ""):
            changed.append(path)
    return changed


def own_modules(paths: Iterable[str], roots: Iterable[str] = ("",)) -> list[str]:
    """The top-level module names the project's files define under each import root ("" for the
    workspace root, `src` for a src layout): a judged run imports these from the workspace and
    every other name from the trusted sites first, so a candidate's `pytest.py` or `json.py` never
    shadows the runner or a dependency."""
    names: set[str] = set()
    prefixes = [root.strip("/") for root in roots]
    for path in paths:
        if not path.endswith(".py"):
            continue
        for prefix in prefixes:
            rel = path[len(prefix) + 1 :] if prefix else path
            if prefix and not path.startswith(prefix + "/"):
                continue
            first = rel.split("/", 1)[0]
            name = first.removesuffix(".py") if "/" not in rel else first
            if name.isidentifier():
                names.add(name)
    return sorted(names)
