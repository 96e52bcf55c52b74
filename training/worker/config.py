"""`WorkerConfig`: everything `rlide train` needs, one dataclass with a docstring per field.

The worker saves it with its run (`TrainingRuns.ensure_run`), so every checkpoint has its
hyperparameters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from training.backends.base import BackendConfig
from training.data.export import SftView


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
    pretrained model (a function body or a small diff)."""
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
        return 12 if self.backend.base_model == "tiny-qwen2" else 384

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {k: str(v) if isinstance(v, Path) else v for k, v in data.items()}
