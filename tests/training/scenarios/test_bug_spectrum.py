"""Spectrum-based fault localisation for bug prompts (`training/scenarios/bug_tasks/spectrum.py`):
the functions the failing tests run and the passing ones do not are shown first. Run on a real
library's bug instances (cachetools, shipped in benchmarks/bugs) in the real sandbox, where a
traceback's first project frame is a decorator's wrapper or the method that surfaced the wrong
value, not the mutated one."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from training.scenarios.bug_tasks.attempt import pose
from training.scenarios.bug_tasks.judge import SandboxRuns, failure_run, prepare
from training.scenarios.bug_tasks.prompt import involved
from training.scenarios.bug_tasks.spectrum import MARK, MAX_PASSING, passing_sample, read_spectrum, spectrum_run
from training.scenarios.eval import select_tasks

BUGS = Path(__file__).resolve().parents[3] / "benchmarks" / "bugs" / "cachetools-heldout.jsonl"


def _printed(outcomes: dict[str, str], calls: dict[str, list[tuple[str, int]]]) -> str:
    return "collected 3 items\n" + MARK + json.dumps({"outcomes": outcomes, "calls": calls}) + "\n"


def test_each_function_is_scored_by_the_failing_and_passing_tests_that_ran_it() -> None:
    printed = _printed(
        {"t::fails": "failed", "t::also_fails": "failed", "t::passes": "passed", "t::named_but_passed": "passed"},
        {
            "t::fails": [("m.py", 1), ("m.py", 10)],
            "t::also_fails": [("m.py", 1)],
            "t::passes": [("m.py", 10), ("m.py", 20)],
            "t::named_but_passed": [("m.py", 30)],  # FAIL_TO_PASS names it, it passed: neither side
        },
    )
    spectrum = read_spectrum(printed, {"t::fails", "t::also_fails", "t::named_but_passed"})
    assert spectrum is not None and spectrum.total_failed == 2
    assert spectrum.score("m.py", 1) == 1.0  # every failing test, no passing one
    assert spectrum.score("m.py", 10) == pytest.approx(1 / (2 * 2) ** 0.5)
    assert spectrum.score("m.py", 20) == spectrum.score("m.py", 30) == spectrum.score("other.py", 1) == 0.0
    for garbage in ("no mark at all", MARK + "{not json", MARK + json.dumps({"outcomes": {}, "calls": {"t": [[1]]}})):
        assert read_spectrum(garbage, {"t"}) is None


def test_the_passing_sample_takes_the_failing_tests_files_first() -> None:
    far = [f"tests/test_b.py::test_{i}" for i in range(MAX_PASSING)]
    near = ["tests/test_a.py::test_x", "tests/test_a.py::test_y"]
    sample = passing_sample(["tests/test_a.py::test_fails"], [*far, *near])
    assert sample[:2] == near and len(sample) == MAX_PASSING


@pytest.fixture(scope="module")
def runs() -> Any:
    runs = SandboxRuns()
    yield runs
    runs.close()


def _mutated_at(instance: Any, shown: list[Any]) -> int | None:
    """Where the function the gold patch changes sits among the functions `shown`."""
    path = re.search(r"^--- a/(\S+)", instance.patch, re.M).group(1)  # type: ignore[union-attr]
    line = int(re.search(r"^@@ -(\d+)", instance.patch, re.M).group(1)) + 3  # type: ignore[union-attr]
    hits = [i for i, d in enumerate(shown) if d.path == path and d.node.lineno <= line <= (d.node.end_lineno or 0)]
    return hits[0] if hits else None


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")
def test_on_a_real_library_the_mutated_function_is_shown_first_more_often(runs: Any) -> None:
    tasks = select_tasks(str(BUGS)).bugs
    by_traceback, by_spectrum, mutated = [], [], []
    for task in tasks:
        prepared = prepare(task.instance, task.folder)
        _, output = failure_run(prepared, runs)
        spectrum = spectrum_run(prepared, runs)
        assert spectrum is not None and spectrum.total_failed >= 1, task.id
        by_traceback.append(_mutated_at(task.instance, involved(prepared, output)))
        ranked = involved(prepared, output, spectrum)
        by_spectrum.append(_mutated_at(task.instance, ranked))
        mutated.append(ranked[0].qualname if by_spectrum[-1] == 0 else None)
    first = (by_traceback.count(0), by_spectrum.count(0))
    shown = (sum(at is not None for at in by_traceback), sum(at is not None for at in by_spectrum))
    assert first[1] > first[0] and shown[1] >= shown[0], (by_traceback, by_spectrum)
    # What the model is given is that order: the prompt of an instance the spectrum puts first.
    at = by_spectrum.index(0)
    first_shown = re.search(r"^\S+\.py, (\S+):$", pose(tasks[at], runs).shown.text, re.M)
    assert first_shown is not None and first_shown.group(1) == mutated[at]
