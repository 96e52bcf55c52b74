"""The `rlide` CLI through its runner, against a real temporary episode log."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from episodes.records import EpisodeStatus, RewardSource
from episodes.store import EpisodeStore
from mcp_server.cli.app import app
from mcp_server.settings import load_settings

runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RLIDE_HOME", str(tmp_path))
    monkeypatch.delenv("RLIDE_DATABASE_URL", raising=False)
    monkeypatch.delenv("RLIDE_CONFIG", raising=False)
    return tmp_path


@pytest.fixture
def episode_id(home: Path) -> str:
    store = EpisodeStore.open(load_settings().episode_db_url)
    ep = store.start_episode("rename the config loader", client="cursor")
    store.add_step(
        ep.id, tool="search_code", arguments={"query": "config"}, result_summary="3 hits", error=None, duration_ms=4.2
    )
    store.add_reward(ep.id, RewardSource.feedback, 1.0, "nice", verified=True)
    store.end_episode(ep.id, EpisodeStatus.success, "renamed")
    store.start_episode("still going")
    store.close()
    return ep.id


def test_episodes_list_show_export(episode_id: str, tmp_path: Path) -> None:
    listed = runner.invoke(app, ["episodes", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [r["task"] for r in rows] == ["still going", "rename the config loader"]

    only = runner.invoke(app, ["episodes", "list", "--status", "success"])
    assert only.exit_code == 0 and episode_id in only.stdout and "still going" not in only.stdout

    shown = runner.invoke(app, ["episodes", "show", episode_id, "--json"])
    detail = json.loads(shown.stdout)
    assert detail["steps"][0]["tool"] == "search_code" and detail["rewards"][0]["value"] == 1.0

    human = runner.invoke(app, ["episodes", "show", episode_id])
    assert "search_code" in human.stdout and "reward feedback: +1.00" in human.stdout

    out = tmp_path / "export.jsonl"
    exported = runner.invoke(app, ["episodes", "export", "-o", str(out)])
    assert exported.exit_code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2 and {line["episode"]["id"] for line in lines} >= {episode_id}
    answers = runner.invoke(app, ["episodes", "export", "--format", "sft", "--view", "answer"])
    assert answers.exit_code == 0, answers.output
    [answer] = [json.loads(line) for line in answers.stdout.splitlines()]
    assert [m["role"] for m in answer["messages"]] == ["user", "assistant"]
    wrong = runner.invoke(app, ["episodes", "export", "--format", "dpo", "--view", "answer"])
    assert wrong.exit_code != 0 and "sft format only" in wrong.output

    # A multi-line task, error or comment stays on its item's one line.
    store = EpisodeStore.open(load_settings().episode_db_url)
    messy = store.start_episode("fix the loader\n\nit crashes on start", client="cursor")
    store.add_step(messy.id, tool="run_code", arguments={}, result_summary=None, error="one\ntwo", duration_ms=1)
    store.add_reward(messy.id, RewardSource.feedback, 0.5, "good\nbut slow", verified=True)
    store.close()
    shown_lines = runner.invoke(app, ["episodes", "show", messy.id]).stdout.splitlines()
    assert [line for line in shown_lines if line.startswith("  [")][0].endswith("ERROR one two")
    assert shown_lines[-2:] == ["  reward feedback: +0.50 good but slow", "reward: 0.5  verified"]
    listed_lines = runner.invoke(app, ["episodes", "list"]).stdout.splitlines()
    assert listed_lines[0].endswith("fix the loader it crashes on start") and len(listed_lines) == 3


def test_a_policy_episode_shows_its_turns(home: Path) -> None:
    from episodes.codec import encode_choice
    from episodes.policy_turns import EncodedTurn
    from episodes.records import EpisodeSource

    store = EpisodeStore.open(load_settings().episode_db_url)
    ep = store.start_episode("write a number", source=EpisodeSource.policy)
    choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "42"}, "logprobs": None}
    turn = EncodedTurn.of(
        model="student@3",
        request={"messages": [{"role": "user", "content": "a number?"}]},
        choice=encode_choice(choice),
        checkpoint_step=3,
        prompt_token_ids=[1, 2, 3, 4],
        completion_token_ids=[7, 8],
    )
    store.turns.add_policy_turn(ep.id, turn)
    store.close()
    human = runner.invoke(app, ["episodes", "show", ep.id])
    assert human.exit_code == 0, human.output
    assert "student@3  prompt 4 tokens, answer 2 tokens: '42'" in human.stdout
    [brief] = json.loads(runner.invoke(app, ["episodes", "show", ep.id, "--json"]).stdout)["policy_turns"]
    assert (brief["model"], brief["prompt_tokens"], brief["completion_tokens"], brief["answer"]) == (
        "student@3",
        4,
        2,
        "42",
    )
    [line] = runner.invoke(app, ["episodes", "list"]).stdout.splitlines()
    assert " steps=0    turns=1    reward=-" in line


def test_unknown_episode_fails_clearly(home: Path) -> None:
    result = runner.invoke(app, ["episodes", "show", "ep_nope"])
    assert result.exit_code == 1
    assert "no episode with id 'ep_nope'" in result.stderr and "rlide episodes list" in result.stderr


def test_doctor_reports_backends(home: Path) -> None:
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    checks = {(c["area"], c["name"]): c for c in report["checks"]}
    assert checks[("episode log", "sqlite")]["selected"] is True
    assert checks[("episode log", "open")]["ok"] is True
    assert "0002_episode_source" in checks[("episode log", "open")]["detail"]
    assert report["settings"]["home"] == str(home)


def test_doctor_finds_the_node_tools_that_setup_installed(home: Path) -> None:
    report = json.loads(runner.invoke(app, ["doctor", "--json"]).stdout)
    [inspector] = [c for c in report["checks"] if c["name"] == "mcp-inspector"]
    installed = Path(__file__).resolve().parents[2] / ".tools" / "node_modules" / ".bin" / "mcp-inspector"
    assert inspector["ok"] is installed.exists()
    if installed.exists():
        assert inspector["detail"] == str(installed)


def test_without_the_training_extra_doctor_notes_it_unless_training_was_chosen(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A core install (server, sandbox, search) is healthy without torch; one that asked for the cpu
    training backend is not."""
    from mcp_server.cli import doctor

    monkeypatch.setattr(doctor, "_has", lambda module: module not in {"torch", "art"})
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    [cpu] = [c for c in json.loads(result.stdout)["checks"] if (c["area"], c["name"]) == ("training", "cpu")]
    assert (cpu["ok"], cpu["selected"]) == (False, False)
    assert "not installed" in cpu["detail"] and "rlide[training]" in cpu["detail"]

    monkeypatch.setenv("RLIDE_TRAINING_BACKEND", "cpu")
    chosen = runner.invoke(app, ["doctor", "--json"])
    assert chosen.exit_code == 1
    [cpu] = [c for c in json.loads(chosen.stdout)["checks"] if (c["area"], c["name"]) == ("training", "cpu")]
    assert (cpu["ok"], cpu["selected"]) == (False, True)


def test_doctor_says_which_workspace_is_served(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()

    def workspace_check() -> dict[str, object]:
        result = runner.invoke(app, ["doctor", "--json"])
        assert result.exit_code == 0, result.output  # informational: a host starts the server elsewhere
        [check] = [c for c in json.loads(result.stdout)["checks"] if c["name"] == "workspace"]
        return check

    monkeypatch.setenv("RLIDE_WORKSPACE", str(project))
    served = workspace_check()
    assert (served["area"], served["ok"], served["detail"], served["selected"]) == (
        "memory",
        True,
        f"serves {project}",
        False,
    )
    monkeypatch.delenv("RLIDE_WORKSPACE")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    unserved = workspace_check()
    assert unserved["ok"] is False and "no workspace is served" in str(unserved["detail"])


def test_doctor_fails_on_an_unreachable_database(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLIDE_DATABASE_URL", "postgresql://u:pw@127.0.0.1:1/none")
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    opened = next(c for c in report["checks"] if c["name"] == "open")
    assert opened["ok"] is False and "cannot connect" in opened["detail"] and "pw@" not in json.dumps(report)


def test_settings_come_from_toml_and_env(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (home / "rlide.toml").write_text('http_port = 9100\nlog_level = "DEBUG"\n')
    assert load_settings().http_port == 9100 and load_settings().log_level == "DEBUG"
    monkeypatch.setenv("RLIDE_HTTP_PORT", "9200")
    assert load_settings().http_port == 9200  # the environment wins over the file
    (home / "rlide.toml").write_text("no_such_setting = 1\n")
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code != 0 and "no_such_setting" in result.output


def test_serve_refuses_a_public_bind_without_a_token(home: Path) -> None:
    result = runner.invoke(app, ["serve", "--http", "--host", "0.0.0.0", "--port", "1"])
    assert result.exit_code == 1 and "RLIDE_HTTP_TOKEN" in result.stderr


def test_install_prints_and_writes(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_home = tmp_path / "user"
    fake_home.mkdir()
    monkeypatch.setenv("HOME", str(fake_home))
    printed = runner.invoke(app, ["install", "cursor", "--print"])
    assert printed.exit_code == 0
    assert "serve" in json.loads(printed.stdout)["mcpServers"]["rlide"]["args"]
    planned = runner.invoke(app, ["install", "cursor", "--dry-run"])
    assert planned.exit_code == 0 and "rlide" in json.loads(planned.stdout)["mcpServers"]  # JSON alone on stdout
    assert "nothing written: would create" in planned.stderr and "created" not in planned.stdout
    assert not (fake_home / ".cursor" / "mcp.json").exists()
    first = runner.invoke(app, ["install", "cursor"])
    assert first.exit_code == 0 and first.stdout.startswith("created:")
    again = runner.invoke(app, ["install", "cursor"])
    assert again.stdout.startswith("unchanged:")
    bad = runner.invoke(app, ["install", "emacs"])
    assert bad.exit_code == 1 and "choose one of" in bad.stderr
    remote = runner.invoke(
        app, ["install", "cursor", "--url", "http://127.0.0.1:8765/mcp", "--header", "Authorization=Bearer ${env:T}"]
    )
    assert remote.exit_code == 0 and remote.stdout.startswith("updated:"), remote.output
    entry = json.loads((fake_home / ".cursor" / "mcp.json").read_text())["mcpServers"]["rlide"]
    assert entry == {"url": "http://127.0.0.1:8765/mcp", "headers": {"Authorization": "Bearer ${env:T}"}}
    for command, says in [
        (["install", "claude-desktop", "--url", "http://127.0.0.1:8765/mcp"], "Connectors"),
        (["install", "cursor", "--header", "A=b"], "--header needs --url"),
        (["install", "cursor", "--url", "http://h/mcp", "--header", "novalue"], "NAME=VALUE"),
    ]:
        refused = runner.invoke(app, command)
        assert refused.exit_code == 1 and says in refused.stderr, (command, refused.output)


def test_index_and_search_from_the_shell(home: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "reward.py").write_text(
        'def compute_reward(passed, total):\n    """Share of passing tests."""\n    return passed / total\n'
    )
    (ws / "other.py").write_text("def render_page(title):\n    return title.upper()\n")
    indexed = runner.invoke(app, ["index", str(ws), "--json"])
    assert indexed.exit_code == 0, indexed.output
    assert json.loads(indexed.stdout)["files_indexed"] == 2
    # stderr is not a terminal here: progress comes as whole lines, not carriage-return updates.
    progress = indexed.stderr.splitlines()
    assert "\r" not in indexed.stderr and progress[-1].startswith("ready: 2/2 files"), indexed.stderr
    pattern = r"[a-z]+: \d+/\d+ files, \d+ chunks, (\d+) embedded, (\d+) to go"
    assert all(re.fullmatch(pattern, line) for line in progress), progress
    last = re.fullmatch(pattern, progress[-1])
    assert last is not None and int(last[1]) >= 2 and last[2] == "0"  # the embedding phase is counted too
    found = runner.invoke(app, ["search", "where is the reward computed", "--workspace", str(ws), "-k", "1", "--json"])
    assert found.exit_code == 0, found.output
    [hit] = json.loads(found.stdout)
    assert set(hit) == {"path", "start_line", "end_line", "symbol", "relevance", "text"}
    assert (hit["path"], hit["start_line"], hit["end_line"]) == ("reward.py", 1, 3)


def test_index_json_stays_json_when_workers_log_and_they_skip_the_cli_imports(
    rlide_exe: Path, rlide_env: dict[str, str], workspace_a_worker_warns_about: Path
) -> None:
    # Python's own import profiler, inherited by the spawned index workers, lists every module each
    # process imports on the shared stderr: the CLI module must appear for the parent alone.
    env = {**os.environ, **rlide_env, "RLIDE_MEMORY_EMBEDDER": "none", "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(
        [str(rlide_exe), "index", str(workspace_a_worker_warns_about), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["files_indexed"] == 211
    assert "chunking.parse_failed" in done.stderr
    imported = [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert imported.count("memory.indexing.prepare") == 3  # the parent and its two workers
    assert imported.count("mcp_server.cli.app") == 1


def test_run_refuses_a_program_that_is_not_utf8(home: Path, tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.py"
    latin1.write_bytes(b"print('caf\xe9')\n")
    from_file = runner.invoke(app, ["run", str(latin1)])
    assert from_file.exit_code == 1 and "latin1.py is not UTF-8 text (invalid byte at offset 10)" in from_file.stderr
    from_stdin = runner.invoke(app, ["run", "-"], input=b"\xff\xfe")
    assert from_stdin.exit_code == 1 and "standard input is not UTF-8 text" in from_stdin.stderr


def test_paths_that_cannot_be_expanded_are_clear_errors(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unknown_user = "~no_such_user_rlide/project"
    indexed = runner.invoke(app, ["index", unknown_user])
    assert indexed.exit_code == 1 and isinstance(indexed.exception, SystemExit), indexed.exception
    assert "cannot be used as a path" in indexed.stderr
    for variable, value in [
        ("RLIDE_HOME", unknown_user),
        ("RLIDE_CONFIG", unknown_user),
        ("RLIDE_ALLOWED_ROOTS", "[1, 2"),  # not JSON
    ]:
        with monkeypatch.context() as env:
            env.setenv(variable, value)
            checked = runner.invoke(app, ["doctor"])
        assert checked.exit_code == 2 and isinstance(checked.exception, SystemExit), (variable, checked.exception)
        assert "invalid rlide settings" in checked.stderr, variable


def test_eval_reports_pass_at_1_of_the_current_policy(home: Path) -> None:
    pytest.importorskip("torch", reason="the training extra is not installed")
    result = runner.invoke(app, ["eval", "--limit", "2", "--max-tokens", "8"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["tasks"], report["split"], report["n"]) == ("humaneval", "heldout", 2)
    # Each task's verdict as it is judged, on stderr (stdout is the JSON report).
    done = [line for line in result.stderr.splitlines() if line.startswith(("rlide eval: 1/2 ", "rlide eval: 2/2 "))]
    assert len(done) == 2 and all("correct" in line and "solved so far" in line for line in done), result.stderr
    assert done[1].endswith(f"solved so far {report['passed']}/2")
    assert 0.0 <= report["pass_at_1"] <= 1.0 and report["passed"] + len(report["failed"]) == 2
    assert report["tasks_source"] == {"builtin": "humaneval"} and report["skipped_trained"] == []
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    charts = EventAccumulator(str(home / "art" / "rlide" / "models" / "student" / "tensorboard"))
    charts.Reload()  # beside the run's training curves, at the checkpoint evaluated
    [point] = charts.Scalars("eval/humaneval-heldout/pass@1")
    assert (point.step, point.value) == (report["checkpoint_step"], report["pass_at_1"])
    store = EpisodeStore.open(load_settings().episode_db_url)  # and in the log, for the dashboard's chart
    [kept] = store.runs.evals("default")
    store.close()
    assert (kept.tasks, kept.step, kept.pass_at_1, kept.report) == (
        "humaneval-heldout",
        report["checkpoint_step"],
        report["pass_at_1"],
        report,
    )
    bad = runner.invoke(app, ["eval", "--tasks", "mbpp"])
    assert bad.exit_code == 1 and "no task file at mbpp" in bad.stderr and "--tasks takes humaneval" in bad.stderr
    unlimited = runner.invoke(app, ["eval", "--answer-timeout", "0"])
    assert unlimited.exit_code == 2 and "--answer-timeout" in unlimited.stderr


def test_serve_and_eval_take_a_runs_own_model_and_settings(home: Path) -> None:
    """`--run` picks the run's checkpoint directory and the base model and hyperparameters it was
    started with, whatever the settings say now; a name that is no folder name is refused."""
    from mcp_server.cli.train import _backend_config

    settings = load_settings()
    store = EpisodeStore.open(settings.episode_db_url)
    store.runs.ensure_run("small", backend="cpu", base_model="smollm2-135m-instruct", identity={"lora_rank": 4})
    store.close()
    config = _backend_config(settings, "small")
    assert (config.run, config.base_model, config.lora_rank) == ("small", "smollm2-135m-instruct", 4)
    assert config.model_dir() == home / "art" / "rlide" / "models" / "student-small"
    fresh = _backend_config(settings, "new")
    assert (fresh.base_model, fresh.lora_rank) == (settings.training_base_model, 8)
    for command in (
        ["eval", "--run", "../other"],
        ["policy", "serve", "--run", "a/b"],
        ["train", "--once", "--run", ""],
    ):
        refused = runner.invoke(app, command)
        assert refused.exit_code == 2 and "run name" in refused.output, command


def test_eval_refuses_tasks_the_run_trained_on_before_loading_anything(home: Path) -> None:
    from mcp_server.cli.train import _backend_config
    from training.data.ledger import record_trained

    task = {
        "prompt": "def one():\n",
        "test": "def check(c):\n    assert c() == 1\n",
        "canonical_solution": "    return 1\n",
    }
    tasks = home / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"task_id": f"mine/{i}", "entry_point": "one", **task}) + "\n" for i in range(12)),
        encoding="utf-8",
    )
    model_dir = _backend_config(load_settings(), "default").model_dir()
    record_trained(model_dir, step=1, algorithm="sft", items=[(f"mine/{i}", []) for i in range(12)])
    refused = runner.invoke(app, ["eval", "--tasks", str(tasks)])
    assert refused.exit_code == 1, refused.output
    assert "trained on 12 of these 12 tasks (mine/0, mine/1," in refused.stderr and "and 2 more" in refused.stderr
    assert "--skip-trained" in refused.stderr
    assert not (model_dir / "base").exists()  # refused before the model loaded (the tiny one is made on first load)
    malformed = home / "bad.jsonl"
    malformed.write_text(tasks.read_text(encoding="utf-8") + '{"task_id": "x"}\n', encoding="utf-8")
    bad = runner.invoke(app, ["eval", "--tasks", str(malformed)])
    assert bad.exit_code == 1 and "line 13: field 'prompt': Field required" in bad.stderr
    split = runner.invoke(app, ["eval", "--tasks", str(tasks), "--split", "train"])
    assert split.exit_code == 1 and "a task file is evaluated whole" in split.stderr


def test_run_json_is_alone_on_stdout_when_the_sandbox_logs(
    rlide_exe: Path, rlide_env: dict[str, str], tmp_path: Path
) -> None:
    """A sandbox warning (here: the unsafe-local backend's; in the wild: a sandbox server dying) went
    to stdout before the JSON, since `rlide run` never configured logging."""
    program = tmp_path / "hello.py"
    program.write_text("print('hi')\n")
    done = subprocess.run(
        [str(rlide_exe), "run", "--json", str(program)],
        env={**os.environ, **rlide_env, "RLIDE_SANDBOX": "unsafe-local"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stdout"] == "hi\n"
    assert "sandbox.unsafe_local" in done.stderr


@pytest.mark.training
def test_training_commands_print_no_library_chatter(rlide_exe: Path, rlide_env: dict[str, str]) -> None:
    """Progress bars on every checkpoint and the libraries' FutureWarnings filled the worker's stderr
    (and its journal); rlide's own log lines remain."""
    env = {**os.environ, **rlide_env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY"):
        env.pop(name, None)
    done = subprocess.run(
        [str(rlide_exe), "train", "--once", "--scenarios", "toy"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["steps_trained"] == 1
    assert "it/s]" not in done.stderr and "FutureWarning" not in done.stderr, done.stderr[-2000:]
    assert "training_step" in done.stderr


def test_evaluation_during_training_keeps_the_best_checkpoint_which_eval_serves(home: Path) -> None:
    """`rlide train --eval-tasks` evaluates the policy after its steps, keeps the report in the log and
    the best checkpoint in `best.json`; `rlide eval --checkpoint best` evaluates that one, not the
    latest, and a checkpoint that does not exist is refused before anything loads."""
    pytest.importorskip("torch", reason="the training extra is not installed")
    train_once = ["train", "--once", "--eval-tasks", "humaneval", "--eval-every", "1", "--eval-limit", "2"]
    first = runner.invoke(app, train_once)
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    [evaluated] = report["evals"]
    assert (evaluated["step"], evaluated["tasks"], evaluated["n"]) == (1, "humaneval-heldout", 2)
    assert report["best_checkpoint"] == {
        "step": 1, "tasks": "humaneval-heldout", "pass_at_1": evaluated["pass_at_1"], "n": 2
    }  # fmt: skip
    assert any(
        line.startswith("rlide train: eval at step 1: humaneval-heldout pass@1") for line in first.stderr.splitlines()
    )
    second = json.loads(runner.invoke(app, train_once).stdout)
    [later] = second["evals"]
    best_step = 2 if later["pass_at_1"] > evaluated["pass_at_1"] else 1
    assert second["best_checkpoint"]["step"] == best_step
    store = EpisodeStore.open(load_settings().episode_db_url)
    assert sorted(e.step for e in store.runs.evals("default")) == [1, 2]  # the dashboard's chart reads them
    store.close()

    served = runner.invoke(app, ["eval", "--checkpoint", "best", "--limit", "1", "--max-tokens", "8"])
    assert served.exit_code == 0, served.output
    assert json.loads(served.stdout)["checkpoint_step"] == best_step
    latest = runner.invoke(app, ["eval", "--limit", "1", "--max-tokens", "8"])
    assert json.loads(latest.stdout)["checkpoint_step"] == 2
    missing = runner.invoke(app, ["eval", "--checkpoint", "7", "--limit", "1"])
    assert missing.exit_code == 1 and "has no checkpoint 7" in missing.stderr
    bad = runner.invoke(app, ["policy", "serve", "--checkpoint", "newest"])
    assert bad.exit_code == 1 and "--checkpoint takes latest, best or a step number" in bad.stderr


def test_best_is_refused_where_no_evaluation_recorded_one(home: Path) -> None:
    refused = runner.invoke(app, ["eval", "--checkpoint", "best", "--limit", "1"])
    assert (
        refused.exit_code == 1 and "no best checkpoint recorded" in refused.stderr and "--eval-tasks" in refused.stderr
    )
