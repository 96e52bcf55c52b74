"""Shared fixtures: a real episode log (SQLite under tmp_path; `any_store`: SQLite and PostgreSQL)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from training.store import EpisodeStore

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EpisodeStore]:
    s = EpisodeStore.open(str(tmp_path / "episodes.db"))
    yield s
    s.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EpisodeStore]:
    """The same tests on both episode-log databases (PostgreSQL from tests/conftest.py's server)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'episodes.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    s = EpisodeStore.open(url)
    yield s
    s.close()
