"""Shared adapter for ART's own backends (LocalBackend, ServerlessBackend, TinkerBackend).

ART's API is async; the worker is a plain loop, so each call runs on one private event loop.
Sampling goes through an OpenAI client on the server ART registered, with `logprobs=True`, so the
returned `Choice`s carry what RL needs. Exercised in CI over the CPU stand-in of ART's LocalBackend
(`art_cpu.py`); ART's own LocalBackend, ServerlessBackend and TinkerBackend are not (no GPU, no keys):
see docs/gpu.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
from collections.abc import Coroutine
from typing import Any, TypeVar

from training.backends.base import BackendConfig, BackendError, BackendUnavailable, TrainResult, checkpoint_steps
from training.backends.sampled import as_sampled
from training.backends.served import Served, publish
from training.data.groups import Group, to_art

_T = TypeVar("_T")
DEFAULT_LR = 5e-6


def missing_modules(*modules: str) -> list[str]:
    return [module for module in modules if importlib.util.find_spec(module) is None]


def missing_env(*names: str) -> list[str]:
    return [f"{name} set in the environment" for name in names if not os.environ.get(name)]


class ArtBackendAdapter:
    name = "art"
    serves_model_at_step = False
    """Whether ART's server for this backend names each checkpoint `{model}@{step}`, as LocalBackend's
    vLLM does, so `rlide policy serve` and `rlide eval` can forward to it (`served.publish`)."""

    @staticmethod
    def missing(config: BackendConfig) -> list[str]:  # overridden
        """Everything this backend lacks here, each said as what to install or set."""
        raise NotImplementedError

    @classmethod
    def check(cls, config: BackendConfig) -> None:
        problems = cls.missing(config)
        if problems:
            raise BackendUnavailable(
                f"the {cls.name} training backend cannot start here; it needs " + "; ".join(problems)
            )

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.step = 0
        self._loop = asyncio.new_event_loop()
        self._art_backend: Any = None
        self._model: Any = None
        self._openai: Any = None

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        try:
            return self._loop.run_until_complete(coro)
        except (BackendError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - any ART/service failure is retried by the worker
            raise BackendError(f"{self.name}: {type(exc).__name__}: {exc}") from exc

    def make_art_backend(self) -> Any:  # overridden
        raise NotImplementedError

    def model_options(self) -> dict[str, Any]:
        """Further keyword arguments of this backend's `art.TrainableModel` (overridden)."""
        return {}

    def train_options(self) -> dict[str, Any]:
        """Further keyword arguments of this backend's `train` (overridden)."""
        return {}

    def trainable_model(self) -> Any:
        import art

        return art.TrainableModel(
            name=self.config.run_model_name,
            project=self.config.project,
            base_model=self.config.base_model,
            # ART's own files (history.jsonl, its logs) in the run's folder, not ./.art of wherever it started
            base_path=str(self.config.path.expanduser()),
            **self.model_options(),
        )

    def start(self) -> int:
        self._openai = None  # a client of the server this start registers
        self._art_backend = self.make_art_backend()
        self._model = self.trainable_model()
        self._run(self._model.register(self._art_backend))
        self.step = int(self._run(self._model.get_step()))
        base_url = getattr(self._model, "inference_base_url", None)
        if base_url and self.serves_model_at_step:  # where `policy serve` and `eval` find this run's policy
            api_key = getattr(self._model, "inference_api_key", None)
            publish(self.config.model_dir(), Served(str(base_url), self.config.run_model_name, api_key))
        return self.step

    def sample(
        self,
        messages: list[dict[str, Any]],
        *,
        n: int,
        max_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[Any]:
        client = self._client()
        kwargs: dict[str, Any] = {"tools": tools} if tools else {}

        async def go() -> list[Any]:
            resp = await client.chat.completions.create(
                model=self._model.get_inference_name(),
                messages=messages,
                n=n,
                max_tokens=max_tokens,
                temperature=temperature,
                seed=seed,
                logprobs=True,
                **kwargs,
            )
            return list(resp.choices)

        return self._run(go())

    def _client(self) -> Any:
        """An OpenAI client on the server ART registered for the model. Not ART's `openai_client()`:
        openpipe-art 0.5.18 builds that with httpx objects which openai 3's httpx2 transport refuses
        (`TypeError: unsupported operand type(s) for +: 'float' and 'Timeout'`)."""
        if self._openai is None:
            from openai import AsyncOpenAI

            self._openai = AsyncOpenAI(
                base_url=self._model.inference_base_url,
                api_key=self._model.inference_api_key or "unused",
                timeout=1200.0,
                max_retries=0,  # the worker retries a failed step itself, with backoff
            )
        return self._openai

    def train(self, groups: list[Group]) -> TrainResult:
        lr = self.config.learning_rate or DEFAULT_LR
        art_groups = as_sampled(to_art(groups))  # each tool call once: in the tokens that sampled it
        trained = self._run(self._art_backend.train(self._model, art_groups, learning_rate=lr, **self.train_options()))
        self.step = int(self._run(self._model.get_step()))
        raw = getattr(trained, "metrics", None) or {}
        metrics = {k: float(v) for k, v in raw.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        rewards = [t.reward for g in groups for t in g.trajectories]
        if rewards:
            metrics["reward/mean"] = sum(rewards) / len(rewards)
        # ART's own record of the step (history.jsonl in its model folder, and W&B when configured). The
        # figures only: the trajectories are in the episode log already, and ART writes them as parquet.
        self._run(self._model.log(split="train", metrics=metrics, step=self.step))
        return TrainResult(step=self.step, metrics=metrics)

    def rollback(self, step: int) -> None:
        # Local checkpoints past `step` are deleted; remote backends keep theirs (ART has no delete).
        later = [s for s in checkpoint_steps(self.config.model_dir()) if s > step]
        for s in later:
            shutil.rmtree(self.config.checkpoint_dir(s), ignore_errors=True)
        if self.step > step and not self.config.model_dir().exists():
            raise BackendError(f"{self.name} cannot roll back from step {self.step} to {step}: start a new run")
        if later and self._art_backend is not None:
            # ART loaded (and its vLLM serves) the newest checkpoint when it started: start it again on
            # the committed one, so training and serving resume from what the log has.
            self._run(self._art_backend.close())
            if self.start() != step:
                raise BackendError(f"{self.name} restarted at step {self.step}, not the committed step {step}")
        self.step = step

    def close(self) -> None:
        if self._art_backend is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                self._loop.run_until_complete(self._art_backend.close())
        self._loop.close()
