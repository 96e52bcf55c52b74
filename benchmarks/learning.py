"""Does rlide make a real model better at a user's project? Held-out pass@1 before and after.

    python benchmarks/learning.py [--model qwen2.5-coder-0.5b-instruct] [--humaneval 24]

1. A git workspace holds *shipkit* (`benchmarks/shipkit_tasks.py`): a small code base whose house
   rules are written nowhere, and one file and test per task. A teacher solves each *train* task
   through rlide's own MCP server, as an IDE agent does: `start_episode` (naming the test
   command), `search_code`, `run_tests` on the untouched stub, the fix written to disk (the IDE's
   editor), `run_tests` again (the verified reward), `end_episode` with the function as its answer.
2. The student (a packaged offline model by default) is evaluated greedily, batched, on the
   held-out shipkit tasks and on HumanEval's held-out split, judged by the value verifier in the
   sandbox; and, on the held-out sets, from `--samples` drawn answers per problem at
   `--eval-temperature` (the unbiased pass@1 estimate: a problem whose greedy answer any update
   flips counts by its pass rate, not all or nothing).
3. It trains: SFT on the `sft` export of the teacher's episodes (`--sft-view answer` by default:
   the task and the episode's final answer; `trace` imitates every tool call and result, ten
   times the tokens, for a student that will act with tools), with the base model's own verified
   answers to `--rehearse` HumanEval train-split problems mixed in; one DPO step preferring the
   teacher's answer to the student's own failed one on the train tasks; GRPO on the train tasks
   with verified rewards (groups of sampled answers, each judged in the sandbox).
4. It is evaluated again. JSON goes to stdout (and --out), a PNG to --plot: pass@1 before/after
   with 95% intervals (Wilson for greedy, normal over problems for the sampled estimate), each
   change with a paired 95% interval over the problems, seconds per SFT/DPO/GRPO step, sampling
   tokens/s, peak memory, and the machine's load.

Runs in about 35 minutes on 2 cores with the 0.5B model (most of it the evaluations; peak RSS 13.6 GB
with 40 answers decoded together, ~8 GB with `--eval-batch 12`). Nothing
it trains on is evaluated: the held-out tasks are checked against the trained-task ledger before
the final evaluation. Figures and what each choice did: docs/training.md, "Learning on CPU".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
# Run as a script, this folder is sys.path[0], where benchmarks/envpool.py would shadow the envpool package.
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != HERE]
sys.path.insert(0, str(ROOT))
sys.path.append(str(HERE))

from shipkit_tasks import CORE, records  # noqa: E402
from student_eval import Evaluator, change, log, machine, rehearsal_records  # noqa: E402

PYTEST = "python -m pytest -q -p no:cacheprovider"


def make_workspace(root: Path, tasks: list[dict[str, Any]]) -> None:
    """shipkit as a git repository: the core, one stub module and one pytest file per task."""
    (root / "shipkit").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "shipkit" / "__init__.py").write_text('"""shipkit: parcel pricing."""\n')
    (root / "shipkit" / "core.py").write_text(CORE)
    for task in tasks:
        name = task["entry_point"]
        (root / "shipkit" / f"{name}.py").write_text(task["prompt"] + "    raise NotImplementedError\n")
        (root / "tests" / f"test_{name}.py").write_text(
            f"from shipkit.{name} import {name}\n\n{task['test']}\n\ndef test_{name}():\n    check({name})\n"
        )
    git = ["git", "-C", str(root), "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "shipkit"], check=True)


async def teacher_episodes(home: Path, workspace: Path, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """The teacher solves each task through rlide's MCP tools; returns what the log recorded."""
    from mcp import Client

    from mcp_server.server import build_server
    from mcp_server.settings import load_settings

    settings = load_settings(home=home, workspace=workspace)
    rewards = []
    async with Client(build_server(settings), mode="legacy") as client:
        for task in tasks:
            name = task["entry_point"]
            command = f"{PYTEST} tests/test_{name}.py"
            started = await client.call_tool("start_episode", {"task": task["prompt"], "test_command": command})
            episode_id = (started.structured_content or {})["episode_id"]
            await client.call_tool("search_code", {"query": f"shipkit {name.replace('_', ' ')} zone rate", "k": 1})
            await client.call_tool("run_tests", {"test_command": command})
            module = workspace / "shipkit" / f"{name}.py"
            stub = module.read_text()
            module.write_text(task["prompt"] + task["canonical_solution"])  # the IDE's own editor
            answered = await client.call_tool("run_tests", {"test_command": command})
            function = task["prompt"].removeprefix(CORE) + task["canonical_solution"]
            ended = await client.call_tool(
                "end_episode",
                {"outcome": "success", "summary": f"```python\n{function}```", "episode_id": episode_id},
            )
            module.write_text(stub)
            episode = (ended.structured_content or {}).get("episode") or {}
            rewards.append({"task": name, "run_tests": (answered.structured_content or {}).get("reward"), **episode})
    return {"database_url": settings.episode_db_url, "episodes": rewards}


def scenario_of(problem: dict[str, Any]) -> Any:
    from training.scenarios.base import HUMANEVAL_SYSTEM, Scenario, Verifier

    return Scenario(
        id=problem["task_id"],
        messages=({"role": "system", "content": HUMANEVAL_SYSTEM}, {"role": "user", "content": problem["prompt"]}),
        verifier=Verifier(
            "humaneval", {k: problem[k] for k in ("task_id", "prompt", "test", "entry_point", "canonical_solution")}
        ),
        split="train",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from envpool.sandbox import make_sandbox  # noqa: F401  # fail early without a sandbox
    from episodes.store import EpisodeStore
    from training.backends.base import BackendConfig, NoTrainableData
    from training.backends.cpu import CpuBackend
    from training.data.export import sft_records
    from training.data.ledger import trained_overlap
    from training.scenarios.base import humaneval_scenarios
    from training.scenarios.rollout import rollout_groups
    from training.scenarios.sandbox_runner import SandboxRunner

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    report: dict[str, Any] = {
        "model": args.model,
        "machine": machine(),
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "plot")},
    }
    shipkit = records()
    train_tasks = [t for t in shipkit if t["split"] == "train"]
    heldout_tasks = [t for t in shipkit if t["split"] == "heldout"]
    humaneval = [{**s.verifier.data, "task_id": s.id} for s in humaneval_scenarios("heldout")[: args.humaneval]]
    with tempfile.TemporaryDirectory(prefix="rlide-learning-") as tmp:
        home, workspace = Path(tmp) / "home", Path(tmp) / "shipkit"
        make_workspace(workspace, shipkit)
        started = time.perf_counter()
        teacher = asyncio.run(teacher_episodes(home, workspace, train_tasks))
        report["teacher"] = {
            "episodes": len(teacher["episodes"]),
            "seconds": time.perf_counter() - started,
            "run_tests_rewards": [e["run_tests"] for e in teacher["episodes"]],
            "episode_rewards": [e.get("reward_total") for e in teacher["episodes"]],
        }
        store = EpisodeStore.open(teacher["database_url"])
        sft = sft_records(store, view=args.sft_view)
        store.close()
        report["teacher"]["sft_records"] = len(sft)
        report["teacher"]["sft_chars_per_record"] = sum(len(json.dumps(r)) for r in sft) / max(1, len(sft))

        config = BackendConfig(
            path=Path(tmp) / "art",
            base_model=args.model,
            learning_rate=args.lr,
            dtype=args.dtype,
            lora_rank=args.lora_rank,
            kl_penalty_coef=args.kl_coef,
            seed=args.seed,
        )
        backend = CpuBackend(config)
        CpuBackend.check(config)
        started = time.perf_counter()
        backend.start()
        report["load_seconds"] = time.perf_counter() - started
        runner = SandboxRunner()
        evaluator = Evaluator(runner, args.max_tokens, args.eval_batch)

        def evaluate(when: str) -> None:
            """report[when]: greedy pass@1 on the three sets; with `--samples`, report[when_sampled]:
            the held-out sets' pass@1 estimated from that many drawn answers per problem."""
            sets = {"shipkit_heldout": heldout_tasks, "shipkit_train": train_tasks, "humaneval_heldout": humaneval}
            report[when] = {name: evaluator.pass_at_1(backend, problems) for name, problems in sets.items()}
            log(report[when])
            if args.samples:
                found = {
                    name: evaluator.pass_at_1(backend, sets[name], args.samples, args.eval_temperature)
                    for name in ("shipkit_heldout", "humaneval_heldout")
                }
                log({k: f"{v['pass_at_1']:.3f}" for k, v in found.items()})
                report[f"{when}_sampled"] = found

        try:
            evaluate("before")

            rehearsal, report["rehearsal"] = rehearsal_records(evaluator, backend, args.rehearse)
            log({"rehearsal": f"{report['rehearsal']['kept']}/{report['rehearsal']['problems']}"})
            data = sft + rehearsal
            steps: dict[str, list[dict[str, float]]] = {"sft": [], "dpo": [], "grpo": []}
            for epoch in range(args.sft_epochs):
                random.Random(args.seed + epoch).shuffle(data)
                for i in range(0, len(data), args.sft_batch):
                    result = backend.train_sft(data[i : i + args.sft_batch])
                    steps["sft"].append({"epoch": epoch, **result.metrics})
                    log({"sft": result.step, "loss": result.metrics["losses/sft_loss"]})

            # The student's own failed answers on train tasks, against the teacher's.
            failed_before = report["before"]["shipkit_train"]["answers"]
            pairs = [
                {
                    "prompt": scenario_of(t).messages,
                    "chosen": [
                        {
                            "role": "assistant",
                            "content": f"```python\n{t['prompt'].removeprefix(CORE)}{t['canonical_solution']}```",
                        }
                    ],
                    "rejected": [{"role": "assistant", "content": failed_before[t["task_id"]]}],
                }
                for t in train_tasks
                if t["task_id"] in report["before"]["shipkit_train"]["failed"]
            ][: args.dpo_pairs]
            if pairs:
                try:
                    result = backend.train_dpo([{**p, "prompt": list(p["prompt"])} for p in pairs])
                    steps["dpo"].append(result.metrics)
                    log({"dpo": result.step, "loss": result.metrics["losses/dpo_loss"]})
                except NoTrainableData as exc:
                    report["dpo_skipped"] = str(exc)

            scenarios = [scenario_of(t) for t in train_tasks]
            grpo_zero_variance = 0
            for step in range(args.grpo_steps):
                rollouts = rollout_groups(
                    backend,
                    scenarios,
                    run="learning",
                    step=backend.step,
                    groups=args.grpo_groups,
                    group_size=args.group_size,
                    max_tokens=args.max_tokens,
                    temperature=args.temperature,
                    seed=args.seed + step,
                    runner=runner,
                )
                groups = [g for g in rollouts.groups if g.reward_std > 0]
                grpo_zero_variance += len(rollouts.groups) - len(groups)
                rewards = [r for g in rollouts.groups for r in g.rewards]
                if not groups:
                    steps["grpo"].append(
                        {"skipped_zero_variance": 1.0, "reward_mean": sum(rewards) / max(1, len(rewards))}
                    )
                    continue
                result = backend.train(groups)
                steps["grpo"].append({**result.metrics, "reward_mean": sum(rewards) / len(rewards)})
                log({"grpo": result.step, "reward_mean": steps["grpo"][-1]["reward_mean"]})
            report["grpo_groups_zero_variance"] = grpo_zero_variance

            overlap = trained_overlap(
                config.model_dir(),
                [(t["task_id"], t["prompt"].removeprefix(CORE)) for t in [*heldout_tasks, *humaneval]],
            )
            if overlap:
                raise SystemExit(f"held-out tasks were trained on: {overlap}")
            evaluate("after")
        finally:
            runner.close()
            backend.close()
        report["steps"] = steps
        report["seconds_per_step"] = {
            k: (sum(s.get("perf/train_seconds", 0.0) for s in v) / len([s for s in v if "perf/train_seconds" in s]))
            if any("perf/train_seconds" in s for s in v)
            else None
            for k, v in steps.items()
        }
        report["sampling_tokens_per_second"] = (
            evaluator.generated_tokens / evaluator.generation_seconds if evaluator.generation_seconds else None
        )
        report["delta_points"] = {k: change(report["before"][k], report["after"][k]) for k in report["after"]}
        if args.samples:
            report["delta_points_sampled"] = {
                k: change(report["before_sampled"][k], report["after_sampled"][k]) for k in report["after_sampled"]
            }
        report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        report["machine"]["load_after"] = os.getloadavg()
    return report


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bars, losses) = plt.subplots(1, 2, figsize=(12, 4))
    columns = [(s, "") for s in report["after"]] + [(s, "_sampled") for s in report.get("after_sampled", {})]
    results = {when: [report[when + suffix][s] for s, suffix in columns] for when in ("before", "after")}
    for offset, when in ((-0.2, "before"), (0.2, "after")):
        values = [r["pass_at_1"] for r in results[when]]
        errors = [
            [max(0.0, v - r["ci95"][0]) for v, r in zip(values, results[when], strict=True)],
            [max(0.0, r["ci95"][1] - v) for v, r in zip(values, results[when], strict=True)],
        ]
        bars.bar([i + offset for i in range(len(columns))], values, width=0.4, yerr=errors, capsize=4, label=when)
    names = [
        s.replace("_", "\n") + (f"\n{r['samples']} at T={r['temperature']}" if r["samples"] > 1 else "\ngreedy")
        for (s, _), r in zip(columns, results["after"], strict=True)
    ]
    bars.set_xticks(range(len(columns)), names, fontsize=7)
    bars.set_ylabel("pass@1 (95% interval)")
    bars.set_title(report["model"])
    bars.legend()
    sft = [s["losses/sft_loss"] for s in report["steps"]["sft"]]
    losses.plot(range(1, len(sft) + 1), sft, marker="o")
    losses.set_xlabel("SFT step")
    losses.set_ylabel("SFT loss")
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--humaneval", type=int, default=33, help="held-out HumanEval problems evaluated (33: all)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument(
        "--kl-coef",
        type=float,
        default=0.0,
        help="KL pull towards the base model in SFT (whole vocabulary) and GRPO (0: none)",
    )
    parser.add_argument("--sft-view", choices=("answer", "trace"), default="answer")
    parser.add_argument("--sft-epochs", type=int, default=2)
    parser.add_argument(
        "--rehearse",
        type=int,
        default=24,
        help="HumanEval train problems whose own verified answers join SFT (0: none)",
    )
    parser.add_argument("--sft-batch", type=int, default=4)
    parser.add_argument("--dpo-pairs", type=int, default=4)
    parser.add_argument("--grpo-steps", type=int, default=4)
    parser.add_argument("--grpo-groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--eval-batch", type=int, default=40, help="answers decoded together")
    parser.add_argument(
        "--samples",
        type=int,
        default=4,
        help="also estimate held-out pass@1 from this many drawn answers per problem (0: greedy only)",
    )
    parser.add_argument("--eval-temperature", type=float, default=0.2, help="temperature of those answers")
    parser.add_argument("--seed", type=int, default=0)
    bugs = parser.add_argument_group("bug instances (docs/bug-tasks.md): the mode used when --train is given")
    bugs.add_argument("--train", type=Path, action="append", help="a JSONL file of bug instances to train on")
    bugs.add_argument("--heldout", type=Path, action="append", help="a JSONL file of bug instances to evaluate")
    bugs.add_argument("--seeds", default="0,1", help="training seeds, comma-separated (a fresh adapter each)")
    bugs.add_argument("--shots", type=int, default=2, help="oracle demonstrations in the prompt-only control")
    bugs.add_argument("--he-samples", type=int, default=2, help="drawn answers per HumanEval problem")
    bugs.add_argument(
        "--grpo-redraws", type=int, default=2, help="replays drawn per step in place of groups without variance"
    )
    bugs.add_argument(
        "--judge-timeout", type=float, default=60.0, help="seconds an answer's test run may take (a loop: a fail)"
    )
    bugs.add_argument("--max-seq-len", type=int, default=4096, help="the student's trained context")
    parser.add_argument(
        "--out", type=Path, help="the JSON report (default: benchmarks/results/learning.json, learning-bugs.json)"
    )
    parser.add_argument("--plot", type=Path, default=ROOT / "benchmarks" / "results" / "learning.png")
    args = parser.parse_args()
    if args.train or args.heldout:
        if not (args.train and args.heldout):
            parser.error("bug instances need both --train FILE and --heldout FILE")
        import bug_learning

        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        report = bug_learning.run(args)
        args.out = args.out or RESULTS / "learning-bugs.json"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
        print(json.dumps({k: report[k] for k in ("model", "teacher", "instances", "heldout", "seconds")}, indent=2))
        return
    report = run(args)
    args.out = args.out or RESULTS / "learning.json"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    plot(report, args.plot)
    evaluations = [w for w in ("before", "after", "before_sampled", "after_sampled") if w in report]
    summary = {k: v for k, v in report.items() if k not in ("steps", *evaluations)}
    summary["pass_at_1"] = {
        when: {
            s: {k: r[k] for k in ("pass_at_1", "ci95", "n", "samples", "temperature")} for s, r in report[when].items()
        }
        for when in evaluations
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
