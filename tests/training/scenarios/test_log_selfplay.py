"""Self-play on a scenario from the episode log, end to end: an external episode recorded as the MCP
server records one (its start state captured in a real git repository, the project's verifier
established by a run of it), then the worker on the real cpu backend samples rollouts for it and
the real bubblewrap sandbox verifies each one against the start state. The tiny model writes noise,
so every rollout fails: the group has zero variance and is counted, not trained."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("art")
pytest.importorskip("peft")
if shutil.which("bwrap") is None:
    pytest.skip("bubblewrap missing: `make setup` installs it", allow_module_level=True)

from envpool.sandbox.base import RunRequest, RunResult  # noqa: E402
from episodes.store import EpisodeStore  # noqa: E402
from tests.training.scenarios.test_replay_verifier import (  # noqa: E402
    BROKEN,
    CALC,
    START,
    calc_repo,
    recorded_episode,
)
from training.backends.base import BackendConfig  # noqa: E402
from training.scenarios.sandbox_runner import SandboxRunner  # noqa: E402
from training.worker.config import WorkerConfig  # noqa: E402
from training.worker.loop import train  # noqa: E402
from training.worker.outcome import StopReason  # noqa: E402
from training.worker.status import read_status  # noqa: E402


class WatchedSandbox(SandboxRunner):
    """The real sandbox runner, keeping what each verification ran on and what came out."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[tuple[RunRequest, RunResult]] = []

    def run(self, request: RunRequest) -> RunResult:
        result = super().run(request)
        self.runs.append((request, result))
        return result


def logged_episode(tmp_path: Path, db: Path) -> str:
    root = calc_repo(tmp_path / "calc-repo", committed={**START, "calc.py": CALC}, bug=BROKEN)
    store = EpisodeStore.open(str(db))
    runner = SandboxRunner()
    try:
        return recorded_episode(store, root, runner)
    finally:
        runner.close()
        store.close()


def test_the_worker_practises_a_log_scenario_verified_in_the_sandbox(tmp_path: Path) -> None:
    db = tmp_path / "ep.db"
    episode = logged_episode(tmp_path, db)
    cfg = WorkerConfig(
        database_url=str(db),
        backend=BackendConfig(path=tmp_path / "art"),
        scenarios="log",
        group_size=4,
        plot_path=None,
        sft_batch=0,  # the episode is a verified success: SFT would take the step
    )
    sandbox = WatchedSandbox()
    try:
        report = train(cfg, once=True, runner=sandbox, workspace_runner=sandbox)
    finally:
        sandbox.close()

    assert report.stop_reason is StopReason.once and report.sft_steps == 0
    assert report.rollouts == 4 and report.scenarios_unavailable == 0
    assert (report.groups_skipped_zero_variance, report.steps_trained, report.step) == (1, 0, 0)
    # A rollout without a diff is the start state (0 before anything runs); each one that ran, ran
    # pytest through rlide's runner on the start state's files.
    for request, result in sandbox.runs:
        assert request.files["calc.py"] == BROKEN and "rlide_run" not in request.files
        assert "RLIDE_RUNNER" in request.code and result.status.value in ("ok", "error")
    store = EpisodeStore.open(str(db))
    status = read_status(store)
    assert (status.groups_skipped_zero_variance, status.groups_trained, status.step) == (1, 0, 0)
    [key] = store.runs.consumed_groups("default")
    assert key == f"rollout:default:0.0:episode/{episode}"  # recorded, so a retry samples anew
    store.close()


def test_rlide_train_once_with_log_scenarios(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from mcp_server.cli.app import app

    db = tmp_path / "ep.db"
    logged_episode(tmp_path, db)
    monkeypatch.setenv("RLIDE_DATABASE_URL", f"sqlite:///{db}")

    refused = CliRunner().invoke(app, ["train", "--once", "--scenarios", "humaneval,logs"])
    assert refused.exit_code == 1 and "unknown scenario set 'logs'" in refused.output

    done = CliRunner().invoke(app, ["train", "--once", "--scenarios", "log", "--sft-batch", "0"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    # The CLI built the sandbox runner and handed it to the rollouts: the scenario was scored
    # (8 rollouts, the default group size), not skipped as unverifiable.
    assert (report["rollouts"], report["scenarios_unavailable"]) == (8, 0)
    assert (report["groups_skipped_zero_variance"], report["steps_trained"]) == (1, 0)
    shown = CliRunner().invoke(app, ["train", "status", "--json"])
    status = json.loads(shown.stdout)
    assert status["groups_skipped_zero_variance"] == 1 and status["scenarios_unavailable"] == 0
