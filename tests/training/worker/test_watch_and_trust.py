"""Training a person can watch and trust (issue 36): `rlide train` says what it is doing as it goes,
Ctrl-C says what it interrupted and what it kept, a killed worker shows as gone (not `training`) in
`rlide train status` and the MCP `training_status` tool, a pass that trains nothing says why in one
line, and a first try on CPU is sized for CPU. The real CLI as a subprocess (real signals), the real
tiny model, a real MCP client."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the training extra is not installed")

from mcp import Client  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from episodes.store import EpisodeStore  # noqa: E402
from mcp_server.cli.app import app  # noqa: E402
from mcp_server.dashboard.app import guarded_app  # noqa: E402
from mcp_server.server import build_server  # noqa: E402
from mcp_server.settings import load_settings  # noqa: E402
from tests.logdata import external_episode  # noqa: E402
from tests.mcp_calls import call_ok  # noqa: E402
from training.backends.base import BackendConfig, checkpoint_steps  # noqa: E402
from training.worker.config import WorkerConfig  # noqa: E402

runner = CliRunner()
LONG_PASS = ["--group-size", "16", "--groups-per-step", "4", "--max-tokens", "256"]
"""Four batches of sampling for the tiny model: a pass busy sampling when the signal comes."""
SAMPLING = r"rlide train: sampling: 16 rollouts of up to 256 tokens, 0/64 done"
"""Said as the first batch starts: from here until the batches end, the worker is sampling."""


def _ctrl_c_as_a_terminal_sends_it() -> None:
    """SIGINT back to its default in the child: a suite started in the background by a
    non-interactive shell (`cmd &`, as CI harnesses do) inherits it ignored, and then no Ctrl-C
    reaches `rlide train` (it finished its pass, exit 0)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _train(rlide_exe: Path, *args: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """`rlide train ARGS` in the background, its stdout and stderr in files."""
    out, err = tmp_path / "train.out", tmp_path / "train.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [str(rlide_exe), "train", *args], stdout=stdout, stderr=stderr, preexec_fn=_ctrl_c_as_a_terminal_sends_it
        )
    return proc, out, err


def _wait_for(path: Path, pattern: str, proc: subprocess.Popen[bytes], timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace")
        if re.search(pattern, text):
            return text
        assert proc.poll() is None, f"exited {proc.returncode} before {pattern!r}: {text[-3000:]}"
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"{pattern!r} not seen: {path.read_text(errors='replace')[-3000:]}")


def _status_cli() -> dict[str, Any]:
    shown = runner.invoke(app, ["train", "status", "--json"])
    assert shown.exit_code == 0, shown.output
    status: dict[str, Any] = json.loads(shown.stdout)
    return status


async def _status_mcp() -> dict[str, Any]:
    async with Client(build_server(load_settings()), mode="legacy") as client:
        return await call_ok(client, "training_status", {})


def _dashboard_runs() -> dict[str, Any]:
    """The dashboard's runs list (its run page reads `_status_mcp`'s status), by run name."""
    with TestClient(guarded_app(load_settings()), base_url="http://127.0.0.1:8765") as http:
        return {run["name"]: run for run in http.get("/api/training").json()["runs"]}


def _model_dir() -> Path:
    return BackendConfig(path=load_settings().home / "art").model_dir()


@pytest.mark.timeout(900)  # two real `rlide train` processes on a shared 2-core machine
@pytest.mark.anyio
async def test_ctrl_c_says_what_it_interrupted_and_kept_and_the_status_is_not_training(
    rlide_exe: Path, tmp_path: Path
) -> None:
    first = subprocess.run([str(rlide_exe), "train", "--once", "--group-size", "4"], capture_output=True, timeout=600)
    said = first.stderr.decode(errors="replace")
    assert first.returncode == 0, said[-3000:]
    assert json.loads(first.stdout)["step"] == 1
    # Progress as it goes: rollouts of the total, tokens/s, the optimizer step and its loss, and
    # where TensorBoard reads the run's metrics.
    assert re.search(r"rollouts 4/16 sampled \(\d+ tokens in [\d.]+s, [\d.]+ tok/s, about \d+s of sampling left", said)
    assert re.search(r"rollouts 16/16 sampled", said), said
    assert re.search(r"optimizer step 1 \(grpo\) done in [\d.]+s: loss -?[\d.]+", said), said
    board = _model_dir() / "tensorboard"
    assert f"tensorboard --logdir {board}" in said

    proc, out, err = _train(rlide_exe, "--once", *LONG_PASS, tmp_path=tmp_path)
    _wait_for(err, SAMPLING, proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    said = err.read_text(errors="replace")
    [line] = [ln for ln in said.splitlines() if "interrupted by Ctrl-C" in ln]
    kept_under = re.escape(str(_model_dir()))
    assert re.fullmatch(
        r"rlide train: interrupted by Ctrl-C while sampling for step 2, which was not kept; kept: 0"
        rf" step\(s\) trained by this command; the run is at step 1 \(its checkpoint under {kept_under}\)",
        line,
    ), line
    assert "Traceback" not in said
    report = json.loads(out.read_text())
    assert (report["stop_reason"], report["step"]) == ("interrupted", 1)
    assert checkpoint_steps(_model_dir()) == [1]

    for status in (_status_cli(), await _status_mcp()):
        assert status["state"] == "stopped" and status["step"] == 1, status
        assert status["message"].startswith("interrupted by Ctrl-C while "), status
        assert status["worker_alive"] is False and status["worker_pid"] == proc.pid
        assert status["tensorboard"] == f"tensorboard --logdir {board}"
    human = runner.invoke(app, ["train", "status"]).stdout
    assert human.startswith("run default: stopped at step 1") and f"tensorboard --logdir {board}" in human


@pytest.mark.timeout(900)
@pytest.mark.anyio
async def test_a_killed_worker_shows_as_gone_not_training(rlide_exe: Path, tmp_path: Path) -> None:
    proc, _, err = _train(rlide_exe, "--daemon", *LONG_PASS, tmp_path=tmp_path)
    _wait_for(err, SAMPLING, proc)
    # While it lives: training, its pid, and what it is doing (the counts as they go: the Ctrl-C test).
    for status in (_status_cli(), await _status_mcp()):
        assert status["state"] == "training" and status["worker_alive"] is True, status
        assert status["worker_pid"] == proc.pid
        progress = status["progress"]
        assert progress["pid"] == proc.pid and progress["phase"] == "sampling"
        assert progress["rollouts_total"] == 64 and progress["step"] == 0
    human = runner.invoke(app, ["train", "status"]).stdout
    assert f"worker pid {proc.pid}: " in human and "/64 sampled" in human
    assert _dashboard_runs()["default"]["state"] == "training"

    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    for status in (_status_cli(), await _status_mcp()):
        assert status["state"] == "stopped" and status["worker_alive"] is False, status
        assert status["message"].startswith(f"stopped (process {proc.pid} gone): the log last said training")
        assert status["progress"] is None
    listed = _dashboard_runs()["default"]
    assert listed["state"] == "stopped" and listed["message"].startswith(f"stopped (process {proc.pid} gone)")
    human = runner.invoke(app, ["train", "status"]).stdout
    assert human.startswith("run default: stopped at step 0")
    assert f"stopped (process {proc.pid} gone)" in human


def test_a_pass_that_trains_nothing_says_why_in_one_line(tmp_path: Path) -> None:
    """Both ways the testers' pass trained nothing: every external episode longer than max_seq_len,
    and GRPO groups whose rollouts all got the same reward (greedy sampling: every rollout equal)."""
    store = EpisodeStore.open(load_settings().episode_db_url)
    for i in range(2):
        external_episode(store, f"make the parser accept comments #{i}", 1.0)
    store.close()
    done = runner.invoke(
        app,
        ["train", "--once", "--max-seq-len", "64", "--temperature", "0", "--group-size", "2", "--groups-per-step", "2"],
    )
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["steps_trained"] == 0
    line = report["nothing_trained"]
    assert re.search(
        r"^nothing trained: 0 of 2 external episodes fit max_seq_len 64 \(longest [\d,]+ tokens\): raise"
        r" --max-seq-len \(to \d+ to take them all.*--sft-view answer; 0 of 2 GRPO groups had reward variance"
        r" \(2 had equal rewards for every rollout\): raise --group-size or --temperature",
        line,
    ), line
    assert f"rlide train: {line}" in done.stderr.splitlines()
    assert _status_cli()["message"] == line


def test_a_run_keeps_its_base_model_and_a_refusal_names_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's folder and the log remember its base model; a later `train` without --base-model uses
    it (whatever RLIDE_TRAINING_BASE_MODEL says now), and only an option that asks for another is
    refused, in words that name that option."""
    first = runner.invoke(app, ["train", "--once", "--group-size", "2", "--groups-per-step", "1"])
    assert first.exit_code == 0, first.output
    assert json.loads((_model_dir() / "run.json").read_text())["base_model"] == "tiny-qwen2"

    monkeypatch.setenv("RLIDE_TRAINING_BASE_MODEL", "smollm2-135m-instruct")
    again = runner.invoke(app, ["train", "--once", "--group-size", "2", "--groups-per-step", "1"])
    assert again.exit_code == 0, again.output
    assert "note: run 'default' keeps the base model it was started with, 'tiny-qwen2' (recorded in the" in (
        again.stderr
    )
    refused = runner.invoke(app, ["train", "--once", "--base-model", "smollm2-135m-instruct"])
    assert refused.exit_code == 1
    [line] = refused.stderr.splitlines()
    assert "its base model 'tiny-qwen2' (--base-model asks for 'smollm2-135m-instruct')" in line
    assert "to resume it, leave --base-model out" in line and "RLIDE_TRAINING_BASE_MODEL" not in line


def test_a_first_try_on_cpu_is_sized_for_cpu(tmp_path: Path) -> None:
    pretrained = WorkerConfig.for_home(tmp_path, "sqlite:///x.db", base_model="qwen2.5-coder-0.5b-instruct")
    assert (pretrained.group_size, pretrained.groups_per_step, pretrained.sft_batch) == (4, 2, 2)
    asked = WorkerConfig.for_home(
        tmp_path, "sqlite:///x.db", base_model="qwen2.5-coder-0.5b-instruct", group_size=8, groups_per_step=None
    )
    assert (asked.group_size, asked.groups_per_step) == (8, 2)
    tiny = WorkerConfig.for_home(tmp_path, "sqlite:///x.db", group_size=None, sft_batch=None)
    assert (tiny.group_size, tiny.groups_per_step, tiny.sft_batch) == (8, 4, 8)
    gpu = WorkerConfig.for_home(tmp_path, "sqlite:///x.db", backend="local", base_model="Qwen/Qwen2.5-7B-Instruct")
    assert (gpu.group_size, gpu.groups_per_step) == (8, 4)


def test_long_work_says_it_is_still_going(tmp_path: Path) -> None:
    """A phase with nothing new to count (an optimizer step, a batch being sampled) is not silent."""
    from training.worker.progress import Progress

    lines: list[str] = []
    seen = threading.Event()

    def sink(line: str) -> None:
        lines.append(line)
        if line.startswith("still optimizer step"):
            seen.set()

    progress = Progress(tmp_path, sink=sink, heartbeat_s=0.2)
    progress.begin("optimizer step", "sft step 1 on 2 external episodes")
    assert seen.wait(timeout=30), lines
    assert re.fullmatch(r"still optimizer step \(sft step 1 on 2 external episodes\): \d+s", lines[-1])
    on_disk = json.loads((tmp_path / "progress.json").read_text())
    assert on_disk["phase"] == "optimizer step" and on_disk["pid"] == os.getpid()
    progress.close()
    assert not (tmp_path / "progress.json").exists()
