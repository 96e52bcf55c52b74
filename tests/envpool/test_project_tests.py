"""A project's tests as its committed configuration says: which command, which files are test code,
and the judged tree built from that (envpool/verifiers/project.py). Pure functions: no sandbox."""

from __future__ import annotations

import pytest

from envpool.verifiers.project import (
    ProjectConfigError,
    ProjectTests,
    authored_tests,
    changed_doctests,
    detect,
    judged_tree,
    own_modules,
    trusted_files,
)

CODE = {"pkg/__init__.py": "", "pkg/core.py": "def f():\n    return 1\n"}


@pytest.mark.parametrize(
    ("path", "test"),
    [
        ("test_calc.py", True), ("pkg/calc_test.py", True), ("tests/helpers.py", True), ("tests/data/x.json", True),
        ("conftest.py", True), ("src/conftest.py", True), ("pytest.ini", True), ("tox.ini", True),
        ("setup.cfg", True), ("pyproject.toml", True), ("sitecustomize.py", True), ("x/usercustomize.py", True),
        (".local/lib/python3.11/site-packages/evil.pth", True), ("rlide_report.py", True), ("a/rlide_run.py", True),
        ("test_notes.txt", True),
        ("calc.py", False), ("src/pkg/core.py", False), ("README.md", False), ("latest.py", False),
    ],
)  # fmt: skip
def test_what_every_project_trusts(path: str, test: bool) -> None:
    assert ProjectTests().is_test(path) is test


@pytest.mark.parametrize(
    ("name", "text", "source"),
    [
        ("pyproject.toml", '[tool.pytest.ini_options]\npython_files = ["*_tests.py"]\ntestpaths = ["checks"]\n'
         'addopts = "--doctest-modules --doctest-glob=*.rst"\n', "pyproject.toml [tool.pytest.ini_options]"),
        ("pyproject.toml", '[tool.pytest]\npython_files = ["*_tests.py"]\ntestpaths = ["checks"]\n'
         'addopts = ["--doctest-modules", "--doctest-glob", "*.rst"]\n', "pyproject.toml [tool.pytest]"),
        ("pytest.ini", "[pytest]\npython_files = *_tests.py\ntestpaths = checks\n"
         "addopts = --doctest-modules --doctest-glob=*.rst\n", "pytest.ini [pytest]"),
        ("tox.ini", "[tox]\nenvlist = py\n\n[pytest]\npython_files = *_tests.py\ntestpaths = checks\n"
         "addopts = --doctest-modules --doctest-glob=*.rst\n", "tox.ini [pytest]"),
        ("setup.cfg", "[metadata]\nname = x\n\n[tool:pytest]\npython_files = *_tests.py\ntestpaths = checks\n"
         "addopts = --doctest-modules --doctest-glob=*.rst\n", "setup.cfg [tool:pytest]"),
    ],
)  # fmt: skip
def test_the_projects_own_configuration_decides_what_is_test_code(name: str, text: str, source: str) -> None:
    tests = detect({**CODE, name: text})
    assert tests is not None and tests.source == source
    assert tests.python_files == ("*_tests.py",) and tests.testpaths == ("checks",)
    assert tests.doctest_modules and tests.doctest_globs == ("*.rst",)
    assert tests.is_test("slug_tests.py") and tests.is_test("checks/data.json") and tests.is_test("docs/usage.rst")
    assert not tests.is_test("test_slug.py")  # not the project's pattern any more
    assert tests.display == "python -m pytest"


def test_a_project_without_tests_has_no_verifier_and_rlide_settings_are_checked() -> None:
    assert detect(CODE) is None
    assert detect({**CODE, "tests/test_core.py": "def test_f():\n    pass\n"}) is not None
    configured = detect({**CODE, "pyproject.toml": '[tool.rlide]\ntest_command = "sh ./run.sh"\n', "run.sh": "x"})
    assert configured is not None and configured.command == "sh ./run.sh"
    assert configured.is_test("run.sh")  # the script the verifier runs is the verifier's own code
    tuned = detect({**CODE, "pyproject.toml": '[tool.rlide]\ntest_memory_mb = 4096\ntest_timeout_s = 900\n'
                    'pytest_args = ["-x", "tests"]\ntrusted = ["fixtures/*"]\n', "tests/test_a.py": ""})  # fmt: skip
    assert tuned is not None and (tuned.memory_mb, tuned.timeout_s) == (4096, 900.0)
    assert tuned.display == "python -m pytest -x tests" and tuned.is_test("fixtures/big.bin")
    assert tuned.timeout_from == "[tool.rlide] test_timeout_s"
    for bad in ('test_memory_mb = "lots"', "pytest_args = 3", 'test_command = ""', "trusted = [1]"):
        with pytest.raises(ProjectConfigError, match="tool.rlide"):
            detect({**CODE, "pyproject.toml": f"[tool.rlide]\n{bad}\n"})


def test_the_judged_tree_has_the_start_commits_test_code_whatever_the_candidate_wrote() -> None:
    tests = ProjectTests(data_files=("data/expected.json", "data/absent.json"))
    head = {**CODE, "tests/test_core.py": "original", "conftest.py": "original", "data/expected.json": "[1]"}
    trusted = trusted_files(head, tests)
    assert trusted["data/absent.json"] is None and trusted["tests/test_core.py"] == "original"
    candidate = {
        "pkg/__init__.py": "",
        "pkg/core.py": "fixed",
        "tests/test_core.py": "weakened",
        "tests/conftest.py": "added",
        "pkg/conftest.py": "added",
        "data/expected.json": "[2]",
        "data/absent.json": "made up",
        "sitecustomize.py": "added",
    }  # conftest.py deleted
    judged = judged_tree(candidate, trusted, tests)
    assert judged == {
        "pkg/__init__.py": "",
        "pkg/core.py": "fixed",
        "tests/test_core.py": "original",
        "conftest.py": "original",
        "data/expected.json": "[1]",
    }
    assert authored_tests(candidate, trusted, tests) == [
        "conftest.py", "data/absent.json", "data/expected.json", "pkg/conftest.py", "sitecustomize.py",
        "tests/conftest.py", "tests/test_core.py",
    ]  # fmt: skip


DOC = '''def add(a, b):
    """The sum.

    >>> add(2, 3)
    5
    """
    return a + b
'''


def test_edited_doctest_examples_are_found_and_edited_code_is_not() -> None:
    tests = ProjectTests(doctest_modules=True)
    start = {"calc.py": DOC.replace("a + b", "a - b")}
    fixed = {"calc.py": DOC}
    faked = {"calc.py": start["calc.py"].replace("    5\n", "    -1\n")}
    added = {"calc.py": DOC.replace('"""The sum.', '"""The sum.\n\n    >>> 1\n    1')}
    assert changed_doctests(start, fixed, tests, ["calc.py"]) == []
    assert changed_doctests(start, faked, tests, ["calc.py"]) == ["calc.py"]
    assert changed_doctests(start, added, tests, ["calc.py"]) == ["calc.py"]
    assert changed_doctests(start, faked, ProjectTests(), ["calc.py"]) == []  # the project runs no doctests


def test_own_modules_are_the_projects_top_level_names_under_each_import_root() -> None:
    files = ["pkg/__init__.py", "pkg/core.py", "tool.py", "src/lib/__init__.py", "src/lib/x.py", "README.md", "1x.py"]
    assert own_modules(files) == ["pkg", "src", "tool"]
    assert own_modules(files, ("", "src")) == ["lib", "pkg", "src", "tool"]
    assert ProjectTests(import_roots=("src",)).own_modules(files) == ["lib", "pkg", "src", "tool"]


def test_a_time_limit_says_where_it_was_set_and_keeps_saying_so_once_stored() -> None:
    """A run stopped by the limit names what a person changes: the project's table, their setting,
    or (when neither set it) the table where the default can be raised."""
    tested = {**CODE, "tests/test_a.py": ""}
    by_default, by_setting = detect(tested), detect(tested, timeout_s=42)
    by_project = detect({**tested, "pyproject.toml": "[tool.rlide]\ntest_timeout_s = 7\n"}, timeout_s=42)
    assert by_default is not None and by_setting is not None and by_project is not None
    assert "default" in by_default.timeout_from and "[tool.rlide] test_timeout_s" in by_default.timeout_from
    assert by_setting.timeout_s == 42 and by_setting.timeout_from.startswith("RLIDE_TEST_TIMEOUT_S")
    assert by_project.timeout_s == 7 and by_project.timeout_from == "[tool.rlide] test_timeout_s"
    for tests in (by_default, by_setting, by_project):
        assert ProjectTests.from_json(tests.to_json()) == tests
