"""`serverless`: ART's ServerlessBackend on W&B Training. Not exercised in CI (needs WANDB_API_KEY)."""

from __future__ import annotations

from typing import Any

from training.backends._art_common import ArtBackendAdapter, missing_env, missing_modules
from training.backends.base import BackendConfig


class ServerlessArtBackend(ArtBackendAdapter):
    name = "serverless"

    @staticmethod
    def missing(config: BackendConfig) -> list[str]:
        modules = missing_modules("art", "wandb")
        problems = [f"{', '.join(modules)} (pip install 'rlide[training]' wandb)"] if modules else []
        problems += missing_env("WANDB_API_KEY")
        if config.base_model == "tiny-qwen2":
            problems.append("a hosted base model, e.g. --base-model OpenPipe/Qwen3-14B-Instruct")
        return problems

    def make_art_backend(self) -> Any:
        from art.serverless.backend import ServerlessBackend

        return ServerlessBackend()
