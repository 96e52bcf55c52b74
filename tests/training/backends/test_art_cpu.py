"""The GPU path without a GPU: the `local` adapter, ART's real `TrainableModel` and its managed client,
over rlide's CPU stand-in of ART's LocalBackend (training/backends/art_cpu.py), which serves each
checkpoint over HTTP as `student-RUN@{step}`, as ART's vLLM does. Trained by the worker, crashed and
resumed, then served and evaluated through the server the run published."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("art")
from typer.testing import CliRunner  # noqa: E402

from episodes.store import EpisodeStore  # noqa: E402
from mcp_server.cli.app import app  # noqa: E402
from tests.training.proxied import assert_proxied_turn_recorded  # noqa: E402
from training.backends.base import BackendConfig, checkpoint_steps, make_backend  # noqa: E402
from training.backends.served import published  # noqa: E402
from training.gateway.app import build_gateway  # noqa: E402
from training.worker.config import WorkerConfig  # noqa: E402
from training.worker.loop import train  # noqa: E402


def test_the_local_adapter_trains_resumes_serves_and_evaluates_through_arts_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLIDE_HOME", str(tmp_path))
    monkeypatch.delenv("RLIDE_DATABASE_URL", raising=False)
    monkeypatch.delenv("RLIDE_CONFIG", raising=False)
    database_url = f"sqlite:///{tmp_path / 'episodes.db'}"
    config = WorkerConfig(
        database_url=database_url,
        backend=BackendConfig(backend="art-cpu", path=tmp_path / "art", learning_rate=2e-2),
        run="gpu",
        max_steps=2,
        groups_per_step=2,
    )
    report = train(config, daemon=True)  # self-play sampled through ART's client from the stand-in's server
    assert report.step == 2, report
    model_dir = config.backend.model_dir()
    assert model_dir == tmp_path / "art" / "rlide" / "models" / "student-gpu"
    assert checkpoint_steps(model_dir) == [1, 2]
    store = EpisodeStore.open(database_url)
    steps = store.runs.training_steps("gpu")
    # Sampled over HTTP, token ids and logprobs recorded, recomputed by ART's loss: on-policy.
    assert all(step.metrics["losses/max_logprob_drift"] < 1e-4 for step in steps), [s.metrics for s in steps]
    store.close()
    # ART's own record of each step (model.log: history.jsonl, and W&B when configured), in the run's folder.
    history = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in history] == [1, 2]
    assert all("train/losses/policy_loss" in entry and "reward/mean" in entry for entry in history), history

    # A crash after a checkpoint was saved and before the log committed it: ART (and its server)
    # start on the newest checkpoint; the adapter rolls back and starts them again on the committed one.
    shutil.copytree(model_dir / "checkpoints" / "0002", model_dir / "checkpoints" / "0003")
    config.max_steps = 1
    resumed = train(config, once=True)
    assert (resumed.start_step, resumed.step) == (2, 3)
    assert checkpoint_steps(model_dir) == [1, 2, 3]

    # Serving and evaluating the run go through the server its (running) backend published.
    backend = make_backend(config.backend)
    try:
        assert backend.start() == 3
        served = published(model_dir)
        assert served is not None and served.model == "student-gpu" and served.base_url.startswith("http://127.0.0.1:")
        gateway = build_gateway(config.backend, database_url)
        assert_proxied_turn_recorded(gateway, step=3, recorded="student-gpu")
        gateway.store.close()

        evaluated = CliRunner().invoke(app, ["eval", "--run", "gpu", "--limit", "1", "--max-tokens", "8"])
        assert evaluated.exit_code == 0, evaluated.output
        result = json.loads(evaluated.stdout)
        assert (result["model"], result["checkpoint_step"], result["n"]) == ("student", 3, 1)
    finally:
        backend.close()
