"""`rlide train`, `rlide policy` and `rlide eval`: the training side of the command line.

These commands run in their own processes (the worker daemon, the policy endpoint), never in the
MCP server, so they may import the training extra (torch, ART) inside their bodies.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from mcp_server.cli.common import SftViewChoice, cli_settings, fail, open_store, visible
from mcp_server.settings import Settings

train_app = typer.Typer(
    help="Train the student model on the episode log (OpenPipe ART: GRPO on CPU or GPU).",
    invoke_without_command=True,
)
policy_app = typer.Typer(help="The OpenAI-compatible endpoint serving the latest checkpoint.", no_args_is_help=True)


RUN_HELP = "Training run (default: default): its own checkpoints, base model and hyperparameters."
UPSTREAM_HELP = (
    "An OpenAI-compatible server (vLLM) serving the run's model as student[-RUN]@STEP, instead of the run's"
    " own engine (a cpu run's checkpoint, or the server a GPU run's worker published)."
)


def _run_name(name: str) -> str:
    from training.backends.base import check_run_name

    try:
        return check_run_name(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


SETTING_SOURCES = {"backend": "RLIDE_TRAINING_BACKEND", "base_model": "RLIDE_TRAINING_BASE_MODEL"}
"""The settings behind the two values a run keeps that `rlide train` takes from the environment."""

IDENTITY_OPTIONS = {
    "base_model": "--base-model",
    "learning_rate": "--learning-rate",
    "lora_rank": "--lora-rank",
    "lora_targets": "--lora-targets",
    "dtype": "--dtype",
    "kl_penalty_coef": "--kl-coef",
}
"""`rlide train`'s option for each value a run keeps (`training.backends.base.IDENTITY`; the backend
has none: it comes from RLIDE_TRAINING_BACKEND)."""


def _run_identity(settings: Settings, run: str, asked: dict[str, Any]) -> dict[str, Any]:
    """What run `run` is trained, served or evaluated with: each value a run keeps is the run's own
    (from the episode log, else the `run.json` in its folder), unless `asked` (options given on the
    command line) names another, which the worker then refuses; for a run not started yet, `asked`
    over the settings. Where the settings now name another backend or base model, a note on stderr
    says the run keeps its own, and where it was found."""
    from episodes.db import StoreError
    from episodes.store import EpisodeStore
    from training.backends.base import IDENTITY, BackendConfig
    from training.worker.config import RUN_FILE, read_run_file

    try:
        store = EpisodeStore.open(settings.episode_db_url)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    try:
        started, where = store.runs.identity(run), f"the episode log {settings.episode_db_url}"
    finally:
        store.close()
    if started is None:
        model_dir = BackendConfig(path=settings.home / "art", run=run).model_dir()
        started, where = read_run_file(model_dir), str(model_dir / RUN_FILE)
    kept = {key: value for key, value in (started or {}).items() if key in IDENTITY}
    defaults = {"backend": settings.training_backend, "base_model": settings.training_base_model}
    for key, variable in SETTING_SOURCES.items():
        if key in kept and kept[key] != defaults[key] and key not in asked:
            typer.echo(
                f"note: run {run!r} keeps the {key.replace('_', ' ')} it was started with, {kept[key]!r}"
                f" (recorded in {where}; {variable} now says {defaults[key]!r}; --run NEW for a run on that)",
                err=True,
            )
    return {**defaults, **kept, **asked}


def _backend_config(settings: Settings, run: str) -> Any:
    """The backend of run `run` as it was started, or, for a run not started yet, of the settings."""
    from training.backends.base import BackendConfig

    return BackendConfig(path=settings.home / "art", run=run, **_run_identity(settings, run, {}))


def _settings_refusal(exc: Any) -> str:
    """One line for a `RunSettingsChanged`: what the run keeps, which option asked for another value,
    and the two ways on (the run's own value, or a new run)."""

    def shown(value: Any) -> str:
        return "the default" if value is None else repr(value)

    kept, back = [], []
    for key, (old, new) in exc.changed.items():
        source = IDENTITY_OPTIONS.get(key) or SETTING_SOURCES.get(key, key)
        if key in IDENTITY_OPTIONS:
            back.append(f"leave {source} out")
        else:
            back.append(f"set {source}={old}")
        kept.append(f"its {key.replace('_', ' ')} {shown(old)} ({source} asks for {shown(new)})")
    return (
        f"training run {exc.run!r} keeps {' and '.join(kept)}: to resume it, {' and '.join(back)};"
        f" to train on the new settings, start a new run: --run {exc.new_run}"
    )


def _base_model_source(settings: Settings, asked: dict[str, Any], kept: str) -> str:
    """Where a run's base model came from, in the words a person can act on."""
    if "base_model" in asked:
        return "--base-model"
    if kept != settings.training_base_model:
        return "the run's own record (it was started with it)"
    return "RLIDE_TRAINING_BASE_MODEL (or its default; --base-model overrides it for a new run)"


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send whatever the work inside prints on stdout to stderr: a library's notice or progress bar
    (litellm prints its "Give Feedback" banner on stdout), in Python or below it, so that stdout
    carries the command's JSON alone."""
    sys.stdout.flush()
    try:
        out, err = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):  # captured streams (a test runner)
        out = err = -1
    saved = os.dup(out) if out >= 0 else -1
    if saved >= 0:
        os.dup2(err, out)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        if saved >= 0:
            os.dup2(saved, out)
            os.close(saved)


def _committed_step(settings: Settings, run: str) -> int | None:
    from episodes.store import EpisodeStore

    store = EpisodeStore.open(settings.episode_db_url)
    try:
        return store.runs.committed_step(run)
    finally:
        store.close()


@train_app.callback()
def train(
    ctx: typer.Context,
    once: Annotated[bool, typer.Option("--once", help="Train one step, then exit.")] = False,
    daemon: Annotated[bool, typer.Option("--daemon", help="Keep training until SIGTERM (finishes the step).")] = False,
    run: Annotated[
        str,
        typer.Option(
            callback=_run_name,
            help="Training run name: its cursor and history in the log, its own checkpoint directory, and the"
            " base model and hyperparameters it keeps.",
        ),
    ] = "default",
    max_steps: Annotated[int | None, typer.Option(min=1, help="Stop after this many steps.")] = None,
    scenarios: Annotated[
        str,
        typer.Option(
            help="Self-play scenario sets each step, comma-separated: toy, humaneval, log (episodes of the log"
            " whose tests can be re-run), e.g. humaneval,log; or none (log groups only)."
        ),
    ] = "toy",
    judge_model: Annotated[
        str | None, typer.Option(help="litellm id of an LLM judge (ART's RULER) mixed into rewards.")
    ] = None,
    judge_weight: Annotated[float, typer.Option(min=0.0, max=1.0, help="The judge's share of each reward.")] = 0.5,
    sft_min_reward: Annotated[
        float, typer.Option(help="Imitate (SFT) ended external episodes whose reward total reaches this.")
    ] = 0.5,
    sft_batch: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Most external episodes per SFT step; 0 turns SFT off (default 8; 2 for a pretrained model on cpu).",
        ),
    ] = None,
    sft_view: Annotated[
        SftViewChoice,
        typer.Option(
            help="What SFT imitates of an episode: trace (every tool call and result, for a student that"
            " acts with tools) or answer (the task and the final answer, a tenth of the tokens)."
        ),
    ] = SftViewChoice.trace,
    dpo_batch: Annotated[
        int,
        typer.Option(
            min=0, help="Most preference pairs (episodes of one task, rewards 0.5 apart) per DPO step; 0: no DPO."
        ),
    ] = 0,
    include_unverified: Annotated[
        bool | None,
        typer.Option(
            "--include-unverified/--verified-only",
            help="Also train on episodes with only claims (no verified tests, no person's rating) or uncleared"
            " monitor flags. Default: RLIDE_TRAIN_UNVERIFIED (off).",
        ),
    ] = None,
    base_model: Annotated[
        str | None,
        typer.Option(
            help="Model to train (default RLIDE_TRAINING_BASE_MODEL): tiny-qwen2, a packaged model"
            " (`rlide models list`), a local folder or a Hugging Face id."
        ),
    ] = None,
    learning_rate: Annotated[
        float | None, typer.Option(min=0.0, help="Per-step learning rate (cpu default: 1e-4; tiny-qwen2 2e-2).")
    ] = None,
    lora_rank: Annotated[int | None, typer.Option(min=1, help="LoRA rank (alpha = 2 x rank; default 8).")] = None,
    lora_targets: Annotated[
        str | None,
        typer.Option(help="Modules LoRA adapts: all-linear (default) or comma-separated names (q_proj,v_proj)."),
    ] = None,
    dtype: Annotated[str | None, typer.Option(help="cpu weights: auto (default), float32 or bfloat16.")] = None,
    max_seq_len: Annotated[
        int | None, typer.Option(min=16, help="Longest trained sequence (default: the model's context, at most 4096).")
    ] = None,
    group_size: Annotated[
        int | None,
        typer.Option(min=2, help="Rollouts per scenario (GRPO group size; default 8, 4 for a pretrained model on cpu)"),
    ] = None,
    groups_per_step: Annotated[
        int | None,
        typer.Option(min=0, help="Self-play groups sampled per step (default 4, 2 for a pretrained model on cpu)."),
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(min=1, help="Longest rollout completion (default: 12 tiny-qwen2, 384 otherwise).")
    ] = None,
    temperature: Annotated[float, typer.Option(min=0.0, help="Rollout sampling temperature.")] = 1.0,
    kl_coef: Annotated[
        float | None,
        typer.Option(min=0.0, help="KL pull towards the base model per trained token, GRPO and SFT (default 0: none)."),
    ] = None,
    eval_tasks: Annotated[
        str | None,
        typer.Option(
            help="Evaluate the policy during training on these held-out tasks (humaneval or a task file) and"
            " keep the best checkpoint (`--checkpoint best` of policy serve and eval)."
        ),
    ] = None,
    eval_every: Annotated[int, typer.Option(min=1, help="Committed steps between two evaluations.")] = 10,
    eval_limit: Annotated[int | None, typer.Option(min=1, help="Evaluate the first N tasks only.")] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="The report is JSON on stdout either way (anything else goes to stderr); accepted for scripts.",
        ),
    ] = False,
) -> None:
    """Run the training worker: `rlide train --once`, `rlide train --daemon`, or `rlide train status`.

    Prints the worker's report as JSON on stdout when it stops; progress (rollouts sampled, tokens/s,
    optimizer steps, loss; at least every few seconds), logs and notices go to stderr. Ctrl-C stops at
    once (in --daemon: after the current step; twice: at once), says what it interrupted and what was
    kept, and exits 130. A run keeps the backend, base model and hyperparameters it was started with:
    options left out resume with the run's own; options naming others are refused before anything loads."""
    if ctx.invoked_subcommand is not None:
        return
    if once == daemon:
        raise fail("choose exactly one of --once and --daemon (or `rlide train status`)")
    settings = cli_settings()
    from mcp_server.logs import configure_logging, quiet_libraries

    configure_logging(settings)
    quiet_libraries()
    from training.backends.base import BackendError
    from training.scenarios.base import parse_scenario_sets
    from training.worker.config import WorkerConfig
    from training.worker.loop import train as run_worker
    from training.worker.outcome import RunSettingsChanged, WorkerError

    try:
        sets = parse_scenario_sets(scenarios)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    runner = None
    if {"humaneval", "log"} & set(sets) or eval_tasks is not None:
        from envpool.sandbox import SandboxError
        from training.scenarios.sandbox_runner import SandboxRunner

        try:
            runner = SandboxRunner(settings.sandbox)  # the student's code is contained like an agent's
        except SandboxError as exc:
            raise fail(f"the student's code runs in the sandbox, which is unavailable: {exc}") from exc
    given = {
        "base_model": base_model,
        "learning_rate": learning_rate,
        "lora_rank": lora_rank,
        "lora_targets": lora_targets,
        "dtype": dtype,
        "kl_penalty_coef": kl_coef,
    }
    # Left out: the run's own value, or for a new run the default (BackendConfig's).
    asked = {key: value for key, value in given.items() if value is not None}
    config = WorkerConfig.for_home(
        settings.home,
        settings.episode_db_url,
        **_run_identity(settings, run, asked),
        max_seq_len=max_seq_len,
        group_size=group_size,
        groups_per_step=groups_per_step,
        max_tokens=max_tokens,
        temperature=temperature,
        run=run,
        max_steps=max_steps,
        scenarios=",".join(sets) or None,
        judge_model=judge_model,
        judge_weight=judge_weight,
        sft_min_reward=sft_min_reward,
        sft_batch=sft_batch,
        sft_view=sft_view.value,
        dpo_batch=dpo_batch,
        include_unverified=settings.train_unverified if include_unverified is None else include_unverified,
        eval_tasks=eval_tasks,
        eval_every=eval_every,
        eval_limit=eval_limit,
    )
    from training.worker.outcome import WorkerInterrupted

    try:
        with _stdout_to_stderr():
            report = run_worker(
                config, once=once, daemon=daemon, runner=runner, workspace_runner=runner, on_progress=_say
            )
    except WorkerInterrupted as exc:
        _say(exc.report.message)
        typer.echo(json.dumps(_report_dict(exc.report), indent=2, default=str))
        raise typer.Exit(code=130) from None
    except RunSettingsChanged as exc:
        raise fail(_settings_refusal(exc)) from exc
    except (WorkerError, BackendError) as exc:
        message = str(exc)
        if message.startswith("base model "):
            source = _base_model_source(settings, asked, str(config.backend.base_model))
            message += f" (the base model came from {source})"
        raise fail(message) from exc
    finally:
        if runner is not None:
            runner.close()
    for line in report.set_aside:
        _say(f"set aside: {line}")
    if report.nothing_trained:
        _say(report.nothing_trained)
    typer.echo(json.dumps(_report_dict(report), indent=2, default=str))


def _say(line: str) -> None:
    """A progress line for the person at the terminal (stderr: stdout carries the JSON report)."""
    typer.echo(f"rlide train: {line}", err=True)


def _report_dict(report: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(report)


@train_app.command("status")
def train_status(
    run: Annotated[str | None, typer.Option(help="Run name (default: the most recently updated).")] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='The status as one JSON object; before any run exists, {"run": null, "message": "..."}'
            " (exit status 0).",
        ),
    ] = False,
) -> None:
    """Step, recent rewards, groups trained or skipped, what a live worker is doing, and where the charts are.

    A run the log calls `training` whose worker is gone (Ctrl-C'd before this version, killed, crashed)
    shows as `stopped (process N gone)`.

    Before any run exists it says how to start one and exits 0 (with --json: {"run": null, "message": ...});
    a --run that does not exist is an error (exit 1)."""
    from episodes.db import StoreError
    from training.worker.status import NoTrainingRun, read_status

    settings = cli_settings()
    store = open_store()
    try:
        status = read_status(store, run)
    except NoTrainingRun as exc:  # nothing trained yet is a state, not an error
        if as_json:
            typer.echo(json.dumps({"run": None, "message": str(exc)}, indent=2))
        else:
            typer.echo(str(exc))
        return
    except StoreError as exc:
        raise fail(str(exc)) from exc
    finally:
        store.close()
    chart = settings.home / "training" / "reward.png"
    if as_json:
        typer.echo(json.dumps({**status.model_dump(mode="json"), "chart": str(chart)}, indent=2))
        return
    typer.echo(f"run {status.run}: {status.state.value} at step {status.step} ({status.backend}, {status.base_model})")
    kept = {k: v for k, v in status.settings.items() if k not in ("backend", "base_model")}
    if kept:
        typer.echo("  started with " + ", ".join(f"{k} {v}" for k, v in kept.items()))
    if status.message:
        typer.echo(f"  {status.message}")
    if status.worker_alive and status.progress is not None:
        p = status.progress
        rate = "-" if p.tokens_per_s is None else f"{p.tokens_per_s:.1f}"
        typer.echo(
            f"  worker pid {p.pid}: {p.phase} for {p.phase_seconds:.0f}s; rollouts {p.rollouts_sampled}/"
            f"{p.rollouts_total} sampled, {rate} tok/s, replays {p.replays_run}, optimizer steps"
            f" {p.optimizer_steps}, last loss {'-' if p.last_loss is None else f'{p.last_loss:.4f}'}"
        )
        typer.echo(f"  latest: {visible(p.line)}")
    typer.echo(
        f"  groups trained {status.groups_trained}, skipped: {status.groups_skipped_zero_variance} zero-variance,"
        f" {status.groups_skipped_stale} stale"
    )
    typer.echo(
        f"  sft steps {status.sft_steps} on {status.sft_episodes_trained} external episodes"
        f" ({status.sft_episodes_unusable} unusable)"
    )
    for reason, count in status.sft_unusable_reasons.items():
        typer.echo(f"  set aside: {count} episode(s): {reason}")
    if status.dpo_steps:
        typer.echo(f"  dpo steps {status.dpo_steps} on {status.dpo_pairs_trained} preference pairs")
    if status.sft_skip_reason:
        typer.echo(f"  sft skipped: {status.sft_skip_reason}")
    if status.scenarios_unavailable:
        typer.echo(
            f"  scenarios skipped (verifier unavailable): {status.scenarios_unavailable};"
            f" latest: {status.scenario_unavailable_reason}"
        )
    for point in status.recent:
        mean = "-" if point.reward_mean is None else f"{point.reward_mean:.3f}"
        what = f"{point.sft_episodes} episodes" if point.sft_episodes else f"groups {point.groups_trained}"
        typer.echo(f"  step {point.step:>4}  {point.algorithm:<4}  reward {mean}  {what}")
    if chart.exists():
        typer.echo(f"  chart: {chart}")
    if status.tensorboard:
        typer.echo(f"  charts over steps: {status.tensorboard}")


CHECKPOINT_HELP = (
    "Which checkpoint of a cpu run: latest (followed as the run trains), best (the best evaluation during"
    " training, `rlide train --eval-tasks`), or a step number."
)


def _checkpoint_step(spec: str, model_dir: Path) -> int | None:
    from training.worker.evaluation import checkpoint_choice

    try:
        return checkpoint_choice(spec, model_dir)
    except ValueError as exc:
        raise fail(str(exc)) from exc


@policy_app.command("serve")
def policy_serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address (default RLIDE_POLICY_HOST, 127.0.0.1); off loopback: a token.")
    ] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Port (default RLIDE_POLICY_PORT, 8766).")] = None,
    run: Annotated[str, typer.Option(callback=_run_name, help=RUN_HELP)] = "default",
    upstream: Annotated[str | None, typer.Option(help=UPSTREAM_HELP)] = None,
    checkpoint: Annotated[str, typer.Option(help=CHECKPOINT_HELP)] = "latest",
    threads: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=1024,
            help="Torch threads a cpu checkpoint decodes with (default RLIDE_POLICY_THREADS, else half the cores).",
        ),
    ] = None,
    workspace: Annotated[
        list[Path] | None,
        typer.Option(
            exists=True,
            file_okay=False,
            resolve_path=True,
            help="A folder whose episodes are captured and verified (repeatable; default: RLIDE_WORKSPACE or the"
            " folder it is started in; always RLIDE_ALLOWED_ROOTS and `rlide agent run`'s copies under"
            " RLIDE_HOME/attempts). POST /episodes may name it or a folder under it.",
        ),
    ] = None,
) -> None:
    """Serve /v1/chat/completions and /v1/models; an episode's calls are recorded with logprobs.

    POST /episodes starts an episode and mints its API key: calls to /v1 with that key (or under
    /episodes/{id}/v1) are recorded into it. An episode that names its workspace gets the start and
    end states captured and the project's own tests as its verifier, run by rlide in the sandbox
    when it ends or goes idle (RLIDE_EPISODE_IDLE_TIMEOUT_S).

    With RLIDE_POLICY_TOKEN set, requests need `Authorization: Bearer <token>` (an OpenAI client's api_key).

    Binding anything but loopback without a token is refused. The port is bound before the model loads
    (a busy one fails at once); once it answers, the URL it listens on is printed on stderr."""
    settings = cli_settings()
    from common.http_auth import InsecureBind, check_bind

    bind = host or settings.policy_host
    token = settings.policy_token.get_secret_value() if settings.policy_token else None
    try:
        check_bind(bind, token, token_env="RLIDE_POLICY_TOKEN")  # before the model loads
    except InsecureBind as exc:
        raise fail(str(exc)) from exc
    from mcp_server.logs import configure_logging, quiet_libraries

    configure_logging(settings)
    quiet_libraries()
    from training.backends.base import BackendError
    from training.gateway.app import AddressUnavailable, Gateway, serve
    from training.gateway.engines import serving_threads
    from training.gateway.workspaces import WorkspaceRules

    served = settings.served_workspace
    attempts = settings.home / "attempts"  # `rlide agent run`'s copies of a start state
    attempts.mkdir(parents=True, exist_ok=True)
    rules = WorkspaceRules(
        roots=(*(workspace or ([served] if served is not None else [])), *settings.allowed_roots, attempts),
        sandbox=settings.sandbox,
        test_command=settings.test_command,
        test_memory_mb=settings.test_memory_mb,
        test_timeout_s=settings.test_timeout_s,
        idle_timeout_s=settings.episode_idle_timeout_s,
    )
    verified = ", ".join(str(root) for root in rules.roots) or "none (--workspace DIR names one)"

    def listening(url: str, gateway: Gateway) -> None:
        typer.echo(
            f"policy endpoint listening on {url}: OpenAI base URL {url}/v1, model {gateway.alias!r}"
            f" (run {run!r}, checkpoint step {gateway.engine.checkpoint_step}), episode log {gateway.episode_log}."
            f" Calls are recorded: into the episode whose API key they carry (POST {url}/episodes mints one),"
            f" else one episode per conversation. Workspaces episodes may name (captured and verified): {verified}",
            err=True,
        )

    config = _backend_config(settings, run)
    step = _checkpoint_step(checkpoint, config.model_dir())
    try:
        serve(
            config,
            settings.episode_db_url,
            host=bind,
            port=port or settings.policy_port,
            token=token,
            upstream=upstream,
            on_listening=listening,
            checkpoint=step,
            workspaces=rules,
            threads=threads or settings.policy_threads or serving_threads(),
        )
    except (BackendError, AddressUnavailable) as exc:
        raise fail(str(exc)) from exc


def evaluate(
    tasks: Annotated[
        str,
        typer.Option(
            help="humaneval (built-in), or the path of a JSONL file: HumanEval tasks (task_id, prompt, test,"
            " entry_point, optionally canonical_solution) or bug instances in SWE-bench's format (instance_id,"
            " repo, base_commit, patch, FAIL_TO_PASS, PASS_TO_PASS, problem_statement, repo_archive, bug_patch;"
            " docs/bug-tasks.md), told apart by their keys."
        ),
    ] = "humaneval",
    split: Annotated[str | None, typer.Option(help="Of the built-in set: heldout (the default) or train.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N tasks.")] = None,
    max_tokens: Annotated[int, typer.Option(min=1, max=4096)] = 256,
    samples: Annotated[
        int, typer.Option(min=1, help="Completions per task, sampled in one call; the report gives pass@1 and pass@K.")
    ] = 1,
    temperature: Annotated[
        float, typer.Option(min=0.0, max=2.0, help="Sampling temperature when --samples > 1 (one sample is greedy).")
    ] = 0.8,
    skip_trained: Annotated[
        bool,
        typer.Option(
            "--skip-trained",
            help="Leave out the tasks this run trained on (listed as skipped_trained) instead of refusing to run.",
        ),
    ] = False,
    run: Annotated[str, typer.Option(callback=_run_name, help=RUN_HELP)] = "default",
    upstream: Annotated[str | None, typer.Option(help=UPSTREAM_HELP)] = None,
    checkpoint: Annotated[str, typer.Option(help=CHECKPOINT_HELP)] = "latest",
    answer_timeout: Annotated[
        float | None,
        typer.Option(
            min=1,
            max=600,
            help="Seconds one answer's judged run may take (default: 10 for a program; 60 for a bug instance's"
            " tests, or the project's own limit if lower).",
        ),
    ] = None,
) -> None:
    """pass@k (or fix rate) of the current checkpoint on tasks it never trained on, run in the sandbox. Prints JSON."""
    if split not in (None, "heldout", "train"):
        raise fail("--split is heldout or train")
    settings = cli_settings()
    from mcp_server.logs import configure_logging, quiet_libraries

    configure_logging(settings)
    quiet_libraries()
    from envpool.sandbox import SandboxError
    from training.backends.base import BackendError
    from training.scenarios.bug_tasks.judge import SandboxRuns
    from training.scenarios.errors import VerifierUnavailable
    from training.scenarios.eval import EvalRefused, TaskResult, eval_current_policy, select_tasks
    from training.scenarios.sandbox_runner import SandboxRunner

    config = _backend_config(settings, run)
    step = _checkpoint_step(checkpoint, config.model_dir())
    try:  # before the sandbox and the model: a refusal costs nothing
        chosen = select_tasks(
            tasks,
            split=split,  # type: ignore[arg-type]  # checked against heldout|train above
            limit=limit,
            model_dir=config.model_dir(),
            skip_trained=skip_trained,
        )
    except (EvalRefused, VerifierUnavailable) as exc:
        raise fail(str(exc)) from exc
    try:
        runner = SandboxRunner(settings.sandbox)
    except SandboxError as exc:
        raise fail(str(exc)) from exc
    runs_for = SandboxRuns(settings.sandbox) if chosen.bugs else None
    from training.worker.progress import Progress

    progress = Progress(None, sink=lambda line: typer.echo(f"rlide eval: {line}", err=True))
    progress.begin("evaluating", f"{chosen.name}, {samples} sample(s) a task, run {run!r}")
    solved = 0

    def judged(result: TaskResult, done: int, of: int) -> None:
        nonlocal solved
        solved += result.passed
        verdict = "unverifiable" if result.unverifiable else f"{result.correct}/{result.samples} correct"
        progress.say(f"{done}/{of} {result.task_id}: {verdict} ({result.seconds:.0f}s); solved so far {solved}/{done}")

    try:
        with _stdout_to_stderr():
            report = eval_current_policy(
                config,
                runner,
                chosen,
                samples=samples,
                temperature=temperature,
                max_tokens=max_tokens,
                committed=lambda: _committed_step(settings, run),
                upstream=upstream,
                runs_for=runs_for,
                on_result=judged,
                checkpoint=step,
                timeout_s=answer_timeout,
            )
    except (BackendError, SandboxError) as exc:
        raise fail(str(exc)) from exc
    finally:
        progress.close()
        runner.close()
        if runs_for is not None:
            runs_for.close()
    if report.checkpoint_step is not None:  # beside the run's training curves (training/worker/metrics.py)
        from training.worker.metrics import StepMetrics

        charts = StepMetrics(config.model_dir())
        name = report.set_name
        figures = {f"eval/{name}/pass@1": report.pass_at_1}
        if report.samples > 1:
            figures[f"eval/{name}/pass@{report.samples}"] = report.pass_at(report.samples)
        charts.write(report.checkpoint_step, figures)
        charts.close()
    store = open_store()  # the dashboard charts each run's evals over its checkpoints
    try:
        store.runs.record_eval(run, report.set_name, report.to_dict())
    finally:
        store.close()
    typer.echo(json.dumps(report.to_dict(), indent=2))
