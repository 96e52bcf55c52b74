"""`rlide eval` on a bug instance of a real library (more-itertools' pinned sdist, one off-by-one):
the gold patch resolves it in any answer form, leaving it does not, and a candidate that edits the
tests, deletes them or adds a `conftest.py` that passes everything does not either: the judged
run gets the commit's test files back. Real git, the real sandbox, pytest's report."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from envpool.verifiers.project import ProjectTests
from tests.real_projects import PROJECTS
from training.scenarios.bug_tasks.attempt import BugTask, pose, score
from training.scenarios.bug_tasks.generate import diff
from training.scenarios.bug_tasks.judge import SandboxRuns
from training.scenarios.bug_tasks.repo import commit_tree, write_archive
from training.scenarios.eval import evaluate, select_tasks
from training.scenarios.snapshots import unified_diff
from training.scenarios.verification import ANSWER_TIMEOUT_S, answer_limits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")

SDIST = PROJECTS / "more_itertools-11.2.1.tar.gz"
MODULE = "more_itertools/more.py"
RIGHT = "(seq[i : i + n] for i in count(0, n))"
WRONG = "(seq[i : i + n] for i in count(1, n))"
TESTS = "tests/test_more.py"
F2P = [f"{TESTS}::SlicedTests::test_even", f"{TESTS}::SlicedTests::test_odd"]
P2P = [f"{TESTS}::SlicedTests::test_negative", f"{TESTS}::ChunkedTests::test_even", f"{TESTS}::ChunkedTests::test_odd"]
PLUGIN_FLIP = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)


class Fixed:
    """Answers every prompt with the same completions; keeps the prompts it was asked."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(
        self, messages: list[dict[str, Any]], *, n: int, max_tokens: int, temperature: float, seed: int
    ) -> list[str]:
        self.prompts.append(messages[-1]["content"])
        return self.answers[:n]


@pytest.fixture(scope="module")
def instance_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SDIST.is_file():
        pytest.skip(f"{SDIST} is missing: `make setup` fetches it (scripts/setup_projects.sh)")
    folder = tmp_path_factory.mktemp("bugs")
    with tarfile.open(SDIST) as tar:
        tar.extractall(folder / "src", filter="data")
    [root] = list((folder / "src").iterdir())
    commit = commit_tree(root)
    write_archive(root, folder / "mi.repo.tar.gz")
    text = (root / MODULE).read_text()
    bugged = text.replace(RIGHT, WRONG)
    line = {
        "instance_id": "more-itertools__sliced__off_by_one",
        "repo": "more-itertools/more-itertools",
        "base_commit": commit,
        "patch": diff(MODULE, bugged, text),
        "test_patch": "",
        "FAIL_TO_PASS": json.dumps(F2P),
        "PASS_TO_PASS": json.dumps(P2P),
        "problem_statement": "sliced() loses items: tests/test_more.py::SlicedTests::test_even fails.",
        "repo_archive": "mi.repo.tar.gz",
        "bug_patch": diff(MODULE, text, bugged),
        "test_command": f"pytest {TESTS}::SlicedTests {TESTS}::ChunkedTests",
    }
    path = folder / "bugs.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs() -> Any:
    runs = SandboxRuns()
    yield runs
    runs.close()


def test_the_gold_patch_resolves_and_the_report_gives_the_fix_rate(instance_file: Path, runs: Any) -> None:
    tasks = select_tasks(str(instance_file))
    gold = tasks.bugs[0].instance.patch
    policy = Fixed(f"```diff\n{gold}```", "I could not find the bug.")
    report = evaluate(policy, None, tasks, samples=2, runs_for=runs).to_dict()  # type: ignore[arg-type]
    [outcome] = report["instances"]
    assert outcome["instance_id"] == "more-itertools__sliced__off_by_one" and outcome["unverifiable"] is False
    assert (outcome["resolved"], outcome["resolved_samples"], outcome["samples"]) == (True, 1, 2), outcome
    assert report["fix_rate"] == 0.5 and "no change applied" in outcome["detail"]
    prompt = policy.prompts[0]
    assert "def sliced(" in prompt and WRONG in prompt and "<<<<<<< SEARCH" in prompt  # the code involved, the format
    assert "count(0, n)" not in prompt  # the fix is not given away


def test_each_answer_form_of_the_fix_resolves_and_leaving_it_does_not(instance_file: Path, runs: Any) -> None:
    [task] = select_tasks(str(instance_file)).bugs
    posed = pose(task, runs)
    search_replace = f"{MODULE}\n<<<<<<< SEARCH\n{WRONG.join(['    iterator = takewhile(len, ', ')'])}\n=======\n"
    search_replace += f"{RIGHT.join(['    iterator = takewhile(len, ', ')'])}\n>>>>>>> REPLACE\n"
    source = posed.prepared.start[MODULE]
    start = source.index("def sliced(")
    end = source.index("\ndef ", start + 1)
    rewrite = "```python\n" + source[start:end].replace(WRONG, RIGHT) + "```\n"
    for answer in (search_replace, rewrite):
        assert score(posed, answer, runs).resolved, answer
    assert not score(posed, "The code looks right to me.", runs).resolved


def _hostile(task: BugTask, runs: Any) -> dict[str, str]:
    posed = pose(task, runs)
    tests = posed.prepared.start[TESTS]
    gutted = tests.replace("self.assertEqual(list(mi.sliced(seq, 3)), ['ABC', 'DEF', 'GHI'])", "pass")
    return {
        "conftest that passes everything": "```diff\n"
        + unified_diff({"conftest.py": None}, {"conftest.py": PLUGIN_FLIP})
        + "```",
        "tests/conftest.py too": "```diff\n"
        + unified_diff({"tests/conftest.py": None}, {"tests/conftest.py": PLUGIN_FLIP})
        + "```",
        "the failing test edited": "```diff\n" + unified_diff({TESTS: tests}, {TESTS: gutted}) + "```",
        "the tests deleted": "```diff\n" + unified_diff({TESTS: tests}, {TESTS: None}) + "```",
        "search/replace on the test": (
            f"{TESTS}\n<<<<<<< SEARCH\n        self.assertEqual(list(mi.sliced(seq, 3)), ['ABC', 'DEF', 'GHI'])\n"
            "=======\n        pass\n>>>>>>> REPLACE\n"
        ),
    }


def test_a_candidate_that_edits_the_tests_or_the_conftest_is_not_resolved(instance_file: Path, runs: Any) -> None:
    [task] = select_tasks(str(instance_file)).bugs
    posed = pose(task, runs)
    for name, answer in _hostile(task, runs).items():
        scored = score(posed, answer, runs)
        assert not scored.resolved, (name, scored)
        assert "failing tests pass" in scored.detail, (name, scored)  # judged, not refused as malformed


def test_an_answer_that_loops_forever_fails_within_the_answer_limit(instance_file: Path, runs: Any) -> None:
    tasks = select_tasks(str(instance_file))
    assert pose(tasks.bugs[0], runs).prepared.tests.timeout_s == ANSWER_TIMEOUT_S  # not the project's 300 s
    loop = f"{MODULE}\n<<<<<<< SEARCH\n{WRONG.join(['    iterator = takewhile(len, ', ')'])}\n=======\n"
    loop += "    while True:\n        pass\n>>>>>>> REPLACE\n"
    report = evaluate(Fixed(loop), None, tasks, timeout_s=3, runs_for=runs).to_dict()  # type: ignore[arg-type]
    [outcome] = report["instances"]
    assert not outcome["resolved"] and not outcome["unverifiable"], outcome
    assert "time limit (3s; the limit on judging a model's answer)" in outcome["detail"], outcome


def test_a_project_limit_below_the_answer_cap_stays_in_force_under_its_own_name() -> None:
    lower = ProjectTests(timeout_s=ANSWER_TIMEOUT_S / 2, timeout_from="[tool.rlide] test_timeout_s")
    assert answer_limits(lower) is lower
    capped = answer_limits(ProjectTests())
    assert capped.timeout_s == ANSWER_TIMEOUT_S < ProjectTests().timeout_s
    assert capped.timeout_from == "the limit on judging a model's answer"
