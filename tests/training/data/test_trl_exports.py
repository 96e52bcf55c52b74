"""rlide's `sft` and `dpo` exports train with TRL itself: one `SFTTrainer` and one `DPOTrainer` step
on a tiny model, in TRL's own environment (`.venv-trl`, made by scripts/setup_trl.sh)."""

from __future__ import annotations

import io
import json
import math
import subprocess
from pathlib import Path

import pytest

from episodes.records import EpisodeStatus
from episodes.store import EpisodeStore
from tests.logdata import external_episode
from training.data.export import export

ROOT = Path(__file__).resolve().parents[3]
TRL_PYTHON = ROOT / ".venv-trl" / "bin" / "python"

pytestmark = pytest.mark.skipif(
    not TRL_PYTHON.is_file(), reason="no TRL environment: bash scripts/setup_trl.sh makes .venv-trl"
)


def test_sft_and_dpo_exports_take_a_trl_step(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from training.backends.tiny import ensure_base

    store = EpisodeStore.open(str(tmp_path / "ep.db"))
    for task in ("make the parser accept comments", "rename the config loader"):
        external_episode(store, task, 1.0)
        external_episode(store, task, -1.0, status=EpisodeStatus.failure)
    files = {}
    for fmt in ("sft", "dpo"):
        out = io.StringIO()
        assert export(store, fmt, None, out) == 2
        files[fmt] = tmp_path / f"{fmt}.jsonl"
        files[fmt].write_text(out.getvalue())
    store.close()
    assert all("tools" in json.loads(line) for line in files["sft"].read_text().splitlines())
    model = ensure_base(tmp_path / "model")

    done = subprocess.run(
        [str(TRL_PYTHON), str(Path(__file__).with_name("trl_step.py")), str(model), str(files["sft"]),
         str(files["dpo"]), str(tmp_path / "trl")],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for fmt in ("sft", "dpo"):
        assert result[fmt]["steps"] == 1 and result[fmt]["examples"] == 2, result
        assert result[fmt]["finite"] and result[fmt]["loss"] > 0, result
    # A DPO step from a policy equal to its reference starts at log 2.
    assert math.isclose(result["dpo"]["loss"], math.log(2), abs_tol=0.05), result
