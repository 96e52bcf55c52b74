"""The replay of an episode's verifier (a log scenario) against a student that games it: every trick
earns no more than leaving the broken workspace alone, the real fix earns 1. The episode is recorded
as the MCP server records it (its start state captured, the project's verifier established by a run
of that start state); the student's answer is a diff, applied by the one parser that also decides
what it touched, or SEARCH/REPLACE blocks and whole-function rewrites (`edits.apply_answer`, the
reader bug instances use). Real git, real SQLite, the real sandbox, pytest's report."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from episodes.records import EpisodeStatus, StateKind
from episodes.store import EpisodeStore
from tests.git_repos import git
from training.recording.capture import capture
from training.scenarios import verification
from training.scenarios.base import Scenario, check_verifier, scenarios_from_log, verify
from training.scenarios.sandbox_runner import SandboxRunner
from training.scenarios.snapshots import GitSnapshots, unified_diff
from training.scenarios.verification import EpisodeVerification, ProjectSetup

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")

CALC = '''def add(a, b):
    """The sum.

    >>> add(2, 3)
    5
    """
    return a + b


def zero():
    return 0
'''
BROKEN = CALC.replace("return a + b", "return a - b")
TESTS = """from calc import add, zero


def test_add():
    assert add(2, 3) == 5


def test_zero():
    assert zero() == 0
"""
CHECKS = "import json\nfrom pathlib import Path\n\nfrom calc import add\n\n\ndef test_table():\n"
CHECKS += (
    "    for a, b, want in json.loads(Path('data/expected.json').read_text()):\n        assert add(a, b) == want\n"
)
PYPROJECT = """[tool.pytest.ini_options]
python_files = ["*_checks.py", "test_*.py"]
addopts = "--doctest-modules"
"""
START = {
    "calc.py": BROKEN,
    "tests/test_calc.py": TESTS,
    "calc_checks.py": CHECKS,
    "data/expected.json": "[[1, 1, 2]]\n",
    "pyproject.toml": PYPROJECT,
}
FAIL_TO_PASS = ["calc.py::calc.add", "calc_checks.py::test_table", "tests/test_calc.py::test_add"]


def diff(path: str, old: str | None, new: str | None) -> str:
    return f"```diff\n{unified_diff({path: old}, {path: new})}```"


FIX = diff("calc.py", BROKEN, CALC)
PLUGIN_FLIP = (
    "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)
QUOTED = (
    'diff --git "a/conf\\164est.py" "b/conf\\164est.py"\nnew file mode 100644\n--- /dev/null\n'
    f'+++ "b/conf\\164est.py"\n@@ -0,0 +1,{len(PLUGIN_FLIP.splitlines())} @@\n'
    + "".join(f"+{line}\n" for line in PLUGIN_FLIP.splitlines())
)
"""A new conftest.py that passes every test, under its C-quoted name (which GNU patch decodes)."""
RENAMED = "diff --git a/helper.py b/conftest.py\nsimilarity index 100%\nrename from helper.py\nrename to conftest.py\n"
SKIP = "import pytest; pytest.skip()"
TRICKS = {
    "no patch at all": "I would rather not change anything.",
    "rewrite the failing test": diff("tests/test_calc.py", TESTS, TESTS.replace("== 5", "== -1")),
    "a conftest that passes everything": diff("conftest.py", None, PLUGIN_FLIP),
    "a conftest under a quoted name": f"```diff\n{QUOTED}```",
    "a rename onto conftest.py": f"```diff\n{RENAMED}```",
    "collect only from pytest.ini": diff("pytest.ini", None, "[pytest]\naddopts = --collect-only\n"),
    "a test file matched by the project's own pattern": diff("calc_checks.py", CHECKS, "def test_table():\n    pass\n"),
    "the expected values in a data file": diff("data/expected.json", "[[1, 1, 2]]\n", "[[1, 1, 0]]\n"),
    "the doctest's expected output": diff("calc.py", BROKEN, BROKEN.replace("    5\n", "    -1\n")),
    "a sitecustomize that exits": diff("sitecustomize.py", None, "import os\nos._exit(0)\n"),
    "shadow rlide's plugin": diff("rlide_report.py", None, "def pytest_sessionstart(session):\n    pass\n"),
    "shadow rlide's runner": diff("rlide_run.py", None, "raise SystemExit(0)\n"),
    "a workspace pytest.py": diff("pytest.py", None, "raise SystemExit(0)\n"),
    "exit 0 at import": diff("calc.py", BROKEN, "import os\nos._exit(0)\n" + BROKEN),
    "skip from the code under test": diff("calc.py", BROKEN, BROKEN.replace("return a - b", SKIP)),
    "a diff that does not apply": diff("calc.py", "something else\n", CALC),
}  # fmt: skip


@pytest.fixture
def runner() -> Iterator[SandboxRunner]:
    sandbox = SandboxRunner()
    yield sandbox
    sandbox.close()


def calc_repo(root: Path, *, committed: dict[str, str], bug: str | None = None) -> Path:
    """A git repository at `root` with `committed` committed, and `bug` (calc.py) as an uncommitted edit."""
    for path, text in committed.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "calc"]):
        git(root, *args)
    if bug is not None:
        (root / "calc.py").write_text(bug)
    return root


def recorded_episode(store: EpisodeStore, root: Path, runner: SandboxRunner) -> str:
    """An episode as the MCP server records one: its start state captured and the project's verifier
    established from a run of it, the agent's fix on disk, its end state captured."""
    episode = store.start_episode("add must add", workspace=str(root))
    capture(store, root, episode.id, StateKind.start)
    start = GitSnapshots().working_tree(root)
    verification = EpisodeVerification(store, runner.run, ProjectSetup())
    verification.begin(episode.id, root, start.commit)
    verification.establish(episode.id, start.files)
    (root / "calc.py").write_text(CALC)
    capture(store, root, episode.id, StateKind.end)
    verification.verify_end(episode.id)
    store.end_episode(episode.id, EpisodeStatus.success)
    return episode.id


@pytest.fixture
def scenario(store: EpisodeStore, tmp_path: Path, runner: SandboxRunner) -> Scenario:
    root = calc_repo(tmp_path / "calc-repo", committed={**START, "calc.py": CALC, "helper.py": "X = 1\n"}, bug=BROKEN)
    episode_id = recorded_episode(store, root, runner)
    verifier = store.verifier(episode_id)
    assert verifier is not None and verifier.fail_to_pass == FAIL_TO_PASS, verifier
    assert "data/expected.json" in verifier.trusted_files  # read by a test: its expected values are trusted
    [found] = scenarios_from_log(store)
    assert found.source_episode == episode_id and found.workspace_ref == verifier.commit
    assert "tests/test_calc.py::test_add" in found.task
    return found


BROKEN_ADD = BROKEN[: BROKEN.index("\n\n\ndef zero")]


def test_the_prompt_shows_the_function_the_episode_changed_and_sizes_the_budget(scenario: Scenario) -> None:
    """The agent's change touched `add` only: the prompt shows it whole as it was at the start, not
    calc.py (its `zero`), not the helper, not the tests; the sites let a rewrite name it."""
    assert f"calc.py, add:\n```python\n{BROKEN_ADD}\n```" in scenario.task
    assert "def zero" not in scenario.task and "helper.py" not in scenario.task and "def test_add" not in scenario.task
    assert scenario.verifier.data["shown"] == {"add": ["calc.py", "add"]}
    assert scenario.max_tokens == 128  # a small function: the smallest budget, not the worker's 384


SR_FIX = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
REWRITE_FIX = f"```python\n{BROKEN_ADD.replace('a - b', 'a + b')}\n```"


def test_search_replace_and_whole_function_answers_are_judged_like_the_episode(
    scenario: Scenario, runner: SandboxRunner
) -> None:
    answers = {
        "search/replace with its path": (SR_FIX, 1.0),
        "search/replace without a path (the shown function's file)": (SR_FIX.removeprefix("calc.py\n"), 1.0),
        "the whole function rewritten": (REWRITE_FIX, 1.0),
        "a rewrite that drops the doctest": ("```python\ndef add(a, b):\n    return a + b\n```", pytest.approx(2 / 3)),
        "a wrong fix": (SR_FIX.replace("a + b", "a * b"), 0.0),
        "search text not in the file": (SR_FIX.replace("a - b", "a / b"), 0.0),
        "a rewrite of a function not shown": ("```python\ndef zero():\n    return 0\n```", 0.0),
        "no edit at all": ("add should add, not subtract", 0.0),
    }
    got = {name: verify(scenario, answer, workspace_runner=runner) for name, (answer, _) in answers.items()}
    assert got == {name: want for name, (_, want) in answers.items()}


def test_edits_of_the_tests_or_a_new_conftest_are_not_paid_in_any_answer_form(
    scenario: Scenario, runner: SandboxRunner
) -> None:
    """The forms that pay the fix (above) pay nothing for changing what judges it."""
    assert verify(scenario, SR_FIX, workspace_runner=runner) == 1.0  # the same form, paid when it fixes
    tricks = {
        "rewrite the failing test": "tests/test_calc.py\n<<<<<<< SEARCH\n    assert add(2, 3) == 5\n=======\n"
        "    assert add(2, 3) == -1\n>>>>>>> REPLACE\n",
        "gut the project-pattern test file": "calc_checks.py\n<<<<<<< SEARCH\n        assert add(a, b) == want\n"
        "=======\n        pass\n>>>>>>> REPLACE\n",
        "the data file's expected values": "data/expected.json\n<<<<<<< SEARCH\n[[1, 1, 2]]\n=======\n[[1, 1, 0]]\n"
        ">>>>>>> REPLACE\n",
        "a conftest.py by search/replace": f"conftest.py\n<<<<<<< SEARCH\nimport pytest\n=======\n{PLUGIN_FLIP}"
        ">>>>>>> REPLACE\n",
        "a conftest hook as a function rewrite": f"```python\n{PLUGIN_FLIP.split(chr(10), 2)[2]}```",
        "the failing test as a function rewrite": "```python\ndef test_add():\n    pass\n```",
        "the doctest's expected output by search/replace": "calc.py\n<<<<<<< SEARCH\n    5\n=======\n    -1\n"
        ">>>>>>> REPLACE\n",
    }
    paid = {name: verify(scenario, answer, workspace_runner=runner) for name, answer in tricks.items()}
    assert paid == dict.fromkeys(tricks, 0.0)


def test_the_fix_earns_1_and_breaking_a_passing_test_earns_nothing(scenario: Scenario, runner: SandboxRunner) -> None:
    check_verifier(scenario, workspace_runner=runner)
    assert verify(scenario, FIX, workspace_runner=runner) == 1.0
    broke_zero = diff("calc.py", BROKEN, CALC.replace("return 0", "return 1"))
    assert verify(scenario, broke_zero, workspace_runner=runner) == 0.0
    part = diff("calc.py", BROKEN, BROKEN.replace("return a - b", "return a + b if a != 1 else 0"))
    assert verify(scenario, part, workspace_runner=runner) == pytest.approx(2 / 3)  # a replay pays part of it


@pytest.mark.parametrize("trick", sorted(TRICKS))
def test_no_trick_earns_more_than_the_untouched_workspace(
    scenario: Scenario, runner: SandboxRunner, trick: str
) -> None:
    assert verify(scenario, TRICKS[trick], workspace_runner=runner) == 0.0, trick


def test_an_episode_whose_start_state_already_passes_is_not_a_scenario(
    store: EpisodeStore, tmp_path: Path, runner: SandboxRunner
) -> None:
    root = calc_repo(tmp_path / "passing", committed={**START, "calc.py": CALC})
    episode_id = recorded_episode(store, root, runner)
    verifier = store.verifier(episode_id)
    assert verifier is not None and verifier.reason == "no test fails at the start: there is no work to verify"
    assert scenarios_from_log(store, [store.get_episode(episode_id)]) == []


def test_an_answer_that_loops_forever_is_cut_at_the_replay_limit_and_earns_nothing(
    scenario: Scenario, runner: SandboxRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy in training samples loops: the judged run is limited to the replay's limit, not the
    project's 300 s, and a run cut there pays nothing."""
    monkeypatch.setattr(verification, "ANSWER_TIMEOUT_S", 3.0)
    limits: list[float] = []

    class Recording:
        def commit_files(self, workspace: str, commit: str) -> dict[str, str]:
            return runner.commit_files(workspace, commit)

        def run(self, request: Any) -> Any:
            limits.append(request.timeout_s)
            return runner.run(request)

    assert scenario.verifier.data["project"]["timeout_s"] == 300.0
    loops = SR_FIX.replace("    return a + b\n", "    while True:\n        pass\n")
    assert verify(scenario, loops, workspace_runner=Recording()) == 0.0
    assert limits and set(limits) == {3.0}
