"""`tinker`: ART's TinkerBackend (Thinking Machines' Tinker). Not exercised in CI (needs TINKER_API_KEY)."""

from __future__ import annotations

from typing import Any

from training.backends._art_common import ArtBackendAdapter, missing_env, missing_modules
from training.backends.base import BackendConfig


class TinkerArtBackend(ArtBackendAdapter):
    name = "tinker"

    @staticmethod
    def missing(config: BackendConfig) -> list[str]:
        modules = missing_modules("art", "tinker", "tinker_cookbook")
        problems = [
            f"{module} (openpipe-art[tinker]==0.5.18, in an environment of its own as for rlide[gpu]: docs/gpu.md)"
            for module in modules
        ]
        problems += missing_env("TINKER_API_KEY")
        if config.base_model == "tiny-qwen2":
            problems.append("a hosted base model, e.g. --base-model Qwen/Qwen3-8B")
        return problems

    def make_art_backend(self) -> Any:
        from art.tinker.backend import TinkerBackend

        return TinkerBackend(path=str(self.config.path.expanduser()))
