"""Test runs read through pytest's own report: each trick that used to pass a run gets no report, or
a report in which nothing it touched passes (envpool/verifiers/reports.py, trusted.py)."""

from __future__ import annotations

import json

import pytest

from envpool.sandbox.base import InvalidRequest, Sandbox, TestRunRequest, prepare_test_run, read_test_run
from envpool.verifiers import fail_to_pass
from envpool.verifiers.reports import TestReport

CALC = "def add(a, b):\n    return a - b\n"
TESTS = (
    "from calc import add\n\n"
    "def test_add():\n    assert add(2, 2) == 4\n\n"
    "def test_zero():\n    assert add(0, 0) == 0\n"
)
ADD, ZERO = "test_calc.py::test_add", "test_calc.py::test_zero"
PYTEST = "python -m pytest -q"

REWRITE_AT_EXIT = """import atexit, os
def _rewrite():
    for folder, _, names in os.walk("."):
        for name in names:
            path = os.path.join(folder, name)
            try:
                text = open(path).read()
                open(path, "w").write(text.replace("failed", "passed").replace("error", "passed"))
            except OSError:
                pass
atexit.register(_rewrite)
def add(a, b):
    return a - b
"""
FORGE = """import json, os, uuid
environ = dict(v.split("=", 1) for v in open("/proc/self/environ").read().split("\\0") if "=" in v)
nonce, session = environ.get("RLIDE_NONCE", ""), uuid.uuid4().hex
tests = ["test_calc.py::test_add", "test_calc.py::test_zero"]
finish = {"exitstatus": 0, "collected": tests, "outcomes": dict.fromkeys(tests, "passed"), "tampered": [], "hooks": []}
for event in ({"session": session, "event": "start"}, {"session": session, "event": "finish", **finish}):
    line = ("\\nrlide-test-report:%s:%s\\n" % (nonce, json.dumps(event))).encode()
    for fd in range(1, 64):
        try:
            os.write(fd, line)
        except OSError:
            pass
"""
REGISTER_PLUGIN = """import gc, pytest, _pytest.config
class Passing:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        outcome.get_result().outcome = "passed"
for obj in gc.get_objects():
    if isinstance(obj, _pytest.config.Config):
        obj.pluginmanager.register(Passing())
def add(a, b):
    return a - b
"""
# The plugin's own state, reached through sys.modules from the module under test.
REWRITE_TABLE = """import sys
class Passed(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key, "passed")
    def get(self, key, default=None):
        return None
sys.modules["rlide_report"]._outcomes = Passed()
def add(a, b):
    return a - b
"""
REWRITE_EMIT = """import sys
plugin = sys.modules["rlide_report"]
real = plugin._emit
def emit(event, body="", **kw):
    return real(event, body.replace('"failed"', '"passed"'), **kw)
plugin._emit = emit
plugin._tampered = lambda *a, **k: []
plugin._writable_hooks = lambda *a, **k: []
import os
real_write = os.write
os.write = lambda fd, data: real_write(fd, data.replace(b'"failed"', b'"passed"'))
def add(a, b):
    return a - b
"""
REWRITE_CODE = """import sys
plugin = sys.modules["rlide_report"]
def logreport(report):
    pass
plugin.pytest_runtest_logreport.__code__ = logreport.__code__
def add(a, b):
    return a - b
"""
SILENCE = """import os, sys
os.dup2(os.open(os.devnull, os.O_WRONLY), sys.modules["rlide_report"]._OUT)
def add(a, b):
    return a - b
"""
TRICKS: dict[str, tuple[str, dict[str, str]]] = {
    # name: (command, files written over the project)
    "exit status only": ("true", {}),
    "a printed summary": ("echo '1000 passed in 0.1s'", {}),
    "exit before the session ends": (PYTEST, {"calc.py": "import os\nos._exit(0)\n"}),
    "collect only": (f"{PYTEST} --collect-only", {}),
    "collect only from pytest.ini": (PYTEST, {"pytest.ini": "[pytest]\naddopts = --collect-only\n"}),
    "skip everything": (
        PYTEST,
        {"conftest.py": "import pytest\ndef pytest_collection_modifyitems(items):\n"
         "    for item in items:\n        item.add_marker(pytest.mark.skip)\n"},
    ),
    "xfail everything": (
        PYTEST,
        {"conftest.py": "import pytest\ndef pytest_collection_modifyitems(items):\n"
         "    for item in items:\n        item.add_marker(pytest.mark.xfail)\n"},
    ),
    "replace pytest's report": (
        PYTEST,
        {"calc.py": "import _pytest.runner as runner\n_real = runner.call_and_report\n"
         "def fake(item, when, log=True, **kw):\n    report = _real(item, when, log=False, **kw)\n"
         "    report.outcome = 'passed'\n    if log:\n        item.ihook.pytest_runtest_logreport(report=report)\n"
         "    return report\nrunner.call_and_report = fake\ndef add(a, b):\n    return a - b\n"},
    ),
    "exit 0 from a test module": (PYTEST, {"calc.py": "import sys\nsys.exit(0)\n"}),
    "select only what passes": (f"{PYTEST} -k zero", {}),
    "turn rlide's plugin off": (f"PYTEST_ADDOPTS= {PYTEST}", {}),
    "rewrite every report file at exit": (PYTEST, {"calc.py": REWRITE_AT_EXIT}),
    "forge a report on every descriptor, then exit": (PYTEST, {"calc.py": FORGE + "os._exit(0)\n"}),
    "forge a report on every descriptor": (PYTEST, {"calc.py": FORGE + "def add(a, b):\n    return a - b\n"}),
    "register a plugin that rewrites reports": (PYTEST, {"calc.py": REGISTER_PLUGIN}),
    "kill the interpreter in a test": (PYTEST, {"calc.py": "import os\ndef add(a, b):\n    os._exit(0)\n"}),
    "rewrite the plugin's outcome table": (PYTEST, {"calc.py": REWRITE_TABLE}),
    "replace the plugin's functions and os.write": (PYTEST, {"calc.py": REWRITE_EMIT}),
    "rewrite the code of the plugin's hook": (PYTEST, {"calc.py": REWRITE_CODE}),
    "point the plugin's descriptor at /dev/null": (PYTEST, {"calc.py": SILENCE}),
}  # fmt: skip


def judged(sandbox: Sandbox, command: str | None, files: dict[str, str]) -> float | None:
    """The fail-to-pass reward of a run of `command` (None: rlide's trusted runner, as an episode's
    verifier runs) on the project with `files` over it (None: no report)."""
    given = {"calc.py": CALC, "test_calc.py": TESTS, **files}
    if command is None:
        test = TestRunRequest(files=given, pytest_args=["-q"], own_modules=["calc", "test_calc"])
    else:
        test = TestRunRequest(files=given, test_command=command)
    request = prepare_test_run(test)
    outcome = read_test_run(request, sandbox.run(request))
    if outcome.report is None:
        return None
    return fail_to_pass.judge(outcome.report, [ADD], [ZERO], partial=False).reward


@pytest.mark.parametrize("command", [PYTEST, None], ids=["a pytest command", "rlide's runner"])
def test_the_start_state_and_the_fix_are_judged_by_pytests_report(sandbox: Sandbox, command: str | None) -> None:
    assert judged(sandbox, command, {}) == -1.0
    assert judged(sandbox, command, {"calc.py": "def add(a, b):\n    return a + b\n"}) == 1.0
    assert judged(sandbox, command, {"calc.py": "def add(a, b):\n    return 4\n"}) == -1.0  # breaks test_zero


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_no_trick_earns_more_than_the_untouched_project(sandbox: Sandbox, trick: str) -> None:
    command, files = TRICKS[trick]
    reward = judged(sandbox, command, files)
    assert reward is None or reward <= -1.0, (trick, reward)


@pytest.mark.parametrize("trick", sorted(trick for trick, (command, _) in TRICKS.items() if command == PYTEST))
def test_no_trick_in_the_code_under_test_passes_rlides_runner(sandbox: Sandbox, trick: str) -> None:
    """The same tricks in the files, run by rlide's trusted runner (how an episode's verifier runs)."""
    reward = judged(sandbox, None, TRICKS[trick][1])
    assert reward is None or reward <= -1.0, (trick, reward)


def test_a_patch_that_does_not_apply_is_refused_before_anything_runs() -> None:
    test = TestRunRequest(files={"calc.py": CALC}, patch="--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n",
                          test_command=PYTEST)  # fmt: skip
    with pytest.raises(InvalidRequest, match="the patch does not apply: .*nope.py"):
        prepare_test_run(test)


def test_a_report_from_another_run_is_not_read(sandbox: Sandbox) -> None:
    """The report is read behind this run's nonce: one printed by the program with another is ignored."""
    first = prepare_test_run(TestRunRequest(files={"calc.py": CALC, "test_calc.py": TESTS}, test_command=PYTEST))
    printed = [line for line in sandbox.run(first).stdout.splitlines() if line.startswith("rlide-test-report:")]
    events = [json.loads(line.split(":", 2)[2])["event"] for line in printed]
    assert events == ["start", "collected", "outcome", "outcome", "finish"]  # behind the first run's nonce
    replay = "; ".join(f"echo '{line}'" for line in printed)
    second = prepare_test_run(TestRunRequest(files={"calc.py": CALC}, test_command=replay))
    assert read_test_run(second, sandbox.run(second)).report is None


def test_fail_to_pass_sets_come_from_a_failing_start() -> None:
    report = TestReport({ADD: "failed", ZERO: "passed", "t::skipped": "skipped", "t::err": "error"}, 1)
    assert fail_to_pass.start(report) == ({ADD, "t::err"}, {ZERO})
    assert fail_to_pass.start(TestReport({ZERO: "passed"}, 0)) is None
    missing = fail_to_pass.judge(TestReport({ADD: "passed"}, 0), [ADD], [ZERO], partial=False)
    assert missing.reward == -1.0 and ZERO in missing.line  # a deselected test that passed does not pass
    half_done = TestReport({ADD: "passed", "t::err": "failed", ZERO: "passed"}, 1)
    assert fail_to_pass.judge(half_done, [ADD, "t::err"], [ZERO], partial=True).reward == 0.0  # a replay
    unresolved = fail_to_pass.judge(half_done, [ADD, "t::err"], [ZERO], partial=False)  # an episode: resolved or not
    assert unresolved.reward == -1.0 and "whole fix only" in unresolved.line
