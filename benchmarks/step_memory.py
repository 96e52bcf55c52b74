"""Memory and time of one cpu-backend step on a long episode, with and without gradient checkpointing.

    python benchmarks/step_memory.py [--model qwen2.5-coder-0.5b-instruct] [--tokens 3000 6000]

For each episode length and each setting, a fresh child process loads the model (LoRA, the run's
default dtype), takes one SFT step on a conversation of about that many tokens (a real source file
of this repository in the user turn, a 400-token answer), and one GRPO step on a group of two
trajectories of that length; it reports the process's peak RSS after loading and after each step,
and each step's seconds. A fresh process per setting, so one peak does not hide another. JSON on
stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "training" / "backends" / "cpu.py"


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(model: str, tokens: int, checkpointing: bool) -> dict[str, Any]:
    """Runs in the child: load, one SFT step, one GRPO step; figures as a dict."""
    sys.path.insert(0, str(ROOT))
    import torch

    from episodes.codec import encode_choice
    from training.backends.base import BackendConfig
    from training.backends.cpu import CpuBackend
    from training.data.groups import Group, Trajectory

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        config = BackendConfig(
            path=Path(tmp), base_model=model, max_seq_len=tokens + 1024, gradient_checkpointing=checkpointing
        )
        CpuBackend.check(config)  # as the worker does: imports ART and undoes its transformers patch
        backend = CpuBackend(config)
        backend.start()
        loaded = peak_mb()
        text = SOURCE.read_text()
        ids = backend.tokenizer(text)["input_ids"]
        while len(ids) < tokens:
            ids = ids + ids
        user = backend.tokenizer.decode(ids[:tokens])
        answer = backend.tokenizer.decode(ids[:400])
        conversation = {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}
        started = time.perf_counter()
        backend.train_sft([conversation])
        sft_s, sft_peak = time.perf_counter() - started, peak_mb()
        messages = [{"role": "user", "content": user}]
        choices = backend.sample(messages, n=2, max_tokens=64, temperature=1.0, seed=0)
        group = Group(
            key="g",
            trajectories=[
                Trajectory([*messages, encode_choice(c)], reward=float(i), policy_step=backend.step)
                for i, c in enumerate(choices)
            ],
        )
        started = time.perf_counter()
        backend.train([group])
        grpo_s, grpo_peak = time.perf_counter() - started, peak_mb()
        backend.close()
    return {
        "tokens": tokens,
        "gradient_checkpointing": checkpointing,
        "peak_rss_mb_after_load": loaded,
        "peak_rss_mb_after_sft_step": sft_peak,
        "sft_step_seconds": sft_s,
        "peak_rss_mb_after_grpo_step": grpo_peak,
        "grpo_step_seconds": grpo_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--tokens", type=int, nargs="+", default=[3000])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, tokens, checkpointing = args.child
        print(json.dumps(one(model, int(tokens), checkpointing == "1")))
        return
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    results = []
    for tokens in args.tokens:
        for checkpointing in ("0", "1"):
            done = subprocess.run(
                [sys.executable, __file__, "--child", args.model, str(tokens), checkpointing],
                capture_output=True, text=True, env=env, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise SystemExit(done.stderr[-3000:])
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"model": args.model, "load_average": os.getloadavg(), "runs": results}, indent=2))


if __name__ == "__main__":
    main()
