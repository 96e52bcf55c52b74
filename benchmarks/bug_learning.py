"""Does rlide make a model better at fixing bugs in real libraries? Held-out fix rate before and after.

    python benchmarks/learning.py --train benchmarks/bugs/more-itertools-train.jsonl \\
        --heldout benchmarks/bugs/more-itertools-heldout.jsonl --heldout benchmarks/bugs/cachetools-heldout.jsonl

The bug-instance mode of `benchmarks/learning.py` (docs/bug-tasks.md has the instance format):

1. **Episodes through MCP, from an oracle.** Each train instance becomes a git workspace (its
   `base_commit`, `test_patch` committed as the tests a user has, `bug_patch` left uncommitted,
   where an IDE user's bug usually is). A teacher that is an *oracle* (it replays the instance's
   gold `patch`; it does not solve anything) works it through rlide's own MCP server, as an IDE
   agent would: `start_episode` with the instance's prompt and test command, `run_tests` (the
   failure), the fix written to disk (the IDE's editor), `run_tests` (the verified reward),
   `end_episode` with the fix as search/replace blocks. rlide's project verifier judges each
   episode from the project's tests, not from the teacher's word.
2. **Before.** The student (a packaged offline model) answers each held-out instance, greedily
   and from `--samples` drawn answers at `--eval-temperature`; the instance's own tests judge each
   answer in the sandbox (`rlide eval --tasks`'s posing and scoring). The **prompt-only control**
   is the same untrained model with `--shots` of the oracle's train demonstrations (prompt and fix)
   written into its prompt: what the same data achieves as context instead of training. HumanEval's
   held-out split (`--humaneval` problems, sampled) estimates general ability.
3. **Training**, per seed of `--seeds`, from a fresh adapter: SFT on the episodes (`answer` view:
   the task and the oracle's fix; labelled oracle data) with `--rehearse` of the base model's own
   verified answers to HumanEval train problems mixed in, evaluated; then GRPO on the *replays* of
   the recorded episodes (`scenarios_from_log`: the student re-solves each episode's task from its
   exact start state, judged by the episode's verifier; the student's own verified attempts are
   the RL data), evaluated again. So the report says what SFT and GRPO each contributed.
4. JSON on stdout (and `--out`): `heldout.before`, `heldout.control`, `heldout.after` (mean over
   seeds) and per seed `after_sft` / `after`; each with the fix rate, 95% intervals, per-instance
   rates, and against `before` an exact paired sign test over instances (two-sided); HumanEval
   before/after; the teacher's episodes and rewards; GRPO's rewards and groups without variance.

Nothing trained on is evaluated: held-out instance ids must not appear in train, and the trained-
task ledger is checked before each evaluation after training.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import resource
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from student_eval import Evaluator, change, log, machine, mean_interval, pass_rates, rehearsal_records

GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}
TEACHER = (
    "oracle: the instance's gold patch, applied through rlide's MCP tools (start_episode, run_tests,"
    " the IDE's editor, run_tests, end_episode); it knows the answer and solves nothing"
)


@dataclass(frozen=True)
class Task:
    """A bug instance posed (its start state's failure run and prompt), with the oracle's answer."""

    bug: Any  # BugTask
    posed: Any  # Posed
    oracle: str
    """The gold patch as search/replace blocks (a ```diff block where those would not apply)."""

    @property
    def id(self) -> str:
        return str(self.bug.id)


def read_bugs(paths: list[Path]) -> list[Any]:
    """The bug instances of `paths` (BugTask), in file order. SystemExit with the reason on a file
    that is not a bug-instance file."""
    from training.scenarios.bug_tasks.attempt import BugTask
    from training.scenarios.task_file import TaskFileError, read_task_file

    out = []
    for path in paths:
        try:
            file = read_task_file(path)
        except TaskFileError as exc:
            raise SystemExit(f"{exc}") from exc
        if file.tasks:
            raise SystemExit(f"{path} holds HumanEval tasks: --train and --heldout take bug instances (instance_id)")
        out += [BugTask(instance, path.parent) for _, instance in file.instances]
    return out


def search_replace_blocks(patch: str, start: dict[str, str]) -> str:
    """`patch` (a unified diff from `start`) as search/replace blocks, one per hunk: the form the
    student is asked to answer in. Each block keeps only as much of its hunk's context as makes its
    search text unique in the file: the demonstration is the change, not three lines either side
    copied out (a 0.5B model imitates the length too, and every token copied is one that can go
    wrong and one more to decode). Falls back to the diff itself in a ```diff block when the blocks
    would not apply as the diff does."""
    from envpool.verifiers.patches import apply_patch
    from training.scenarios.edits import EditError, apply_answer

    blocks: list[str] = []
    path = ""
    lines = patch.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("+++ "):
            path = line[4:].strip().removeprefix("b/")
        elif line.startswith("@@"):
            old: list[str] = []
            new: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].startswith(("@@", "diff ", "--- ")):
                body = lines[i]
                if body.startswith((" ", "-")) or body == "":
                    old.append(body[1:])
                if body.startswith((" ", "+")) or body == "":
                    new.append(body[1:])
                i += 1
            old, new = _least_context(start.get(path, ""), old, new)
            blocks.append(
                f"{path}\n<<<<<<< SEARCH\n" + "".join(f"{x}\n" for x in old) + "=======\n"
                + "".join(f"{x}\n" for x in new) + ">>>>>>> REPLACE"
            )  # fmt: skip
            continue
        i += 1
    answer = "\n".join(blocks)
    try:
        if blocks and apply_answer(start, answer, {}) == apply_patch(start, patch).files:
            return answer
    except EditError:
        pass
    return f"```diff\n{patch}```"


def _least_context(text: str, old: list[str], new: list[str]) -> tuple[list[str], list[str]]:
    """A hunk's lines without the context lines (equal on both sides, at either end) that its
    search text does not need to stay unique in `text`."""
    from training.scenarios.edits import find_lines

    def unique(lines: list[str]) -> bool:
        return any(x.strip() for x in lines) and find_lines(text, "".join(f"{x}\n" for x in lines)) is not None

    while len(old) > 1 and len(new) > 1 and old[0] == new[0] and unique(old[1:]):
        old, new = old[1:], new[1:]
    while len(old) > 1 and len(new) > 1 and old[-1] == new[-1] and unique(old[:-1]):
        old, new = old[:-1], new[:-1]
    return old, new


def pose_all(bugs: list[Any], runs: Any, timeout_s: float) -> tuple[list[Task], dict[str, str]]:
    """Each instance posed (its FAIL_TO_PASS run on the start state), and those that cannot be judged
    with why (an instance's fault, never counted against the model). An answer's judged run may take
    `timeout_s` (`attempt.pose`)."""
    from training.scenarios.bug_tasks.attempt import pose
    from training.scenarios.errors import VerifierUnavailable

    tasks, unverifiable = [], {}
    for bug in bugs:
        try:
            posed = pose(bug, runs, timeout_s)
        except VerifierUnavailable as exc:
            unverifiable[bug.id] = str(exc)
            continue
        tasks.append(Task(bug, posed, search_replace_blocks(bug.instance.patch, posed.prepared.start)))
    return tasks, unverifiable


# -- the teacher's episodes, through the MCP server ---------------------------------------------------


def git(root: Path, *args: str, stdin: str | None = None) -> None:
    subprocess.run(
        ["git", "-C", str(root), *args], input=stdin, env={**os.environ, **GIT_ENV}, text=True,
        capture_output=True, check=True,
    )  # fmt: skip


def workspace(task: Task, dest: Path) -> Path:
    """The instance as an IDE user's checkout: `base_commit` (and `test_patch`, committed) with the
    bug uncommitted, and a `.venv` that imports the package (a src layout through a .pth)."""
    instance = task.bug.instance
    dest.mkdir(parents=True)
    with tarfile.open(instance.archive_path(task.bug.folder)) as tar:
        tar.extractall(dest, filter="data")
    git(dest, "reset", "-q", "--hard", instance.base_commit)
    (dest / ".git" / "info").mkdir(exist_ok=True)
    (dest / ".git" / "info" / "exclude").write_text(".venv/\n")
    if instance.test_patch.strip():
        git(dest, "apply", "-", stdin=instance.test_patch)
        git(dest, "add", "-A")
        git(dest, "commit", "-q", "-m", "the tests of the task")
    if instance.bug_patch.strip():
        git(dest, "apply", "-", stdin=instance.bug_patch)
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(dest / ".venv")], check=True)
    for root in task.posed.prepared.import_roots:
        [site] = (dest / ".venv" / "lib").glob("python3.*/site-packages")
        (site / "__editable__.bug_task.pth").write_text(f"{dest / root}\n")
    return dest


def test_command(task: Task) -> str:
    instance = task.bug.instance
    if instance.test_command:
        return str(instance.test_command)
    return "python -m pytest -q -p no:cacheprovider " + " ".join(instance.test_files())


async def teacher_episodes(home: Path, root: Path, tasks: list[Task]) -> list[dict[str, Any]]:
    """The oracle works each task through the MCP server serving its workspace; what the log recorded."""
    from mcp import Client

    from mcp_server.server import build_server
    from mcp_server.settings import load_settings

    out = []
    for number, task in enumerate(tasks):
        folder = workspace(task, root / f"w{number}")
        # The oracle searches nothing: no index to build for it.
        settings = load_settings(home=home, workspace=folder, pool_envs=2, index_on_start=False)
        command = test_command(task)
        async with Client(build_server(settings), mode="legacy") as client:
            started = await client.call_tool("start_episode", {"task": task.posed.shown.text, "test_command": command})
            episode_id = (started.structured_content or {})["episode_id"]
            before = await client.call_tool("run_tests", {"test_command": command})
            git(folder, "apply", "-", stdin=task.bug.instance.patch)  # the IDE's editor
            after = await client.call_tool("run_tests", {"test_command": command})
            ended = await client.call_tool(
                "end_episode", {"outcome": "success", "summary": task.oracle, "episode_id": episode_id}
            )
        episode = (ended.structured_content or {}).get("episode") or {}
        verification = (ended.structured_content or {}).get("verification") or {}
        out.append(
            {
                "instance_id": task.id,
                "episode_id": episode_id,
                "run_tests_before": (before.structured_content or {}).get("reward"),
                "run_tests_after": (after.structured_content or {}).get("reward"),
                "reward_total": episode.get("reward_total"),
                "verdict": verification.get("line"),
            }
        )
        log({"teacher": task.id, "reward": episode.get("reward_total"), "verdict": verification.get("line")})
    return out


# -- evaluation -----------------------------------------------------------------------------------------


def sign_test(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Exact two-sided sign test over instances: of those whose rate moved, how many went up; the
    chance of a split at least that lopsided if training changed nothing."""
    up = sum(1 for k in before if after[k] > before[k])
    down = sum(1 for k in before if after[k] < before[k])
    n = up + down
    tail = sum(math.comb(n, i) for i in range(min(up, down) + 1)) / 2**n if n else 1.0
    return {"improved": up, "worsened": down, "p_two_sided": min(1.0, 2 * tail)}


class BugEvaluator:
    """Answers to posed instances, decoded together, judged by each instance's tests."""

    def __init__(self, evaluator: Evaluator, runs: Any, demos: list[Task]) -> None:
        self.evaluator = evaluator
        self.runs = runs
        self.demos = demos

    def messages(self, task: Task, shots: int) -> list[dict[str, str]]:
        """The instance's prompt, after `shots` oracle demonstrations (prompt, fix) when a control."""
        out: list[dict[str, str]] = []
        for demo in self.demos[:shots]:
            out += [*demo.posed.messages, {"role": "assistant", "content": demo.oracle}]
        return [*out, *task.posed.messages]

    def fix_rate(
        self, backend: Any, tasks: list[Task], *, samples: int = 1, temperature: float = 0.0, shots: int = 0
    ) -> dict[str, Any]:
        from training.scenarios.bug_tasks.attempt import score

        problems = [{"task_id": t.id, "messages": self.messages(t, shots)} for t in tasks]
        answers = self.evaluator.answers(backend, problems, samples, temperature)
        resolved: dict[str, int] = {}
        details: dict[str, str] = {}
        for task, drawn in zip(tasks, answers, strict=True):
            scored = [score(task.posed, answer, self.runs) for answer in drawn]
            resolved[task.id] = sum(s.resolved for s in scored)
            details[task.id] = next((s.detail for s in scored if not s.resolved), "")
        return {
            **pass_rates(resolved, samples, temperature),
            "shots": shots,
            "detail": details,
            "answers": {t.id: drawn[0] for t, drawn in zip(tasks, answers, strict=True)},
        }


def against(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {**change(before, after), "sign_test": sign_test(before["rates"], after["rates"])}


# -- the run --------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from episodes.store import EpisodeStore
    from training.backends.base import BackendConfig
    from training.backends.cpu import CpuBackend
    from training.data.export import sft_records
    from training.data.fit import FitError, student_fit
    from training.scenarios.base import humaneval_scenarios, scenarios_from_log
    from training.scenarios.bug_tasks.judge import SandboxRuns
    from training.scenarios.sandbox_runner import SandboxRunner

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    train_bugs, heldout_bugs = read_bugs(args.train), read_bugs(args.heldout)
    shared = {b.id for b in train_bugs} & {b.id for b in heldout_bugs}
    if shared:
        raise SystemExit(f"instances in both --train and --heldout: {sorted(shared)[:5]}")
    if not train_bugs or not heldout_bugs:
        raise SystemExit("--train and --heldout each need at least one bug instance")
    report: dict[str, Any] = {
        "mode": "bug instances",
        "model": args.model,
        "teacher": {"kind": "oracle", "what": TEACHER},
        "machine": machine(),
        "config": {k: str(v) if isinstance(v, (Path, list)) else v for k, v in vars(args).items() if k != "out"},
    }
    started_all = time.perf_counter()
    runs = SandboxRuns()
    runner = SandboxRunner()
    try:
        train, unverifiable = pose_all(train_bugs, runs, args.judge_timeout)
        heldout, unverifiable_heldout = pose_all(heldout_bugs, runs, args.judge_timeout)
        report["instances"] = {
            "train": [t.id for t in train],
            "heldout": [t.id for t in heldout],
            "unverifiable": {**unverifiable, **unverifiable_heldout},
        }
        log(
            {
                "posed": {
                    "train": len(train),
                    "heldout": len(heldout),
                    "unverifiable": len(report["instances"]["unverifiable"]),
                }
            }
        )
        if not train or not heldout:
            raise SystemExit(f"no verifiable instances left to train or evaluate on: {report['instances']}")
        with tempfile.TemporaryDirectory(prefix="rlide-bug-learning-") as tmp:
            home = Path(tmp) / "home"
            started = time.perf_counter()
            episodes = asyncio.run(teacher_episodes(home, Path(tmp) / "workspaces", train))
            report["teacher"]["episodes"] = episodes
            report["teacher"]["seconds"] = time.perf_counter() - started
            from mcp_server.settings import load_settings

            store = EpisodeStore.open(load_settings(home=home, workspace=Path(tmp)).episode_db_url)
            try:
                fit = student_fit(args.model, args.max_seq_len)
            except FitError:
                fit = None
            sft = sft_records(store, view="answer", fit=fit)
            replays = scenarios_from_log(store)
            store.close()
            report["teacher"]["sft_records"] = len(sft)
            report["teacher"]["sft_example"] = sft[0] if sft else None
            report["teacher"]["replay_scenarios"] = len(replays)
            log({"sft_records": len(sft), "replay_scenarios": len(replays)})

            evaluator = Evaluator(runner, args.max_tokens, args.eval_batch)
            bugs = BugEvaluator(evaluator, runs, train)
            humaneval = [{**s.verifier.data, "task_id": s.id} for s in humaneval_scenarios("heldout")[: args.humaneval]]

            def evaluate(backend: Any, *, shots: int = 0, general: bool = True) -> dict[str, Any]:
                out = {"greedy": bugs.fix_rate(backend, heldout, shots=shots)}
                if args.samples:
                    out["sampled"] = bugs.fix_rate(
                        backend, heldout, samples=args.samples, temperature=args.eval_temperature, shots=shots
                    )
                if general and humaneval:
                    out["humaneval"] = evaluator.pass_at_1(backend, humaneval, args.he_samples, args.eval_temperature)
                log({k: f"{v['passed']}/{v['n'] * v['samples']}" for k, v in out.items()})
                return out

            def backend_for(seed: int) -> Any:
                config = BackendConfig(
                    path=Path(tmp) / f"art-{seed}",
                    base_model=args.model,
                    learning_rate=args.lr,
                    dtype=args.dtype,
                    lora_rank=args.lora_rank,
                    seed=seed,
                    max_seq_len=args.max_seq_len,
                )
                CpuBackend.check(config)
                backend = CpuBackend(config)
                backend.start()
                return backend

            base = backend_for(args.seeds[0])
            try:
                report["before"] = evaluate(base)
                report["control"] = evaluate(base, shots=args.shots, general=False)
                report["train_before"] = bugs.fix_rate(base, train)
                rehearsal, report["rehearsal"] = rehearsal_records(evaluator, base, args.rehearse)
                log({"rehearsal": f"{report['rehearsal']['kept']}/{report['rehearsal']['problems']}"})
            finally:
                base.close()
            report["seeds"] = {}
            for seed in args.seeds:
                report["seeds"][str(seed)] = train_one(
                    args, seed, backend_for(seed), sft + rehearsal, replays, runner, evaluate, heldout, humaneval
                )
    finally:
        runner.close()
        runs.close()
    report["heldout"] = summary(report, args)
    report["seconds"] = time.perf_counter() - started_all
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report["machine"]["load_after"] = os.getloadavg()
    return report


def train_one(
    args: argparse.Namespace,
    seed: int,
    backend: Any,
    sft: list[dict[str, Any]],
    replays: list[Any],
    runner: Any,
    evaluate: Any,
    heldout: list[Task],
    humaneval: list[dict[str, Any]],
) -> dict[str, Any]:
    """SFT on the oracle's episodes (and the rehearsal records, `sft`), evaluated; GRPO on their
    replays, evaluated: one seed."""
    from training.data.ledger import trained_overlap
    from training.scenarios.rollout import RewardRecord, rollout_groups

    out: dict[str, Any] = {"sft": [], "grpo": []}
    started = time.perf_counter()

    def check_ledger() -> None:
        overlap = trained_overlap(
            backend.config.model_dir(),
            [(t.id, t.bug.instance.problem_statement) for t in heldout]
            + [(p["task_id"], p["prompt"]) for p in humaneval],
        )
        if overlap:
            raise SystemExit(f"held-out tasks were trained on: {overlap}")

    try:
        data = list(sft)
        for epoch in range(args.sft_epochs):
            random.Random(seed * 1_000 + epoch).shuffle(data)
            for i in range(0, len(data), args.sft_batch):
                result = backend.train_sft(data[i : i + args.sft_batch])
                out["sft"].append({"epoch": epoch, **result.metrics})
                log({"seed": seed, "sft": result.step, "loss": result.metrics["losses/sft_loss"]})
        if args.sft_epochs and args.grpo_steps:
            check_ledger()
            out["after_sft"] = evaluate(backend, general=False)
        zero_variance = 0
        record = RewardRecord()  # dynamic sampling: replays whose recent groups were flat wait their turn
        for step in range(args.grpo_steps):
            rollouts = rollout_groups(
                backend,
                replays,
                run=f"bugs-{seed}",
                step=step,
                groups=args.grpo_groups,
                group_size=args.group_size,
                max_tokens=args.max_tokens,
                temperature=args.temperature,
                seed=seed,
                runner=runner,
                workspace_runner=runner,
                record=record,
                redraws=args.grpo_redraws,
            )
            groups = [g for g in rollouts.groups if g.reward_std > 0]
            zero_variance += len(rollouts.groups) - len(groups)
            rewards = [r for g in rollouts.groups for r in g.rewards]
            entry: dict[str, Any] = {
                "reward_mean": sum(rewards) / max(1, len(rewards)),
                "groups": len(rollouts.groups),
                "with_variance": len(groups),
                "redrawn": rollouts.redrawn,
                "scenarios": [g.metadata.get("scenario") for g in rollouts.groups],
                "rewards": [g.rewards for g in rollouts.groups],
                "unavailable": rollouts.unavailable,
            }
            if groups:
                entry.update(backend.train(groups).metrics)
            out["grpo"].append(entry)
            log({"seed": seed, "grpo": step, "reward_mean": entry["reward_mean"], "with_variance": len(groups)})
        out["grpo_groups_zero_variance"] = zero_variance
        check_ledger()
        out["after"] = evaluate(backend)
    finally:
        backend.close()
    out["seconds"] = time.perf_counter() - started
    return out


def summary(report: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """`heldout.before`, `.control`, `.after` (mean over seeds), each change with its paired tests."""
    before = report["before"]
    seeds = list(report["seeds"].values())
    out: dict[str, Any] = {}
    for kind in [k for k in ("greedy", "sampled") if k in before]:
        afters = [s["after"][kind] for s in seeds]
        mean_rates = {k: sum(a["rates"][k] for a in afters) / len(afters) for k in before[kind]["rates"]}
        after = {
            "pass_at_1": sum(a["pass_at_1"] for a in afters) / len(afters),
            "per_seed": [a["pass_at_1"] for a in afters],
            "rates": mean_rates,
        }
        after["ci95_over_seeds"] = list(mean_interval(after["per_seed"]))
        out[kind] = {
            "before": before[kind]["pass_at_1"],
            "before_ci95": before[kind]["ci95"],
            "control": report["control"][kind]["pass_at_1"],
            "control_ci95": report["control"][kind]["ci95"],
            "after": after["pass_at_1"],
            "after_per_seed": after["per_seed"],
            "after_ci95_over_seeds": after["ci95_over_seeds"],
            "after_vs_before": against(before[kind], after),
            "after_vs_control": against(report["control"][kind], after),
            "control_vs_before": against(before[kind], report["control"][kind]),
            "per_seed_vs_before": [against(before[kind], a) for a in afters],
            "after_sft_per_seed": [s["after_sft"][kind]["pass_at_1"] for s in seeds if "after_sft" in s],
        }
    primary = "sampled" if "sampled" in out else "greedy"
    out["before"] = out[primary]["before"]
    out["control"] = out[primary]["control"]
    out["after"] = out[primary]["after"]
    out["primary"] = primary
    if "humaneval" in before:
        afters = [s["after"]["humaneval"] for s in seeds]
        out["humaneval"] = {
            "before": before["humaneval"]["pass_at_1"],
            "after_per_seed": [a["pass_at_1"] for a in afters],
            "change_per_seed": [change(before["humaneval"], a) for a in afters],
        }
    return out
