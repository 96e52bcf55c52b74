"""`WorkerConfig`: everything `rlide train` needs, one dataclass with a docstring per field.

The worker saves it with its run (`TrainingRuns.ensure_run`), so every checkpoint has its
hyperparameters, and writes what the run keeps for life (`BackendConfig.identity`: backend, base
model, ...) into the run's folder as `run.json`, so the folder alone says what it was started from.

`for_home` (what `rlide train` builds) sizes a first try to the machine: on the cpu backends a
pretrained model samples fewer, shorter-lived groups and imitates fewer episodes per step
(`CPU_FIRST_TRY`), so `rlide train --once` on 2 cores ends in minutes, not tens of minutes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from training.backends.base import BackendConfig
from training.data.export import SftView

RUN_FILE = "run.json"
CPU_BACKENDS = ("cpu", "art-cpu")
TINY_MODEL = "tiny-qwen2"
CPU_FIRST_TRY: dict[str, int] = {"group_size": 4, "groups_per_step": 2, "sft_batch": 2}
"""Defaults for a pretrained model on a cpu backend, measured on 2 cores (docs/training.md): 8 rollouts
of a 0.5B model take 1-3 minutes, an SFT step on 2 episodes of a few thousand tokens about as long.
The dataclass defaults (8 x 4 rollouts, 8 episodes) fit a GPU, and the tiny model anywhere."""


def first_try_defaults(backend: str, base_model: str) -> dict[str, int]:
    """The defaults `for_home` fills in for what the caller did not set."""
    if backend in CPU_BACKENDS and base_model != TINY_MODEL:
        return dict(CPU_FIRST_TRY)
    return {}


def write_run_file(model_dir: Path, identity: dict[str, Any]) -> None:
    """Record in the run's folder what it keeps for life (written at every start: it never changes)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    tmp = model_dir / f".{RUN_FILE}.tmp"
    tmp.write_text(json.dumps(identity, indent=2, default=str) + "\n")
    tmp.replace(model_dir / RUN_FILE)


def read_run_file(model_dir: Path) -> dict[str, Any] | None:
    """What the run in `model_dir` was started with, or None (no run there, or an unreadable file)."""
    try:
        data = json.loads((model_dir / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass
class WorkerConfig:
    """Everything `rlide train` needs; saved with the run so every checkpoint has its hyperparameters."""

    database_url: str
    """Episode log: sqlite:///PATH or postgresql://..."""
    backend: BackendConfig = field(default_factory=BackendConfig)
    """Trainer choice and its checkpoint directory."""
    run: str = "default"
    """Name of the training run: its cursor, history and consumed groups in the log, and its own
    checkpoint directory (`BackendConfig.run`, set from this)."""
    scenarios: str | None = "toy"
    """Scenario sets for self-play rollouts each step, comma-separated: toy, humaneval, log (episodes of
    the log whose reward can be re-checked, refreshed every step); None for log groups only."""
    scenario_split: str = "train"
    """Which split of the scenario set to practise on."""
    group_size: int = 8
    """Trajectories per GRPO group (rollouts per scenario, policy episodes per task)."""
    groups_per_step: int = 4
    """Rollout groups sampled per step."""
    max_tokens: int | None = None
    """Longest rollout completion, in tokens; None: 12 for tiny-qwen2 (its toy answers), 384 for a
    pretrained model (a function body or a small diff), and a replay's own budget (sized to the code
    its fix touched) for a replay. A number set here caps replays too."""
    temperature: float = 1.0
    """Sampling temperature of rollouts (1.0: logprobs are the policy's own)."""
    max_staleness: int = 2
    """Drop groups sampled by a policy more than this many steps older than the current one."""
    max_steps: int | None = None
    """Stop after this many steps in this invocation (None: no limit)."""
    poll_interval_s: float = 10.0
    """Daemon: wait this long when there is nothing to train."""
    backoff_initial_s: float = 1.0
    """First wait after a backend error; doubles per consecutive error."""
    backoff_max_s: float = 300.0
    """Longest wait between retries."""
    max_backend_failures: int = 5
    """Consecutive backend errors before the worker gives up."""
    no_signal_patience: int = 5
    """Consecutive batches with no trainable group before the worker stops."""
    lock_dir: Path | None = None
    """Where the lock file lives (default: the checkpoint directory)."""
    plot_path: Path | None = None
    """Rewrite this reward-per-step PNG after every step (None: no chart)."""
    judge_model: str | None = None
    """litellm id of an LLM judge (ART's RULER) mixed into verifier rewards; None: verifier only."""
    judge_weight: float = 0.5
    """Share of the judge in each reward when a judge is set."""
    judge_params: dict[str, Any] = field(default_factory=dict)
    """Extra litellm parameters for the judge (temperature, api_base; mock_response in tests)."""
    sft_min_reward: float = 0.5
    """External episodes (the IDE's own model) whose reward total reaches this are imitated by SFT steps."""
    sft_batch: int = 8
    """Most external episodes per SFT step; 0 turns SFT off."""
    sft_view: SftView = "trace"
    """What an SFT step imitates of an episode (`training.data.export.SftView`): its whole trace, or
    the task and its final answer."""
    dpo_batch: int = 0
    """Most preference pairs (`dpo` export: episodes of one task whose rewards differ by 0.5 or more)
    per DPO step, taken after SFT and before GRPO; 0 (default) turns DPO off."""
    eval_tasks: str | None = None
    """Held-out tasks the policy answers during training (`humaneval` or a task file's path; None:
    no evaluation during training). The best checkpoint on them is kept (`training/worker/evaluation.py`)."""
    eval_every: int = 10
    """Committed steps between two evaluations during training."""
    eval_limit: int | None = None
    """The first this many tasks of `eval_tasks` (None: all of them)."""
    include_unverified: bool = False
    """Also train on episodes whose reward is only claims (no verified tests, no person's rating) or that
    carry monitor flags nobody cleared (docs/rewards.md); off by default."""

    def __post_init__(self) -> None:
        if self.backend.run != self.run:
            self.backend = replace(self.backend, run=self.run)

    @classmethod
    def for_home(cls, home: Path, database_url: str, *, backend: str = "cpu", **overrides: Any) -> WorkerConfig:
        """The default layout under rlide's home: checkpoints in {home}/art, the chart in {home}/training."""
        # The run is the worker's (it sets the backend's from it): never a backend field here.
        backend_fields = {
            k: overrides.pop(k) for k in list(overrides) if k in BackendConfig.__dataclass_fields__ and k != "run"
        }
        sized = first_try_defaults(backend, str(backend_fields.get("base_model", TINY_MODEL)))
        # None for a sized field means "not set": the machine's default, else the dataclass's.
        overrides = {**sized, **{k: v for k, v in overrides.items() if not (v is None and k in CPU_FIRST_TRY)}}
        return cls(
            database_url=database_url,
            backend=BackendConfig(backend=backend, path=home / "art", **backend_fields),
            plot_path=overrides.pop("plot_path", home / "training" / "reward.png"),
            **overrides,
        )

    @property
    def rollout_max_tokens(self) -> int:
        if self.max_tokens is not None:
            return self.max_tokens
        return 12 if self.backend.base_model == TINY_MODEL else 384

    @property
    def rollout_budget_cap(self) -> int | None:
        """The cap on a scenario's own completion budget: a person's `max_tokens`; the tiny model's
        12 (it writes no fix); else none (a replay gets the tokens its fix needs)."""
        if self.max_tokens is None and self.backend.base_model != TINY_MODEL:
            return None
        return self.rollout_max_tokens

    def plan(self) -> str:
        """What each step of this configuration does, so the person watching knows what to expect."""
        sampling = (
            f"self-play: {self.groups_per_step} groups x {self.group_size} rollouts of up to"
            f" {self.rollout_max_tokens} tokens{'' if self.rollout_budget_cap else ' (a replay: its fix size)'}"
            f" ({self.scenarios}), then one optimizer step"
            if self.scenarios and self.groups_per_step
            else "no self-play"
        )
        return (
            f"{self.backend.base_model} on the {self.backend.backend} backend; each step: SFT on up to"
            f" {self.sft_batch} waiting external episodes if any, else {sampling}; the first rollouts give an ETA"
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {k: str(v) if isinstance(v, Path) else v for k, v in data.items()}
