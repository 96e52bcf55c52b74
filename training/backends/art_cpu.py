"""`art-cpu`: ART's `local` adapter over a CPU stand-in of ART's LocalBackend, so the GPU path (the
adapter, ART's `TrainableModel`, the published policy server, `ProxyEngine`, resume and eval) runs
in the test suite and on a laptop.

`CpuArtStandin` implements ART 0.5.18's `Backend` protocol (`register`, `_prepare_backend_for_training`,
`_get_step`, `_model_inference_name`, `train`, `_delete_checkpoint_files`, `close`) as LocalBackend
does, with the cpu backend in place of unsloth and rlide's policy endpoint in place of vLLM: it trains
ART `TrajectoryGroup`s with ART's tokenization and loss (`CpuBackend.train_art`), saves checkpoints in
ART's layout, and serves them on 127.0.0.1 as `{model}@{step}` with token ids (`return_token_ids`),
behind an API key, as ART's vLLM runtime does. What it does not stand in for: unsloth, vLLM's own
batching and its OpenAI server code, `_internal_config` (the cpu backend takes the run's LoRA settings
from `BackendConfig`), and SFT through ART.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from training.backends._art_common import missing_modules
from training.backends.art_local import LocalArtBackend
from training.backends.base import DEFAULT_RUN, BackendConfig, checkpoint_steps


class CpuArtStandin:
    """ART's `Backend` protocol on CPU, for one run (`config`)."""

    def __init__(self, config: BackendConfig) -> None:
        from training.backends.cpu import CpuBackend

        self.config = config
        self.trainer = CpuBackend(config)
        self._api_key = secrets.token_urlsafe(16)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._scratch: Path | None = None
        self._started = False

    # -- ART's Backend protocol ---------------------------------------------------------------------

    async def register(self, model: Any) -> None:
        return None

    async def _prepare_backend_for_training(self, model: Any, config: Any = None) -> tuple[str, str]:
        if not self._started:
            self.trainer.start()  # resumes from the newest checkpoint in the run's folder, as ART does
            self._started = True
        return self._serve(), self._api_key

    def _model_inference_name(self, model: Any, step: int | None = None) -> str:
        return f"{model.name}@{self.trainer.step if step is None else step}"

    async def _get_step(self, model: Any) -> int:
        return self.trainer.step

    async def train(
        self, model: Any, trajectory_groups: Iterable[Any], *, learning_rate: float = 5e-6, **options: Any
    ) -> Any:
        from art.types import TrainResult

        kl = float(options.get("kl_penalty_coef", 0.0))
        if kl != self.config.kl_penalty_coef:  # the cpu trainer reads it from the run's config
            raise ValueError(f"kl_penalty_coef {kl} differs from the run's {self.config.kl_penalty_coef}")
        result = self.trainer.train_art(list(trajectory_groups), learning_rate=learning_rate)
        return TrainResult(step=result.step, metrics=result.metrics)

    async def _delete_checkpoint_files(self, model: Any, steps_to_keep: list[int]) -> None:
        for step in checkpoint_steps(self.config.model_dir()):
            if step not in steps_to_keep:
                shutil.rmtree(self.config.checkpoint_dir(step), ignore_errors=True)

    def _train_sft(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the CPU stand-in of ART's LocalBackend trains GRPO only")

    async def close(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.trainer.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    # -- the stand-in of ART's vLLM server ------------------------------------------------------------

    def _serve(self) -> str:
        """Start the policy endpoint on a free loopback port, once; its base URL."""
        if self._server is None:
            import uvicorn

            from episodes.store import EpisodeStore
            from training.gateway.app import Gateway
            from training.gateway.engines import TransformersEngine

            # Same folder, served under the run's model name: `student-RUN@{step}`, as ART's vLLM names it.
            served = replace(self.config, model_name=self.config.run_model_name, run=DEFAULT_RUN)
            self._scratch = Path(tempfile.mkdtemp(prefix="rlide-art-cpu-"))
            store = EpisodeStore.open(str(self._scratch / "unused.db"))  # the stand-in records no episodes
            gateway = Gateway(
                TransformersEngine(served, reload_interval_s=0.0), store, token=self._api_key, bind_host="127.0.0.1"
            )
            self._server = uvicorn.Server(uvicorn.Config(gateway.app, host="127.0.0.1", port=0, log_level="warning"))
            self._thread = threading.Thread(target=self._server.run, name="art-cpu-policy-server", daemon=True)
            self._thread.start()
            deadline = time.monotonic() + 60
            while not self._server.started:
                if time.monotonic() > deadline or not self._thread.is_alive():
                    raise RuntimeError("the CPU stand-in's policy server did not start")
                time.sleep(0.05)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"


class CpuArtBackend(LocalArtBackend):
    """The `local` adapter, whole, over `CpuArtStandin` instead of ART's LocalBackend."""

    name = "art-cpu"

    @staticmethod
    def missing(config: BackendConfig) -> list[str]:
        modules = missing_modules("art", "torch", "transformers", "peft")
        return [f"{', '.join(modules)} (pip install 'rlide[training]')"] if modules else []

    def make_art_backend(self) -> Any:
        return CpuArtStandin(self.config)
