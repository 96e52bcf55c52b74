"""The memory package's configuration, and the factories that turn it into a store and embedder."""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr

from memory.embedding.embedders import (
    DEFAULT_MAX_TOKENS,
    CachedEmbedder,
    Embedder,
    EmbeddingCache,
    OnnxMiniLM,
    OpenAIEmbedder,
)
from memory.embedding.onnx_model import MinilmVariant
from memory.errors import MemoryConfigError
from memory.stores.base import Store


def default_data_dir() -> Path:
    """`$RLIDE_HOME/memory`, else `~/.local/share/rlide/memory` (one env var moves all state)."""
    home = os.environ.get("RLIDE_HOME")
    base = Path(home) if home else Path.home() / ".local" / "share" / "rlide"
    return base / "memory"


class MemoryConfig(BaseModel):
    """One workspace's memory settings; the lead fills these from `RLIDE_*` settings."""

    workspace: Path
    store: Literal["sqlite", "turbopuffer"] = "sqlite"
    embedder: Literal["onnx-minilm", "openai", "none"] = "onnx-minilm"
    data_dir: Path = Field(default_factory=default_data_dir)
    index_path: Path | None = None  # default: data_dir/index/<workspace-name>-<hash>.sqlite
    embedding_cache_path: Path | None = None  # default: data_dir/embeddings.sqlite
    solutions_path: Path | None = None  # default: data_dir/solutions.sqlite
    max_file_bytes: int = 1_000_000
    max_tokens: int = DEFAULT_MAX_TOKENS
    minilm_variant: MinilmVariant = "int8-matmul"
    embed_threads: int | None = None
    openai_base_url: str = "https://api.openai.com/v1"
    openai_model: str = "text-embedding-3-small"
    openai_api_key: SecretStr | None = None
    openai_dim: int = 1536
    turbopuffer_api_key: SecretStr | None = None
    turbopuffer_region: str | None = None
    turbopuffer_base_url: str | None = None
    turbopuffer_namespace_prefix: str = "rlide"
    dense_exact_up_to: int | None = None  # None: memory.stores.vector_index.EXACT_UP_TO
    watch: bool = False
    poll_interval_s: float = 2.0

    def workspace_key(self) -> str:
        resolved = self.workspace.expanduser().resolve()
        slug = re.sub(r"[^A-Za-z0-9_.-]", "-", resolved.name)[:40] or "root"
        return f"{slug}-{hashlib.sha1(str(resolved).encode()).hexdigest()[:10]}"

    def resolved_index_path(self) -> Path:
        return self.index_path or self.data_dir / "index" / f"{self.workspace_key()}.sqlite"

    def resolved_cache_path(self) -> Path:
        return self.embedding_cache_path or self.data_dir / "embeddings.sqlite"

    def resolved_solutions_path(self) -> Path:
        return self.solutions_path or self.data_dir / "solutions.sqlite"


@functools.cache
def shared_minilm(max_tokens: int, threads: int | None, variant: MinilmVariant) -> OnnxMiniLM:
    """One ONNX session per process: a server with several workspaces loads the model once."""
    return OnnxMiniLM(max_tokens=max_tokens, threads=threads, variant=variant)


def build_embedder(config: MemoryConfig) -> CachedEmbedder | None:
    inner: Embedder
    if config.embedder == "none":
        return None
    if config.embedder == "onnx-minilm":
        inner = shared_minilm(config.max_tokens, config.embed_threads, config.minilm_variant)
    else:
        key = config.openai_api_key.get_secret_value() if config.openai_api_key else os.environ.get("OPENAI_API_KEY")
        inner = OpenAIEmbedder(
            base_url=config.openai_base_url, model=config.openai_model, api_key=key, dim=config.openai_dim
        )
    return CachedEmbedder(inner, EmbeddingCache(config.resolved_cache_path()))


def build_stores(config: MemoryConfig, model_id: str, dim: int, *, http_client: Any = None) -> tuple[Store, Store]:
    """(code store, solutions store) for the configured backend."""
    if config.store == "sqlite":
        from memory.stores.sqlite import SQLiteStore

        return (
            SQLiteStore(config.resolved_index_path(), model_id=model_id, dim=dim, exact_up_to=config.dense_exact_up_to),
            SQLiteStore(
                config.resolved_solutions_path(), model_id=model_id, dim=dim, exact_up_to=config.dense_exact_up_to
            ),
        )
    try:
        from memory.stores.turbopuffer import TurbopufferStore, make_client
    except ImportError as exc:
        raise MemoryConfigError(
            "store='turbopuffer' needs the turbopuffer client: pip install 'rlide[turbopuffer]' (or set store='sqlite')"
        ) from exc
    key = config.turbopuffer_api_key.get_secret_value() if config.turbopuffer_api_key else None
    client = make_client(
        api_key=key, region=config.turbopuffer_region, base_url=config.turbopuffer_base_url, http_client=http_client
    )
    prefix = config.turbopuffer_namespace_prefix
    return (
        TurbopufferStore(client, f"{prefix}-{config.workspace_key()}", model_id=model_id, dim=dim),
        TurbopufferStore(client, f"{prefix}-solutions", model_id=model_id, dim=dim),
    )
