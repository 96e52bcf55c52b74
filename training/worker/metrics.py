"""Each committed step's figures as TensorBoard event files in the run's own folder
(`{model_dir}/tensorboard`), so `tensorboard --logdir ~/.local/share/rlide/art` charts reward, loss,
KL and pass@1 over steps for every run side by side. The worker writes a step's metrics once the log
has committed it; `rlide eval` writes pass@1 at the checkpoint it evaluated."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TENSORBOARD_FOLDER = "tensorboard"


class StepMetrics:
    """A writer opened on first use (torch's `SummaryWriter`; the worker has torch loaded already)."""

    def __init__(self, model_dir: Path) -> None:
        self.folder = model_dir / TENSORBOARD_FOLDER
        self._writer: Any = None

    def write(self, step: int, figures: Mapping[str, float | None]) -> None:
        """Scalars at `step`; figures that are None or not finite (no reward yet) are left out."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.folder))
        for tag, value in figures.items():
            if value is not None and math.isfinite(value):
                self._writer.add_scalar(tag, value, step)
        self._writer.flush()  # a step is on disk when it is committed, not when the worker exits

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
