"""`resolve_base_model`: each kind of name it is given, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.training.models.conftest import FetchRun
from training.models.registry import PACKAGED, QWEN_CODER, SMOLLM2, ModelError
from training.models.resolve import resolve_base_model


@pytest.mark.slow
def test_a_packaged_name_gives_its_folder_in_the_cache(
    smollm2_fetched: FetchRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLIDE_MODEL_CACHE", str(smollm2_fetched.cache))
    assert resolve_base_model(SMOLLM2.name, fetch=False) == smollm2_fetched.folder


def test_a_missing_packaged_model_without_fetch_says_how_to_fetch_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLIDE_MODEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelError, match=f"run `rlide models fetch {QWEN_CODER.name}`"):
        resolve_base_model(QWEN_CODER.name, fetch=False)
    assert not (tmp_path / "cache").exists()


def test_a_folder_with_a_config_is_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert resolve_base_model("my-model") == tmp_path / "my-model"
    assert resolve_base_model(str(tmp_path / "my-model")) == tmp_path / "my-model"


def test_a_folder_without_a_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds no config.json"):
        resolve_base_model(str(tmp_path))


@pytest.mark.parametrize("name", ["no such model", "", " ", "a/b/c", "org/"])
def test_a_name_that_is_nothing_known_lists_the_packaged_models(name: str) -> None:
    with pytest.raises(ValueError, match=", ".join(PACKAGED)):
        resolve_base_model(name)


def test_tiny_qwen2_is_left_to_the_backend() -> None:
    with pytest.raises(ValueError, match="built-in random model"):
        resolve_base_model("tiny-qwen2")


def test_a_hub_id_offline_and_not_cached_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="hub cannot be reached.*packaged model: " + ", ".join(PACKAGED)):
        resolve_base_model("rlide-tests/no-such-model")
