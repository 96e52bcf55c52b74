"""run_tests cuts a long pytest report so that what an agent acts on survives: the short summary with
every failing test's id, and the start and end (the assertion) of each failure section, before the
progress lines of a large suite."""

from __future__ import annotations

from mcp_server.tools.execute import fit_test_output


def report(failures: int, progress_lines: int) -> str:
    progress = "".join(f"tests/test_{i}.py {'.' * 60} [{i}%]\n" for i in range(progress_lines))
    sections = "".join(
        f"{'_' * 20} test_case_{i} {'_' * 20}\n\n    def test_case_{i}():\n" + "        x = compute()\n" * 40
        + f">       assert x == {i}\nE       assert 0 == {i}\n\ntests/test_{i}.py:42: AssertionError\n"
        for i in range(failures)
    )  # fmt: skip
    summary = "".join(f"FAILED tests/test_{i}.py::test_case_{i} - assert 0 == {i}\n" for i in range(failures))
    return (
        progress
        + "=" * 20 + " FAILURES " + "=" * 20 + "\n" + sections
        + "=" * 20 + " short test summary info " + "=" * 20 + "\n" + summary
        + f"{failures} failed, 700 passed in 35.1s\n"
    )  # fmt: skip


def test_a_long_report_keeps_every_failing_id_and_each_failures_assertion() -> None:
    text = report(failures=8, progress_lines=2000)
    cut, was_cut = fit_test_output(text, 8_000)
    assert was_cut and len(cut) <= 8_000 + 200
    for i in range(8):
        assert f"FAILED tests/test_{i}.py::test_case_{i}" in cut  # the summary whole
        assert f"E       assert 0 == {i}" in cut  # each section's end, where the assertion is
        assert f"test_case_{i} ___" in cut  # and its head
    assert "8 failed, 700 passed" in cut


def test_more_failures_than_fit_keep_the_summary_and_say_what_was_left_out() -> None:
    text = report(failures=60, progress_lines=10)
    cut, was_cut = fit_test_output(text, 6_000)
    assert was_cut and "more failure sections omitted" in cut
    assert "FAILED tests/test_59.py::test_case_59" in cut and "60 failed" in cut


def test_output_without_failure_sections_keeps_its_head_and_tail() -> None:
    text = "".join(f"line {i}\n" for i in range(5000))
    cut, was_cut = fit_test_output(text, 1_000)
    assert was_cut and cut.startswith("line 0\n") and cut.rstrip().endswith("line 4999")
    assert fit_test_output("short\n", 1_000) == ("short\n", False)
