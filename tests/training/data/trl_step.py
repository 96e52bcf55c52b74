"""One TRL `SFTTrainer` step and one `DPOTrainer` step on rlide's exported JSONL, on a local model.

Runs in the TRL environment (`.venv-trl`, scripts/setup_trl.sh), not rlide's: TRL's `datasets`
needs numpy 2 while pufferlib pins numpy below 2. Prints one JSON object: per trainer, the steps
taken, the examples it loaded and the training loss.

    .venv-trl/bin/python tests/training/data/trl_step.py MODEL_DIR SFT.jsonl DPO.jsonl OUT_DIR
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path


def main() -> None:
    model_dir, sft_path, dpo_path, out = (Path(arg) for arg in sys.argv[1:5])
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    # No truncation: the records carry rlide's real tool schemas, longer than TRL's 1,024-token default.
    common = {
        "max_length": None,
        "max_steps": 1,
        "per_device_train_batch_size": 2,
        "report_to": [],
        "use_cpu": True,
        "save_strategy": "no",
    }
    result = {}
    for name, path, trainer_class, config_class in (
        ("sft", sft_path, SFTTrainer, SFTConfig),
        ("dpo", dpo_path, DPOTrainer, DPOConfig),
    ):
        data = load_dataset("json", data_files=str(path), split="train")
        trainer = trainer_class(
            model=AutoModelForCausalLM.from_pretrained(model_dir),
            args=config_class(output_dir=str(out / name), **common),
            train_dataset=data,
            processing_class=tokenizer,
        )
        output = trainer.train()
        loss = float(output.training_loss)
        result[name] = {
            "steps": int(output.global_step),
            "examples": len(data),
            "loss": loss,
            "finite": math.isfinite(loss),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
