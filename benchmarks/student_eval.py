"""How a student's answers are drawn and scored in the learning benchmarks (`learning.py`,
`bug_learning.py`): batched sampling, pass rates with their intervals, paired changes, progress."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import sys
import time
from typing import Any


def wilson(passed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 0.0)
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def messages_of(problem: dict[str, Any]) -> list[dict[str, Any]]:
    """A problem's prompt: its `messages`, or HumanEval's system prompt and its `prompt`."""
    from training.scenarios.base import HUMANEVAL_SYSTEM

    return problem.get("messages") or [
        {"role": "system", "content": HUMANEVAL_SYSTEM},
        {"role": "user", "content": problem["prompt"]},
    ]


def prompts_of(tokenizer: Any, problems: list[dict[str, Any]]) -> list[list[int]]:
    """Each problem's prompt ids (`messages_of`)."""
    from training.backends.cpu import prompt_token_ids

    return [prompt_token_ids(tokenizer, messages_of(p)) for p in problems]


def mean_interval(values: list[float], z: float = 1.96) -> tuple[float, float]:
    """Normal-approximation 95% interval of the mean of `values` (one per problem)."""
    if len(values) < 2:
        return (min(values, default=0.0), max(values, default=0.0))
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = z * sd / math.sqrt(len(values))
    return (mean - half, mean + half)


class Evaluator:
    def __init__(self, runner: Any, max_tokens: int, batch: int) -> None:
        self.runner = runner
        self.max_tokens = max_tokens
        self.batch = batch
        self.generated_tokens = 0
        self.generation_seconds = 0.0

    def answers(
        self, backend: Any, problems: list[dict[str, Any]], samples: int = 1, temperature: float = 0.0, seed: int = 0
    ) -> list[list[str]]:
        """`samples` answers to each problem; a batch holds `self.batch` answers being decoded."""
        from training.backends.cpu import generate_batch

        prompts = prompts_of(backend.tokenizer, problems)
        per_batch = max(1, self.batch // samples)
        texts: list[list[str]] = []
        for i in range(0, len(prompts), per_batch):
            started = time.perf_counter()
            ids = generate_batch(
                backend.model,
                backend.tokenizer,
                prompts[i : i + per_batch],
                max_tokens=self.max_tokens,
                temperature=temperature,
                seed=seed + i,
                n=samples,
            )
            self.generation_seconds += time.perf_counter() - started
            self.generated_tokens += sum(len(x) for x in ids)
            decoded = [backend.tokenizer.decode(x, skip_special_tokens=True) for x in ids]
            texts += [decoded[j : j + samples] for j in range(0, len(decoded), samples)]
        return texts

    def pass_at_1(
        self, backend: Any, problems: list[dict[str, Any]], samples: int = 1, temperature: float = 0.0
    ) -> dict[str, Any]:
        """Greedy pass@1 (`samples` 1, temperature 0) with its Wilson interval, or the unbiased
        estimate from `samples` drawn answers per problem (the mean of each problem's pass rate)
        with a normal interval over problems. A problem on a knife edge, whose greedy answer any
        update flips, counts there by its rate instead of all or nothing."""
        from training.scenarios.base import VerifierUnavailable, humaneval_verdict

        answers = self.answers(backend, problems, samples, temperature)
        passed: dict[str, int] = {}
        for problem, drawn in zip(problems, answers, strict=True):
            passed[problem["task_id"]] = 0
            for answer in drawn:
                with contextlib.suppress(VerifierUnavailable):  # the sandbox could not judge it: a fail
                    passed[problem["task_id"]] += int(humaneval_verdict(problem, answer, self.runner, 10.0).passed)
        return {
            **pass_rates(passed, samples, temperature),
            "answers": {p["task_id"]: drawn[0] for p, drawn in zip(problems, answers, strict=True)},
        }


def rehearsal_records(evaluator: Evaluator, backend: Any, count: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """SFT records of the model's own verified answers to the first `count` problems of HumanEval's
    *train* split (never its held-out one), and how many of them were kept. Mixed into SFT beside a
    project's episodes, they keep imitating a narrow project from rewriting how the model answers
    everything else."""
    from training.scenarios.base import humaneval_scenarios

    general = [{**s.verifier.data, "task_id": s.id} for s in humaneval_scenarios("train")[:count]]
    if not general:
        return [], {"problems": 0, "kept": 0}
    own = evaluator.pass_at_1(backend, general)
    records = [
        {"messages": [*messages_of(p), {"role": "assistant", "content": own["answers"][p["task_id"]]}]}
        for p in general
        if p["task_id"] not in own["failed"]
    ]
    return records, {"problems": len(general), "kept": len(records)}


def pass_rates(passed: dict[str, int], samples: int, temperature: float) -> dict[str, Any]:
    """pass@1 from each problem's count of passing answers out of `samples`: greedy (one sample)
    with its Wilson interval, else the mean of the problems' rates with a normal interval."""
    rates = {task: count / samples for task, count in passed.items()}
    total = sum(passed.values())
    interval = wilson(total, len(passed)) if samples == 1 else mean_interval(list(rates.values()))
    return {
        "n": len(passed),
        "samples": samples,
        "temperature": temperature,
        "passed": total,
        "pass_at_1": sum(rates.values()) / max(1, len(passed)),
        "ci95": [max(0.0, interval[0]), min(1.0, interval[1])],
        "failed": [task for task, rate in rates.items() if rate == 0],
        "rates": rates,
    }


def change(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """After minus before in points, with a paired 95% interval over the problems."""
    deltas = [100 * (after["rates"][task] - rate) for task, rate in before["rates"].items()]
    low, high = mean_interval(deltas)
    return {"points": sum(deltas) / len(deltas), "ci95": [low, high]}


def log(what: dict[str, Any]) -> None:
    """Progress on stderr: an evaluation as passed/n per task set, anything else as it is."""
    brief = {k: f"{v['passed']}/{v['n']}" if isinstance(v, dict) and "passed" in v else v for k, v in what.items()}
    print(json.dumps(brief, default=str), file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    """Where a benchmark ran: CPUs, torch's threads, the load before it, Python and torch versions."""
    import torch

    return {
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_before": os.getloadavg(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
