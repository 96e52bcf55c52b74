"""`benchmarks/learning.py --train FILE --heldout FILE`: the oracle's answers are the gold fix in the
form the student is asked for, the paired test is exact, and the whole benchmark runs end to end on
bug files (a tiny model: the run's mechanics, not its figures) with episodes recorded through the
real MCP server, verified by the project's tests, and replayed by GRPO."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envpool.verifiers.patches import apply_patch
from training.scenarios.bug_tasks.generate import diff
from training.scenarios.bug_tasks.judge import prepare
from training.scenarios.bug_tasks.repo import commit_tree, write_archive
from training.scenarios.edits import apply_answer
from training.scenarios.task_file import read_task_file

ROOT = Path(__file__).resolve().parents[2]
BUGS = ROOT / "benchmarks" / "bugs"
sys.path.insert(0, str(ROOT / "benchmarks"))

from bug_learning import search_replace_blocks, sign_test  # noqa: E402

SHIPPED = sorted(BUGS.glob("*.jsonl"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_the_oracle_answer_is_the_gold_fix_as_search_replace_blocks(path: Path) -> None:
    for _, instance in read_task_file(path).instances:
        start = prepare(instance, path.parent).start
        answer = search_replace_blocks(instance.patch, start)
        assert "<<<<<<< SEARCH" in answer and "```diff" not in answer
        assert apply_answer(start, answer, {}) == apply_patch(start, instance.patch).files


def test_a_hunk_whose_text_is_not_unique_is_answered_as_the_diff() -> None:
    method = "    def size(self):\n        return 1\n"
    start = {"m.py": f"class A:\n{method}\n\nclass B:\n{method}"}
    patch = "--- a/m.py\n+++ b/m.py\n@@ -7,2 +7,2 @@\n     def size(self):\n-        return 1\n+        return 2\n"
    fixed = apply_patch(start, patch).files
    assert fixed["m.py"].endswith("return 2\n") and fixed["m.py"].count("return 1") == 1
    answer = search_replace_blocks(patch, start)
    assert answer.startswith("```diff\n")  # its search text occurs twice: a block would be refused
    assert apply_answer(start, answer, {}) == fixed
    alone = {"m.py": f"class B:\n{method}"}
    one = "--- a/m.py\n+++ b/m.py\n@@ -2,2 +2,2 @@\n     def size(self):\n-        return 1\n+        return 2\n"
    assert search_replace_blocks(one, alone).startswith("m.py\n<<<<<<< SEARCH")


def test_a_block_keeps_only_the_context_that_makes_its_search_text_unique() -> None:
    start = {"m.py": "def f(x):\n    y = x\n    y = y + 1\n    return y\n\n\ndef g(x):\n    y = x\n    return y\n"}
    header = "--- a/m.py\n+++ b/m.py\n"
    patch = header + "@@ -1,4 +1,4 @@\n def f(x):\n     y = x\n-    y = y + 1\n+    y = y - 1\n     return y\n"
    answer = search_replace_blocks(patch, start)
    assert answer == "m.py\n<<<<<<< SEARCH\n    y = y + 1\n=======\n    y = y - 1\n>>>>>>> REPLACE"
    removed = header + "@@ -1,4 +1,3 @@\n def f(x):\n     y = x\n-    y = y + 1\n     return y\n"
    answer = search_replace_blocks(removed, start)  # a deletion keeps a line to replace with
    assert answer.count("\n") > 4 and apply_answer(start, answer, {}) == apply_patch(start, removed).files
    twice = header + "@@ -7,3 +7,3 @@\n def g(x):\n-    y = x\n+    y = -x\n     return y\n"
    answer = search_replace_blocks(twice, start)  # `    y = x` is in both functions: one neighbour stays
    assert answer == "m.py\n<<<<<<< SEARCH\n    y = x\n    return y\n=======\n    y = -x\n    return y\n>>>>>>> REPLACE"


def test_the_sign_test_is_exact_and_two_sided() -> None:
    before = {str(i): 0.0 for i in range(6)}
    five_up = {**before, **{str(i): 1.0 for i in range(5)}}
    assert sign_test(before, five_up) == {"improved": 5, "worsened": 0, "p_two_sided": 2 / 32}
    mixed_before = {**before, "3": 1.0}
    mixed_after = {"0": 1.0, "1": 0.5, "2": 0.25, "3": 0.0, "4": 0.0, "5": 0.0}
    assert sign_test(mixed_before, mixed_after) == {"improved": 3, "worsened": 1, "p_two_sided": 2 * (1 + 4) / 16}
    assert sign_test(before, before)["p_two_sided"] == 1.0


CALC = """def add(a, b):
    return a + b


def scale(values, factor):
    return [v * factor for v in values]
"""
CALC_TESTS = """from calc import add, scale


def test_add():
    assert add(2, 3) == 5


def test_add_negative():
    assert add(-2, 3) == 1


def test_scale():
    assert scale([1, 2], 3) == [3, 6]


def test_scale_empty():
    assert scale([], 3) == []
"""


def _bug_files(folder: Path) -> tuple[Path, Path]:
    """A small library as one git commit (its archive beside the files), with one train bug (in
    `add`) and one held-out bug (in `scale`): the instance format the generator writes."""
    root = folder / "calc-src"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text(CALC)
    (root / "tests" / "test_calc.py").write_text(CALC_TESTS)
    commit = commit_tree(root)
    write_archive(root, folder / "calc.repo.tar.gz")

    def instance(name: str, wrong: str, right: str, failing: list[str], passing: list[str]) -> str:
        bugged = CALC.replace(right, wrong)
        tests = [f"tests/test_calc.py::{t}" for t in failing], [f"tests/test_calc.py::{t}" for t in passing]
        return json.dumps(
            {
                "instance_id": f"calc__{name}", "repo": "example/calc", "base_commit": commit,
                "patch": diff("calc.py", bugged, CALC), "test_patch": "", "FAIL_TO_PASS": tests[0],
                "PASS_TO_PASS": tests[1], "problem_statement": f"{', '.join(tests[0])} fail.",
                "repo_archive": "calc.repo.tar.gz", "bug_patch": diff("calc.py", CALC, bugged),
            }
        )  # fmt: skip

    train, heldout = folder / "train.jsonl", folder / "heldout.jsonl"
    train.write_text(instance("add", "a - b", "a + b", ["test_add", "test_add_negative"], ["test_scale"]) + "\n")
    heldout.write_text(instance("scale", "v + factor", "v * factor", ["test_scale"], ["test_add"]) + "\n")
    return train, heldout


@pytest.mark.slow
@pytest.mark.training
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")
def test_the_benchmark_runs_on_bug_files_end_to_end(tmp_path: Path) -> None:
    train, heldout = _bug_files(tmp_path)
    out = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable, str(ROOT / "benchmarks" / "learning.py"), "--model", "tiny-qwen2",
            "--train", str(train), "--heldout", str(heldout), "--seeds", "0", "--samples", "0",
            "--humaneval", "0", "--sft-epochs", "1", "--grpo-steps", "1", "--grpo-groups", "1",
            "--group-size", "2", "--max-tokens", "8", "--shots", "1", "--rehearse", "2", "--out", str(out),
        ],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    [episode] = report["teacher"]["episodes"]
    assert report["teacher"]["kind"] == "oracle"
    # The project's tests, not the oracle's word, paid the episode: the failing tests now pass.
    assert episode["reward_total"] == 1.0 and episode["verdict"].startswith("2 of 2 failing tests pass"), episode
    assert report["teacher"]["sft_records"] == 1 and report["teacher"]["replay_scenarios"] == 1
    answer = report["teacher"]["sft_example"]["messages"][-1]["content"]
    assert answer == "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE"  # once
    [seed] = report["seeds"].values()
    [grpo] = seed["grpo"]
    assert seed["sft"] and grpo["groups"] == 1 and grpo["scenarios"] == [f"episode/{episode['episode_id']}"], grpo
    assert report["instances"]["heldout"] == ["calc__scale"]
    for when in (report["before"], report["control"], seed["after_sft"], seed["after"]):
        assert set(when["greedy"]["rates"]) == {"calc__scale"}
    assert report["control"]["greedy"]["shots"] == 1
    assert report["rehearsal"]["problems"] == 2 and 0 <= report["rehearsal"]["kept"] <= 2
    assert report["heldout"]["primary"] == "greedy"
    assert set(report["heldout"]["greedy"]["after_vs_before"]["sign_test"]) == {"improved", "worsened", "p_two_sided"}
