"""Where a run's policy server listens when its backend serves the policy itself (ART's LocalBackend
runs vLLM): the worker publishes it in the run's folder when its backend starts, and `rlide policy
serve` and `rlide eval` forward to it (`training.gateway.engines.ProxyEngine`), so a GPU run is served
and evaluated by the model it trains, never by a CPU copy of its base."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from training.backends.base import BackendError

SERVED_FILE = "served.json"


@dataclass(frozen=True)
class Served:
    base_url: str
    """The OpenAI-compatible server's base URL, e.g. http://127.0.0.1:8000/v1."""
    model: str
    """The run's model as the server names it, without the `@{step}` of each checkpoint."""
    api_key: str | None = None


def publish(model_dir: Path, served: Served) -> None:
    """Write it whole or not at all (a reader never sees half a file)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    partial = model_dir / f".{SERVED_FILE}.{os.getpid()}"
    partial.write_text(json.dumps(asdict(served)), encoding="utf-8")
    os.replace(partial, model_dir / SERVED_FILE)


def published(model_dir: Path) -> Served | None:
    """What the run's worker published, None if nothing; a file that is not a record is a clear error."""
    path = model_dir / SERVED_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Served(base_url=str(data["base_url"]), model=str(data["model"]), api_key=data.get("api_key"))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise BackendError(
            f"{path} is not a policy server record ({exc!r}): the run's worker rewrites it when it starts"
        ) from exc
