"""Self-play on a scenario from the episode log, end to end: an external episode recorded through
the real store (first `run_tests` failed, a later one passed), then the worker on the real cpu
backend samples rollouts for it and the real bubblewrap sandbox verifies each one against the
workspace before the agent's fix. The tiny model writes noise, so every rollout fails: the group
has zero variance and is counted, not trained."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("art")
pytest.importorskip("peft")
if shutil.which("bwrap") is None:
    pytest.skip("bubblewrap missing: `make setup` installs it", allow_module_level=True)

from episodes.store import EpisodeStore  # noqa: E402
from tests.training.scenarios.test_log_scenarios import BROKEN, fixed_episode  # noqa: E402
from training.backends.base import BackendConfig  # noqa: E402
from training.scenarios.base import RunOutcome  # noqa: E402
from training.scenarios.sandbox_runner import SandboxRunner  # noqa: E402
from training.worker.config import WorkerConfig  # noqa: E402
from training.worker.loop import train  # noqa: E402
from training.worker.outcome import StopReason  # noqa: E402
from training.worker.status import read_status  # noqa: E402


class WatchedSandbox(SandboxRunner):
    """The real sandbox runner, keeping what each verification ran on and what came out."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[tuple[dict[str, str], str | None, RunOutcome]] = []

    def run_tests(self, **kw: Any) -> RunOutcome:
        outcome = super().run_tests(**kw)
        self.runs.append((dict(kw["files"]), kw["patch"], outcome))
        return outcome


def test_the_worker_practises_a_log_scenario_verified_in_the_sandbox(tmp_path: Path) -> None:
    db = tmp_path / "ep.db"
    store = EpisodeStore.open(str(db))
    episode = fixed_episode(store)
    store.close()
    cfg = WorkerConfig(
        database_url=str(db),
        backend=BackendConfig(path=tmp_path / "art"),
        scenarios="log",
        group_size=4,
        plot_path=None,
    )
    sandbox = WatchedSandbox()
    try:
        report = train(cfg, once=True, runner=sandbox, workspace_runner=sandbox)
    finally:
        sandbox.close()

    assert report.stop_reason is StopReason.once and report.sft_steps == 0
    assert report.rollouts == 4 and report.scenarios_unavailable == 0
    assert (report.groups_skipped_zero_variance, report.steps_trained, report.step) == (1, 0, 0)
    # The verifier ran the start state once (its failing tests are what a rollout must fix), then
    # each rollout: pytest in the sandbox, on the files before the fix.
    assert len(sandbox.runs) == 5 and sandbox.runs[0][1] is None
    for files, _patch, outcome in sandbox.runs:
        assert files == BROKEN
        assert not outcome.passed and "1 failed" in outcome.output and "assert -1 == 5" in outcome.output
        assert outcome.tests is not None and outcome.tests.report is not None
        assert outcome.tests.report.outcomes == {"test_calc.py::test_add": "failed"}
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
    store = EpisodeStore.open(str(db))
    fixed_episode(store)
    store.close()
    monkeypatch.setenv("RLIDE_DATABASE_URL", f"sqlite:///{db}")

    refused = CliRunner().invoke(app, ["train", "--once", "--scenarios", "humaneval,logs"])
    assert refused.exit_code == 1 and "unknown scenario set 'logs'" in refused.output

    done = CliRunner().invoke(app, ["train", "--once", "--scenarios", "log"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    # The CLI built the sandbox runner and handed it to the rollouts: the scenario was scored
    # (8 rollouts, the default group size), not skipped as unverifiable.
    assert (report["rollouts"], report["scenarios_unavailable"]) == (8, 0)
    assert (report["groups_skipped_zero_variance"], report["steps_trained"]) == (1, 0)
    shown = CliRunner().invoke(app, ["train", "status", "--json"])
    status = json.loads(shown.stdout)
    assert status["groups_skipped_zero_variance"] == 1 and status["scenarios_unavailable"] == 0
