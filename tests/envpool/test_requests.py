"""Boundary models: path validation, test runs with a patch, languages, backend selection."""

from __future__ import annotations

import shutil
import warnings

import pytest
from pydantic import ValidationError

from envpool.sandbox import make_sandbox
from envpool.sandbox.base import (
    SCRIPT_TEST_FILE,
    InvalidRequest,
    RunRequest,
    RunStatus,
    TestRunRequest,
    defines_tests,
    prepare_test_run,
    read_test_run,
    run_tests,
    validate_relative_path,
)
from envpool.sandbox.bwrap import BwrapSandbox
from envpool.sandbox.local import UnsafeLocalWarning
from tests.envpool.conftest import requires_bwrap

BAD_PATHS = ["/etc/passwd", "../x", "a/../../x", "a/./b", "", "a//b", "-rf", "a\\b", "a\x00b", "..", "a/"]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_bad_paths_are_refused(path: str) -> None:
    with pytest.raises((InvalidRequest, ValidationError)):
        RunRequest(code="pass", files={path: "x"})


def test_good_paths_are_kept() -> None:
    assert validate_relative_path("pkg/mod.py") == "pkg/mod.py"
    assert RunRequest(code="pass", files={"a/b.txt": "x"}).files == {"a/b.txt": "x"}


def test_oversized_request_is_refused() -> None:
    with pytest.raises((InvalidRequest, ValidationError), match="too large"):
        RunRequest(code="x" * (17 * 1024 * 1024))


def test_ld_preload_env_is_refused() -> None:
    with pytest.raises((InvalidRequest, ValidationError)):
        RunRequest(code="pass", env={"LD_PRELOAD": "/x.so"})


def test_text_no_file_or_pipe_can_hold_is_refused() -> None:
    for kwargs, why in [
        ({"files": {"a\ud800.py": ""}}, "not valid Unicode text"),
        ({"env": {"NAME": "a\udc80"}}, "not valid Unicode text"),
        ({"env": {"NAME": "a\x00b"}}, "holds a NUL character"),
    ]:
        with pytest.raises((InvalidRequest, ValidationError), match=why):
            RunRequest(code="pass", **kwargs)  # type: ignore[arg-type]
    assert RunRequest(code="print('\u00e9\U0001f642')", stdin="\u202e").code.endswith("')")  # any real text is fine


SOURCE = "def add(a, b):\n    return a - b\n"
PATCH = """--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""
TESTS = "import calc\nassert calc.add(2, 3) == 5, calc.add(2, 3)\nprint('passed')\n"


@requires_bwrap
@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_run_tests_with_a_patch(sandbox: BwrapSandbox) -> None:
    def outcome(test: TestRunRequest) -> tuple[RunStatus, bool, dict[str, str] | None]:
        request = prepare_test_run(test)
        result = sandbox.run(request)
        read = read_test_run(request, result)
        return result.status, read.applied, None if read.report is None else read.report.outcomes

    script = ".rlide/test_given_script.py::test_given_code"
    unpatched = TestRunRequest(files={"calc.py": SOURCE}, tests=TESTS)
    assert outcome(unpatched) == (RunStatus.ERROR, True, {script: "failed"})
    patched = TestRunRequest(files={"calc.py": SOURCE}, patch=PATCH, tests=TESTS)
    assert outcome(patched) == (RunStatus.OK, True, {script: "passed"})
    command = TestRunRequest(files={"calc.py": SOURCE, "t.py": TESTS}, patch=PATCH, test_command="python3 t.py")
    assert run_tests(sandbox, command).status is RunStatus.OK
    assert outcome(command) == (RunStatus.OK, True, None)  # no pytest ran: no report
    hostile = TestRunRequest(files={"calc.py": SOURCE}, patch=PATCH.replace("calc.py", "../../etc/passwd"), tests=TESTS)
    with pytest.raises(InvalidRequest, match="the patch does not apply: .*'..'"):  # refused before anything runs
        prepare_test_run(hostile)


@requires_bwrap
def test_given_test_functions_run_under_pytest_and_scripts_as_one_test(sandbox: BwrapSandbox) -> None:
    """A workspace's own `tests` package still imports: the given code is not itself `tests`. A script
    (no test functions) runs as one pytest test, its asserts failing it: pytest's report says so."""
    files = {"calc.py": SOURCE, "tests/__init__.py": "", "tests/expect.py": "FIVE = 5\n"}
    cases = [
        ("from calc import add\nfrom tests.expect import FIVE\n\ndef test_add():\n"
         "    assert add(2, 3) == FIVE\n", "1 failed"),
        ("import unittest\nimport calc\n\nclass Calc(unittest.TestCase):\n    def test_add(self):\n"
         "        self.assertEqual(calc.add(2, 3), 5)\n", "1 failed"),
        ("import calc\n\nclass TestCalc:\n    def test_sub(self):\n        assert calc.add(3, 2) == 1\n", "1 passed"),
    ]  # fmt: skip
    for tests, summary in cases:
        result = sandbox.run(prepare_test_run(TestRunRequest(files=files, tests=tests)))
        assert summary in result.stdout, (tests, result.stdout, result.stderr)
        assert (result.status is RunStatus.OK) == (summary == "1 passed")
    request = prepare_test_run(TestRunRequest(files=files, tests=TESTS))
    script = sandbox.run(request)
    assert script.status is RunStatus.ERROR and "AssertionError: -1" in script.stdout
    report = read_test_run(request, script).report
    assert report is not None and report.outcomes == {".rlide/test_given_script.py::test_given_code": "failed"}


@pytest.mark.parametrize(
    ("code", "collected"),
    [
        ("def test_x():\n    pass\n", True),
        ("async def test_x():\n    pass\n", True),
        ("class TestX:\n    pass\n", True),
        ("import unittest\nclass Checks(unittest.TestCase):\n    pass\n", True),
        ("from unittest import TestCase\nclass Checks(TestCase):\n    pass\n", True),
        ("assert 1 + 1 == 2\n", False),
        ("def helper():\n    pass\nhelper()\n", False),
        ("def test_x(:\n", False),  # a syntax error: python3 reports it
    ],
)
def test_which_test_code_pytest_collects_itself(code: str, collected: bool) -> None:
    """Code that defines tests runs as pytest's file; any other runs inside one wrapping test."""
    assert defines_tests(code) is collected
    run = prepare_test_run(TestRunRequest(tests=code)).code
    assert "-m pytest" in run and (SCRIPT_TEST_FILE not in run) is collected


def test_test_run_needs_exactly_one_of_command_or_tests() -> None:
    with pytest.raises(InvalidRequest):
        prepare_test_run(TestRunRequest(files={}))
    with pytest.raises(InvalidRequest):
        prepare_test_run(TestRunRequest(test_command="true", tests="pass"))


@requires_bwrap
def test_files_stdin_and_languages(sandbox: BwrapSandbox) -> None:
    result = sandbox.run(
        RunRequest(
            code="import helper, sys; print(helper.X, sys.stdin.read())", files={"helper.py": "X = 7"}, stdin="in"
        )
    )
    assert result.status is RunStatus.OK and result.stdout == "7 in\n"
    result = sandbox.run(RunRequest(language="shell", code="cat data/x.txt; echo; exit 4", files={"data/x.txt": "hi"}))
    assert result.status is RunStatus.ERROR and result.exit_code == 4 and result.stdout == "hi\n"


PYTHON_LIKE_A_SCRIPT = """
import os, sys
line = input()
print(line, sys.argv, os.getcwd() == os.environ["HOME"] == os.environ["TMPDIR"], os.environ.get("EXTRA"))
print(sorted(os.listdir(".")), file=sys.stderr)
exit(4)
"""


@requires_bwrap
def test_a_python_run_is_set_up_like_a_script_of_its_own(sandbox: BwrapSandbox) -> None:
    # The stdio objects, environment and exit() come ready-made from the server; each run must
    # still read its own stdin, have its own workspace as HOME and TMPDIR, and see only its env.
    seen = []
    for n, extra in ((1, "a"), (2, None)):
        env = {"EXTRA": extra} if extra else {}
        result = sandbox.run(RunRequest(code=PYTHON_LIKE_A_SCRIPT, stdin=f"line {n}\n", env=env, files={f"f{n}": ""}))
        assert (result.status, result.exit_code) == (RunStatus.ERROR, 4), result
        assert result.stdout == f"line {n} ['main.py'] True {extra}\n"
        seen.append(result.stderr)
    assert seen == ["['f1']\n", "['f2']\n"]


@requires_bwrap
@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node(sandbox: BwrapSandbox) -> None:
    result = sandbox.run(RunRequest(language="node", code="console.log(6 * 7)"))
    assert result.status is RunStatus.OK and result.stdout == "42\n"
    result = sandbox.run(
        RunRequest(
            language="node",
            code="require('net').connect(22, '127.0.0.1').on('error', e => { console.error(e.code); process.exit(3) })",
        )
    )
    assert result.status is RunStatus.ERROR and "ECONNREFUSED" in result.stderr
    bomb = "const b = []; while (true) b.push(Buffer.alloc(64 * 1024 * 1024, 1));"
    result = sandbox.run(RunRequest(language="node", code=bomb, memory_mb=256))
    assert result.status is RunStatus.MEMORY_LIMIT, result.stderr[-500:]


def test_backend_problems_reports_every_backend() -> None:
    from envpool.sandbox import BACKENDS, backend_problems

    problems = backend_problems()
    assert set(problems) == set(BACKENDS) and problems["unsafe-local"] is None
    assert all(p is None or isinstance(p, str) for p in problems.values())


@requires_bwrap
def test_make_sandbox_passes_options() -> None:
    sb = make_sandbox("bwrap", workspace_mb=1, cgroups=False)
    try:
        result = sb.run(RunRequest(code="open('f', 'wb').write(b'x' * 2 * 1024 * 1024)"))
        assert result.status is RunStatus.ERROR and "No space left" in result.stderr
    finally:
        sb.close()


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        make_sandbox("nope")


def test_unsafe_local_only_by_name_and_warns() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb = make_sandbox("unsafe-local")
    try:
        assert any(issubclass(w.category, UnsafeLocalWarning) for w in caught)
        result = sb.run(RunRequest(code="print('local')"))
        assert result.status is RunStatus.OK and result.stdout == "local\n"
        assert sb.run(RunRequest(code="while True: pass", timeout_s=0.3)).status is RunStatus.TIMEOUT
    finally:
        sb.close()
