"""Shared adapter for ART's own backends (LocalBackend, ServerlessBackend, TinkerBackend).

ART's API is async; the worker is a plain loop, so each call runs on one private event loop.
Sampling goes through ART's managed OpenAI client with `logprobs=True`, so the returned `Choice`s
carry what RL needs. NOT exercised in this repository's CI (no GPU, no keys): see docs/training.md.
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
from training.data.groups import Group, to_art

_T = TypeVar("_T")
DEFAULT_LR = 5e-6


def require_modules(backend: str, *modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise BackendUnavailable(
            f"the {backend} training backend needs {', '.join(missing)}, which are not installed here"
            " (pip install 'rlide[training]' plus, for local, openpipe-art[backend] on a CUDA machine)"
        )


def require_env(backend: str, *names: str) -> None:
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise BackendUnavailable(f"the {backend} training backend needs {' and '.join(missing)} set in the environment")


class ArtBackendAdapter:
    name = "art"

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.step = 0
        self._loop = asyncio.new_event_loop()
        self._art_backend: Any = None
        self._model: Any = None

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        try:
            return self._loop.run_until_complete(coro)
        except (BackendError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - any ART/service failure is retried by the worker
            raise BackendError(f"{self.name}: {type(exc).__name__}: {exc}") from exc

    def make_art_backend(self) -> Any:  # overridden
        raise NotImplementedError

    def start(self) -> int:
        import art

        self._art_backend = self.make_art_backend()
        self._model = art.TrainableModel(
            name=self.config.model_name, project=self.config.project, base_model=self.config.base_model
        )
        self._run(self._model.register(self._art_backend))
        self.step = int(self._run(self._model.get_step()))
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
        client = self._model.openai_client()
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

    def train(self, groups: list[Group]) -> TrainResult:
        lr = self.config.learning_rate or DEFAULT_LR
        self._run(self._art_backend.train(self._model, to_art(groups), learning_rate=lr))
        self.step = int(self._run(self._model.get_step()))
        return TrainResult(step=self.step)

    def rollback(self, step: int) -> None:
        # Local checkpoints past `step` are deleted; remote backends keep theirs (ART has no delete).
        for s in checkpoint_steps(self.config.model_dir()):
            if s > step:
                shutil.rmtree(self.config.checkpoint_dir(s), ignore_errors=True)
        if self.step > step and not self.config.model_dir().exists():
            raise BackendError(f"{self.name} cannot roll back from step {self.step} to {step}: start a new run")
        self.step = step

    def close(self) -> None:
        if self._art_backend is not None:
            with contextlib.suppress(Exception):  # closing is best effort
                self._loop.run_until_complete(self._art_backend.close())
        self._loop.close()
