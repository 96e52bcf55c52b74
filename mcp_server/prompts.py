"""Prompts an IDE user can pick (hosts show them as slash commands): each starts an episode for a
kind of task and walks the agent through rlide's tools, so the work is recorded and rewarded."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field


def fix_failing_tests(
    test_command: Annotated[
        str, Field(max_length=1_000, description="The command that runs the tests, e.g. 'python -m pytest -q'.")
    ] = "python -m pytest -q",
    focus: Annotated[
        str, Field(max_length=2_000, description="What to fix, if not every failing test: a test, a module.")
    ] = "",
) -> str:
    """Fix the failing tests, as a recorded episode: the fix is verified by the tests that failed first."""
    target = f" ({focus})" if focus.strip() else ""
    return f"""Fix the failing tests of this project{target}, as a recorded rlide episode.

1. Call start_episode with a one-line task and test_command="{test_command}".
2. Call run_tests with that command to see what fails; the tests that fail now are the ones the fix
   must make pass (the others must keep passing).
3. Use search_code to find the code behind each failure (paste an error message or a traceback line
   as the query to find where it is raised), read it, and change the code, not the tests.
4. Call run_tests again after each change until every test passes.
5. Call end_episode with outcome "success" and a short summary of the fix, or "failure" with what
   blocked you. If I tell you how good the result is, record it with give_feedback."""


def start_task(
    task: Annotated[str, Field(min_length=1, max_length=20_000, description="What you want done.")],
) -> str:
    """Do a task as a recorded episode: start it, work with rlide's tools, end it with its outcome."""
    return f"""Do this task as a recorded rlide episode: {task}

1. Call start_episode with the task in one line.
2. Use search_code and recall_solutions to find the relevant code and how similar tasks were solved;
   check changes with run_code or run_tests.
3. Call end_episode with outcome "success" (and a summary) when it is done, "failure" if it cannot be
   done, or "aborted" if we stop. If I say how good the result is, record it with give_feedback."""


PROMPTS = (
    (fix_failing_tests, "fix-failing-tests", "Fix the failing tests"),
    (start_task, "start-task", "Do a task as a recorded episode"),
)
