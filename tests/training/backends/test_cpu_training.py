"""Real GRPO on the tiny CPU model: ART's tokenize/pack/loss, LoRA checkpoints, learning, resume, SIGTERM."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("art")
pytest.importorskip("peft")

from episodes.codec import encode_choice  # noqa: E402
from episodes.run_records import RunState  # noqa: E402
from episodes.store import EpisodeStore  # noqa: E402
from training.backends.base import BackendConfig, BackendUnavailable, checkpoint_steps, make_backend  # noqa: E402
from training.data.groups import Group, Trajectory  # noqa: E402
from training.scenarios.base import toy_scenarios  # noqa: E402
from training.scenarios.rollout import rollout_groups  # noqa: E402
from training.scenarios.toy import toy_tasks  # noqa: E402
from training.worker.config import WorkerConfig  # noqa: E402
from training.worker.loop import train  # noqa: E402
from training.worker.outcome import StopReason, WorkerError  # noqa: E402
from training.worker.status import read_status  # noqa: E402

ROOT = Path(__file__).parents[3]


def test_one_real_grpo_step_in_art_layout(tmp_path: Path) -> None:
    backend = make_backend(BackendConfig(path=tmp_path / "art"))
    assert backend.start() == 0
    task = toy_tasks()[0]
    choices = backend.sample(task.messages, n=8, max_tokens=10, seed=1)
    assert len(choices) == 8 and all(c.logprobs.content for c in choices)
    assert all(c.logprobs.content[0].token.startswith("token_id:") for c in choices)
    group = Group(
        key="g",
        trajectories=[
            Trajectory([*task.messages, encode_choice(c)], reward=i % 2, policy_step=0) for i, c in enumerate(choices)
        ],
    )
    before = {n: p.detach().clone() for n, p in backend.model.named_parameters() if p.requires_grad}
    result = backend.train([group])
    assert result.step == 1
    # ART re-tokenized our choices onto the exact sampled tokens: recomputed logprobs match.
    assert result.metrics["losses/max_logprob_drift"] < 1e-4
    assert result.metrics["perf/trainable_tokens"] > 0
    changed = [n for n, p in backend.model.named_parameters() if p.requires_grad and not torch.equal(p, before[n])]
    assert changed, "the optimizer step changed no trainable parameter"
    ckpt = tmp_path / "art" / "rlide" / "models" / "student" / "checkpoints" / "0001"
    assert (ckpt / "adapter_model.safetensors").exists() and (ckpt / "adapter_config.json").exists()
    # A scenario whose prompt leaves the policy no room to answer is set aside; the others go on.
    toy = toy_scenarios()[0]
    too_long = dataclasses.replace(toy, id="too-long", messages=({"role": "user", "content": "word " * 1100},))
    rollouts = rollout_groups(backend, [toy, too_long], run="r", step=1, groups=2, group_size=2, max_tokens=4)
    assert [g.metadata["scenario"] for g in rollouts.groups] == [toy.id]
    assert list(rollouts.unavailable) == ["too-long"]
    assert "maximum context length is 1024 tokens" in rollouts.unavailable["too-long"]
    backend.close()


def test_toy_reward_rises_then_a_restart_resumes_at_the_committed_step(tmp_path: Path) -> None:
    cfg = WorkerConfig(
        database_url=str(tmp_path / "ep.db"),
        backend=BackendConfig(path=tmp_path / "art", seed=0),
        max_steps=8,
        plot_path=tmp_path / "reward.png",
    )
    report = train(cfg, daemon=True)
    rewards = report.rewards
    assert report.stop_reason is StopReason.max_steps and report.step == 8 and len(rewards) == 8
    first, last = sum(rewards[:2]) / 2, sum(rewards[-2:]) / 2
    assert last > 0.15 and last > 3 * first, f"reward did not rise: {rewards}"
    assert (tmp_path / "reward.png").stat().st_size > 1000

    # A crash after a checkpoint was saved but before the log committed it: the restart forgets it.
    model_dir = cfg.backend.model_dir()
    shutil.copytree(model_dir / "checkpoints" / "0008", model_dir / "checkpoints" / "0009")
    cfg.max_steps = 1
    resumed = train(cfg, once=True)
    assert (resumed.start_step, resumed.step) == (8, 9)
    assert checkpoint_steps(model_dir)[-1] == 9
    store = EpisodeStore.open(cfg.database_url)
    status = read_status(store, "default")
    assert status.step == 9 and [s.step for s in status.recent] == list(range(1, 10))
    store.close()


def test_sigterm_finishes_the_step_and_exits(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        from pathlib import Path
        from training.backends.base import BackendConfig
        from training.worker.loop import train
        from training.worker.config import WorkerConfig
        cfg = WorkerConfig(database_url={str(tmp_path / "ep.db")!r},
                           backend=BackendConfig(path=Path({str(tmp_path / "art")!r})), groups_per_step=2)
        report = train(cfg, daemon=True)
        print("STOP", report.stop_reason.value, report.step, flush=True)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        step = 0
        while time.monotonic() < deadline and step < 1:
            time.sleep(0.5)
            if (tmp_path / "ep.db").exists():
                try:
                    store = EpisodeStore.open(str(tmp_path / "ep.db"))
                    step = store.runs.get_run("default").step
                    store.close()
                except Exception:  # noqa: BLE001 - the run row may not exist yet
                    step = 0
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert step >= 1, "the worker trained no step in time"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    stop_line = next(line for line in out.splitlines() if line.startswith("STOP"))
    _, reason, final_step = stop_line.split()
    assert reason == "signal"
    store = EpisodeStore.open(str(tmp_path / "ep.db"))
    run = store.runs.get_run("default")
    assert run.state is RunState.stopped and run.step == int(final_step)
    assert checkpoint_steps(BackendConfig(path=tmp_path / "art").model_dir())[-1] == run.step
    store.close()


def test_sft_on_exported_records_lowers_the_loss(tmp_path: Path) -> None:
    import io
    import json

    from tests.logdata import external_episode
    from training.backends.cpu import sft_example
    from training.data.export import export

    store = EpisodeStore.open(str(tmp_path / "ep.db"))
    for i in range(3):
        external_episode(store, f"make the parser accept comments #{i}", 1.0)
    out = io.StringIO()
    assert export(store, "sft", None, out) == 3
    store.close()
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    # The tiny model's default rate (2e-2) is for GRPO's few short steps; on these conversations
    # (all of rlide's tool schemas in the prompt) Adam spikes with it (5.8 -> 3.5, then 11.9 at
    # step 7, 3.9 again by step 10), and where the spike falls moves with the tool schemas' text.
    # At 5e-3 the loss falls steadily.
    backend = make_backend(BackendConfig(path=tmp_path / "art", max_seq_len=4096, learning_rate=5e-3))
    backend.start()
    ids, labels = sft_example(backend.tokenizer, records[0]["messages"], records[0].get("tools"))
    learned = backend.tokenizer.decode([t for t, lab in zip(ids, labels, strict=True) if lab != -100])
    assert "search_code" in learned and "done: make the parser" in learned  # tool calls and the answer
    assert "config.py:12" not in learned  # tool results are context, not targets
    losses = [backend.train_sft(records).metrics["losses/sft_loss"] for _ in range(8)]
    assert losses[-1] < losses[0] * 0.8, losses
    assert checkpoint_steps(BackendConfig(path=tmp_path / "art").model_dir())[-1] == len(losses)
    backend.close()


def test_the_worker_takes_a_real_sft_step_on_external_successes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from typer.testing import CliRunner

    from mcp_server.cli.app import app
    from tests.logdata import external_episode

    db = tmp_path / "ep.db"
    store = EpisodeStore.open(str(db))
    for i in range(2):
        external_episode(store, f"make the parser accept comments #{i}", 1.0)
    external_episode(store, "a failed attempt", -1.0)
    too_long = external_episode(store, "make the parser accept " + "nested " * 3000 + "comments", 1.0)
    store.close()
    backend = BackendConfig(path=tmp_path / "art", max_seq_len=4096)
    cfg = WorkerConfig(database_url=str(db), backend=backend, scenarios=None, plot_path=None)

    report = train(cfg, once=True)
    assert (report.sft_steps, report.sft_episodes, report.steps_trained, report.step) == (1, 2, 1, 1)
    assert checkpoint_steps(backend.model_dir()) == [1]
    store = EpisodeStore.open(str(db))
    [record] = store.runs.training_steps("default")
    assert record.metrics["losses/sft_loss"] > 0 and record.metrics["perf/trainable_tokens"] > 0
    assert record.metrics["charts/sft_episodes"] == 2
    assert store.runs.sft_candidates("default", min_reward=cfg.sft_min_reward, limit=10) == []
    store.close()

    # A restart resumes at the committed step and finds every success already imitated.
    report = train(cfg, once=True)
    assert (report.steps_trained, report.step) == (0, 1) and checkpoint_steps(backend.model_dir()) == [1]

    monkeypatch.setenv("RLIDE_DATABASE_URL", f"sqlite:///{db}")
    shown = CliRunner().invoke(app, ["train", "status", "--json"])
    assert shown.exit_code == 0, shown.output
    status = json.loads(shown.stdout)
    assert (status["sft_steps"], status["sft_episodes_trained"], status["step"]) == (1, 2, 1)
    # The over-long success was set aside with its reason, which status shows.
    assert status["sft_episodes_unusable"] == 1
    assert status["sft_latest_unusable"].startswith(f"{too_long}: ")
    assert "longer than max_seq_len=4096" in status["sft_latest_unusable"]
    assert [p["algorithm"] for p in status["recent"]] == ["sft"]
    text = CliRunner().invoke(app, ["train", "status"]).stdout
    steps = [line for line in text.splitlines() if "charts over steps: tensorboard --logdir " not in line]
    assert "sft steps 1 on 2 external episodes" in text and "sft " in steps[-1]
    assert "set aside: 1 episode(s): " in text


def test_the_worker_trains_on_a_human_preference_before_the_rewards(tmp_path: Path) -> None:
    """A person preferred the attempt the rewards rank lower: the worker's first DPO step (one pair
    a step) trains on the person's pair, the reversed reward pair is never trained."""
    from episodes.records import EpisodeStatus, Verdict
    from tests.logdata import external_episode

    db = tmp_path / "ep.db"
    store = EpisodeStore.open(str(db))
    task = "make the parser accept comments"
    high = external_episode(store, task, 1.0)
    low = external_episode(store, task, -1.0, status=EpisodeStatus.failure)
    other = external_episode(store, task, -0.5, status=EpisodeStatus.failure)
    store.preferences.prefer(high, low, Verdict.b, author="ana", comment="the passing fix deletes the test")
    store.close()
    backend = BackendConfig(path=tmp_path / "art", max_seq_len=4096)
    cfg = WorkerConfig(database_url=str(db), backend=backend, scenarios=None, plot_path=None, sft_batch=0, dpo_batch=1)

    assert train(cfg, once=True).dpo_steps == 1
    store = EpisodeStore.open(str(db))
    assert store.runs.dpo_used("default") == {(low, high)}
    store.close()
    assert train(cfg, once=True).dpo_steps == 1
    store = EpisodeStore.open(str(db))
    assert store.runs.dpo_used("default") == {(low, high), (high, other)}
    store.close()


def test_the_worker_imitates_the_view_it_is_told_to(tmp_path: Path) -> None:
    """One SFT step per view on the same two successes: the answer view trains on the final answers
    only (fewer tokens than the whole trace, which also holds every tool call)."""
    from tests.logdata import external_episode

    tokens = {}
    for view in ("trace", "answer"):
        db = tmp_path / f"{view}.db"
        store = EpisodeStore.open(str(db))
        for i in range(2):
            external_episode(store, f"make the parser accept comments #{i}", 1.0)
        store.close()
        backend = BackendConfig(path=tmp_path / view, max_seq_len=4096)
        cfg = WorkerConfig(database_url=str(db), backend=backend, scenarios=None, plot_path=None, sft_view=view)
        report = train(cfg, once=True)
        assert (report.sft_steps, report.sft_episodes) == (1, 2)
        store = EpisodeStore.open(str(db))
        [record] = store.runs.training_steps("default")
        store.close()
        tokens[view] = record.metrics["perf/trainable_tokens"]
    assert 0 < tokens["answer"] < tokens["trace"]


def test_the_worker_takes_a_real_dpo_step_on_pairs_of_logged_episodes(tmp_path: Path) -> None:
    """Two episodes of one task, rewards 2 apart: with DPO on, one preference step on that pair,
    committed with it; the next pass finds the pair used and trains nothing."""
    from episodes.records import EpisodeStatus
    from tests.logdata import external_episode

    db = tmp_path / "ep.db"
    store = EpisodeStore.open(str(db))
    chosen = external_episode(store, "make the parser accept comments", 1.0)
    rejected = external_episode(store, "make the parser accept comments", -1.0, status=EpisodeStatus.failure)
    store.close()
    backend = BackendConfig(path=tmp_path / "art", max_seq_len=4096)
    cfg = WorkerConfig(database_url=str(db), backend=backend, scenarios=None, plot_path=None, sft_batch=0, dpo_batch=4)

    report = train(cfg, once=True)
    assert (report.dpo_steps, report.dpo_pairs, report.step) == (1, 1, 1)
    store = EpisodeStore.open(str(db))
    [record] = store.runs.training_steps("default")
    assert record.metrics["losses/dpo_loss"] == pytest.approx(0.6931, abs=1e-3)  # policy = reference at first
    assert store.runs.dpo_used("default") == {(chosen, rejected)}
    status = read_status(store, "default")
    assert (status.dpo_steps, status.dpo_pairs_trained) == (1, 1)
    assert [p.algorithm for p in status.recent] == ["dpo"]
    store.close()

    report = train(cfg, once=True)
    assert (report.steps_trained, report.step) == (0, 1)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_two_runs_side_by_side_keep_their_own_checkpoints_and_settings(tmp_path: Path) -> None:
    """Each run trains in a directory of its own: a second run never rolls back, overwrites or loads the
    first one's checkpoints; a run resumed with other settings, or whose backend cannot start, is
    refused with what to do, and a failed start records no run."""

    def config(run: str, **backend: object) -> WorkerConfig:
        return WorkerConfig(
            database_url=str(tmp_path / "ep.db"),
            backend=BackendConfig(path=tmp_path / "art", **backend),  # type: ignore[arg-type]
            run=run,
            max_steps=1,
            groups_per_step=2,
        )

    first = config("first")
    assert train(first, once=True).step == 1
    first_dir = first.backend.model_dir()
    assert first_dir == tmp_path / "art" / "rlide" / "models" / "student-first"
    before = _files(first_dir)
    assert "checkpoints/0001/adapter_model.safetensors" in before
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    charts = EventAccumulator(str(first_dir / "tensorboard"))
    charts.Reload()  # the committed step's figures, for `tensorboard --logdir`
    assert {"reward/mean", "losses/policy_loss", "charts/groups_trained"} <= set(charts.Tags()["scalars"])
    assert [point.step for point in charts.Scalars("reward/mean")] == [1]

    second = config("second")
    assert train(second, once=True).step == 1  # its own step 0, not the other run's step 1
    assert checkpoint_steps(second.backend.model_dir()) == [1]
    assert _files(first_dir) == before  # untouched, byte for byte

    with pytest.raises(WorkerError, match=r"started with lora_rank 8 \(not 16\).*--run first-2"):
        train(config("first", lora_rank=16), once=True)
    with pytest.raises(BackendUnavailable):
        train(config("gpu", backend="local"), once=True)
    store = EpisodeStore.open(first.database_url)
    try:
        assert store.runs.identity("gpu") is None  # a failed start pins no backend or base model
        assert store.runs.get_run("first").step == 1
        assert store.runs.identity("first") == first.backend.identity()
    finally:
        store.close()
    assert _files(first_dir) == before
    with pytest.raises(ValueError, match="run name"):
        config("../elsewhere")
    cli = WorkerConfig.for_home(tmp_path, first.database_url, run="first", lora_rank=4)  # as `rlide train` builds it
    assert (cli.run, cli.backend.run, cli.backend.lora_rank, cli.backend.model_dir()) == (
        "first",
        "first",
        4,
        first_dir,
    )


def test_checkpoints_trained_with_another_log_are_refused_not_rolled_back(tmp_path: Path) -> None:
    """A run's checkpoint folder met with a new episode log, or a copy of its log from two steps back,
    would be rolled back to that log's step, deleting the checkpoints: the worker refuses, says why,
    and changes nothing. One step ahead is a commit a crash cut off, and is still rolled back."""

    def config(log: str) -> WorkerConfig:
        return WorkerConfig(
            database_url=str(tmp_path / log), backend=BackendConfig(path=tmp_path / "art"), run="r", groups_per_step=2
        )

    trained = config("ep.db")
    assert train(trained, once=True).step == 1
    shutil.copy(tmp_path / "ep.db", tmp_path / "step1.db")
    assert train(trained, once=True).step == 2
    assert train(trained, once=True).step == 3
    folder = trained.backend.model_dir()
    before = _files(folder)
    with pytest.raises(WorkerError, match=r"checkpoints up to step 3, but this episode log has no run 'r'"):
        train(config("new.db"), once=True)
    with pytest.raises(WorkerError, match=r"this episode log is at step 1: they were trained past it"):
        train(config("step1.db"), once=True)
    assert _files(folder) == before
    store = EpisodeStore.open(str(tmp_path / "new.db"))
    try:
        assert store.runs.identity("r") is None  # the refused start recorded no run
    finally:
        store.close()
    shutil.copy(tmp_path / "ep.db", tmp_path / "step3.db")
    assert train(trained, once=True).step == 4
    crashed = config("step3.db")  # the log lost step 4's commit: its checkpoint is rolled back
    assert train(crashed, once=True).step == 4
    assert checkpoint_steps(folder) == [1, 2, 3, 4]


def test_gradient_checkpointing_takes_the_same_step_and_turns_on_for_long_sequences(tmp_path: Path) -> None:
    """Recomputing activations in the backward pass changes memory, not the step: the same SFT and
    GRPO steps give the same losses and the same adapter with it on and off; left to rlide (None), it
    is on for a step whose longest sequence passes CHECKPOINTING_FROM_TOKENS, off below."""
    import torch

    from training.backends.cpu import CHECKPOINTING_FROM_TOKENS

    conversation = {
        "messages": [{"role": "user", "content": "count " * 40}, {"role": "assistant", "content": "1 2 3 4 5 6"}]
    }
    [task] = toy_scenarios()[:1]

    def steps(checkpointing: bool | None, folder: str) -> tuple[Any, list[float], dict[str, torch.Tensor]]:
        backend = make_backend(BackendConfig(path=tmp_path / folder, gradient_checkpointing=checkpointing, seed=3))
        backend.start()
        losses = [backend.train_sft([conversation]).metrics["losses/sft_loss"]]
        messages = list(task.messages)
        choices = backend.sample(messages, n=2, max_tokens=6, temperature=1.0, seed=1)
        trajectories = [
            Trajectory([*messages, encode_choice(c)], reward=float(i), policy_step=1) for i, c in enumerate(choices)
        ]
        losses.append(backend.train([Group(key="g", trajectories=trajectories)]).metrics["losses/policy_loss"])
        weights = {k: v.detach().clone() for k, v in backend.model.named_parameters() if v.requires_grad}
        return backend, losses, weights

    off, off_losses, off_weights = steps(False, "off")
    on, on_losses, on_weights = steps(True, "on")
    assert on._checkpointing and not off._checkpointing
    assert on_losses == pytest.approx(off_losses, rel=1e-4, abs=1e-6)
    assert on_weights.keys() == off_weights.keys()
    for name, value in on_weights.items():
        torch.testing.assert_close(value, off_weights[name], rtol=1e-4, atol=1e-6, msg=name)
    off.close()
    on.close()

    auto = make_backend(BackendConfig(path=tmp_path / "auto", max_seq_len=4 * CHECKPOINTING_FROM_TOKENS))
    auto.start()
    auto.train_sft([conversation])
    assert not auto._checkpointing  # short: activations are small, keep the speed
    words = "count " * (CHECKPOINTING_FROM_TOKENS // 2)  # about 2,000 tokens of the tiny tokenizer
    long = {"messages": [{"role": "user", "content": words}, conversation["messages"][1]]}
    auto.train_sft([long])
    assert auto._checkpointing
    auto.train_sft([conversation])
    assert not auto._checkpointing
    auto.close()
