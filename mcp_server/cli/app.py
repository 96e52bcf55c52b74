"""The `rlide` command line. Heavy modules are imported inside commands so `rlide serve` starts fast."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from mcp_server.cli.common import (
    JsonFlag,
    SftViewChoice,
    cli_settings,
    echo_json,
    fail,
    http_settings,
    open_store,
    visible,
)
from mcp_server.settings import Settings

app = typer.Typer(
    name="rlide",
    help="rlide: an MCP server that turns IDE agent sessions into rewarded episodes for training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
episodes_app = typer.Typer(help="Inspect, export and curate the episode log.", no_args_is_help=True)


@app.callback()
def _logs_never_on_stdout() -> None:
    # structlog's default logger prints to stdout, where `--json` output (and the stdio transport)
    # goes: until a command configures logging, a library's warning goes to stderr instead. A
    # configuration already made (by configure_logging, or a host program) is left as it is, and
    # stderr is looked up when a logger is made, not now.
    import structlog

    if not structlog.is_configured():
        structlog.configure(logger_factory=lambda *_: structlog.PrintLogger(file=sys.stderr))


app.add_typer(episodes_app, name="episodes")


@app.command()
def serve(
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP instead of stdio.")] = False,
    host: Annotated[str | None, typer.Option(help="HTTP bind address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="HTTP port (default 8765).")] = None,
    banner: Annotated[bool, typer.Option("--banner", help="Print how to register this server (stderr).")] = False,
    workspace: Annotated[
        Path | None, typer.Option(help="Project folder to serve (RLIDE_WORKSPACE; default: the current folder).")
    ] = None,
) -> None:
    """Run the MCP server (stdio by default: this is what IDE hosts launch)."""
    settings = http_settings(host, port)
    if workspace is not None:
        if not workspace.expanduser().is_dir():
            raise fail(f"--workspace {workspace} is not a folder")
        settings = settings.model_copy(update={"workspace": workspace.expanduser().resolve()})
    from episodes.db import StoreError
    from episodes.store import EpisodeStore
    from mcp_server.server import build_server

    # Fail here with one line, not from inside the server's lifespan as a long exception group.
    try:
        EpisodeStore.open(settings.episode_db_url).close()
    except StoreError as exc:
        raise fail(f"{exc} (check RLIDE_HOME / RLIDE_DATABASE_URL; `rlide doctor` says more)") from exc

    server = build_server(settings)
    if banner:
        _print_banner(settings, http)
    if not http:
        server.run("stdio")
        return
    from mcp_server.transports.http import HttpConfigError, serve_http

    try:
        serve_http(server, settings)
    except HttpConfigError as exc:
        raise fail(str(exc)) from exc


def _print_banner(settings: Settings, http: bool) -> None:
    exe = Path(sys.argv[0]).resolve()
    lines = [
        "rlide is starting on embedded defaults",
        f"  episode log : {settings.public_dict()['database_url']}",
        "register it in your IDE (stdio, recommended):",
        "  rlide install claude-desktop | cursor | claude-code | vscode | roopik   (--print to only show)",
        f'  or by hand: command {exe}  args ["serve"]',
    ]
    if http:
        lines.append(f"streamable HTTP endpoint: http://{settings.http_host}:{settings.http_port}/mcp")
    lines.append("then: rlide episodes list   to watch episodes arrive")
    typer.echo("\n".join(lines), err=True)


@app.command()
def doctor(as_json: JsonFlag = False) -> None:
    """Say which backends are available here, and why not."""
    from mcp_server.cli.doctor import run_checks

    report = run_checks(cli_settings())
    if as_json:
        echo_json(report)
    else:
        typer.echo(f"python {report['python']}  ({report['executable']})")
        typer.echo(f"config file: {report['settings']['config_file']}")  # type: ignore[index]
        for check in report["checks"]:  # type: ignore[attr-defined]
            mark = "ok " if check["ok"] else "-- "
            chosen = " (selected)" if check["selected"] else ""
            typer.echo(f"{mark} {check['area']:<12} {check['name']:<16}{chosen} {check['detail']}")
    if not report["ok"]:
        raise typer.Exit(code=1)


_LANGUAGES = {".py": "python", ".sh": "shell", ".bash": "bash", ".js": "node", ".mjs": "node"}


@app.command()
def run(
    source: Annotated[str, typer.Argument(help="Program file, or - for standard input.")],
    language: Annotated[
        str | None, typer.Option(help="python | shell (POSIX sh) | bash | node (default: from the extension).")
    ] = None,
    timeout_s: Annotated[float, typer.Option(min=0.1, max=600, help="Wall-clock limit.")] = 10.0,
    raw: Annotated[
        bool, typer.Option("--raw", help="Print the program's output as it is, terminal control sequences too.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run a program in the sandbox, as the run_code tool does. Exit status: the program's (124 on timeout).

    Its output is printed with control characters made visible (as `cat -v` shows them), so that a
    program cannot retitle, clear or rewrite your terminal; `--raw` prints it as it is."""
    from pydantic import ValidationError

    from envpool.sandbox import InvalidRequest, RunRequest, RunStatus, SandboxError, make_sandbox
    from envpool.sandbox.base import request_problem

    settings = cli_settings()
    if source == "-":
        data, chosen = sys.stdin.buffer.read(), language or "python"
    else:
        path = Path(source)
        if not path.is_file():
            raise fail(f"{source} is not a file (use - to read the program from standard input)")
        data, chosen = path.read_bytes(), language or _LANGUAGES.get(path.suffix, "python")
    try:
        code = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        origin = "standard input" if source == "-" else source
        raise fail(f"{origin} is not UTF-8 text (invalid byte at offset {exc.start}): pass a program's source") from exc
    try:
        request = RunRequest(language=chosen, code=code, timeout_s=timeout_s)  # type: ignore[arg-type]
    except (ValidationError, InvalidRequest) as exc:
        raise fail(request_problem(exc)) from exc
    try:
        sandbox = make_sandbox(settings.sandbox)
    except (ValueError, SandboxError) as exc:
        raise fail(str(exc)) from exc
    try:
        result = sandbox.run(request)
    finally:
        sandbox.close()
    if as_json:
        echo_json(result.model_dump(mode="json"))
    else:
        shown = (lambda text: text) if raw else visible
        sys.stdout.write(shown(result.stdout))
        sys.stderr.write(shown(result.stderr))
        if result.status not in (RunStatus.OK, RunStatus.ERROR) or result.truncated:
            note = " (output truncated)" if result.truncated else ""
            typer.echo(f"[rlide: {result.status.value}{note}] {result.detail}", err=True)
    if result.status is RunStatus.TIMEOUT:
        raise typer.Exit(code=124)
    raise typer.Exit(code=0 if result.ok else (result.exit_code if result.exit_code and result.exit_code > 0 else 1))


class StatusChoice(StrEnum):
    open = "open"
    success = "success"
    failure = "failure"
    aborted = "aborted"
    timeout = "timeout"


class SourceChoice(StrEnum):
    external = "external"
    policy = "policy"


@app.command()
def install(
    host: Annotated[str, typer.Argument(help="claude-desktop | cursor | claude-code | vscode | roopik")],
    print_only: Annotated[bool, typer.Option("--print", help="Print the entry instead of writing a file.")] = False,
    scope: Annotated[str, typer.Option(help="user (all projects) or project (this directory).")] = "user",
    project_dir: Annotated[Path | None, typer.Option(help="Project root for --scope project.")] = None,
    name: Annotated[str, typer.Option(help="Server name in the host's config.")] = "rlide",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be written, change nothing.")] = False,
    workspace: Annotated[
        Path | None,
        typer.Option(help="Project folder the server serves (RLIDE_WORKSPACE); Claude Desktop starts servers in /."),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(help="Register a running `rlide serve --http` by its URL (e.g. http://127.0.0.1:8765/mcp)."),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            help="With --url: an HTTP header NAME=VALUE, repeatable; the value is written as given, so use the"
            " host's variable syntax for a token (Cursor: 'Authorization=Bearer ${env:RLIDE_HTTP_TOKEN}')."
        ),
    ] = None,
) -> None:
    """Register rlide as an MCP server in an IDE host's configuration (merged, backed up, idempotent)."""
    from mcp_server.cli.install import Host, InstallError, RemoteServer, config_path, default_launch, render
    from mcp_server.cli.install import install as install_into

    try:
        chosen = Host(host)
    except ValueError as exc:
        raise fail(f"unknown host {host!r}: choose one of {', '.join(h.value for h in Host)}") from exc
    if scope not in ("user", "project"):
        raise fail("--scope is user or project")
    if header and url is None:
        raise fail("--header needs --url (headers are sent to a remote server)")
    bad = [h for h in header or [] if "=" not in h or not h.split("=", 1)[0].strip()]
    if bad:
        raise fail(f"--header takes NAME=VALUE, got {bad[0]!r}")
    try:
        if url is not None:
            headers = dict((h.split("=", 1)[0].strip(), h.split("=", 1)[1]) for h in header or [])
            launch: Any = RemoteServer(url, headers)
            render(chosen, launch, name=name)  # a host that takes no remote server says so before anything else
        else:
            launch = default_launch(workspace)
    except InstallError as exc:
        raise fail(str(exc)) from exc
    if print_only:
        home = Path.home()
        where = config_path(chosen, home=home, scope=scope, project_dir=project_dir)  # type: ignore[arg-type]
        typer.echo(f"# add this to {where}", err=True)
        echo_json(render(chosen, launch, name=name))
        return
    try:
        result = install_into(
            chosen,
            launch,
            home=Path.home(),
            scope=scope,  # type: ignore[arg-type]  # checked against user|project above
            project_dir=project_dir,
            name=name,
            dry_run=dry_run,
        )
    except InstallError as exc:
        raise fail(str(exc)) from exc
    if dry_run:
        echo_json(result.config)
        # Nothing was written: say what would have been, on stderr (stdout holds the configuration).
        would = {"created": "would create", "updated": "would update", "unchanged": "would leave unchanged"}
        typer.echo(f"dry run, nothing written: {would[result.action]} {result.path}", err=True)
        return
    typer.echo(f"{result.action}: {result.path}" + (f" (backup: {result.backup})" if result.backup else ""))
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    if chosen is Host.claude_desktop and workspace is None and url is None:
        typer.echo(
            "note: Claude Desktop starts servers in /, where rlide serves no workspace (search_code and run_tests"
            " need one): unless RLIDE_WORKSPACE is already in this entry's env, run again with --workspace PATH",
            err=True,
        )
    if result.action != "unchanged":
        typer.echo(f"restart {chosen.value} (or reload its MCP servers) to pick up rlide", err=True)


@episodes_app.command("list")
def episodes_list(
    status: Annotated[StatusChoice | None, typer.Option(help="Only episodes with this status.")] = None,
    source: Annotated[SourceChoice | None, typer.Option(help="Only the IDE's (external) or the student's.")] = None,
    min_reward: Annotated[float | None, typer.Option(min=-1.0, max=1.0, help="Reward at least this.")] = None,
    max_reward: Annotated[float | None, typer.Option(min=-1.0, max=1.0, help="Reward at most this.")] = None,
    search: Annotated[str | None, typer.Option(help="Only tasks containing this text.")] = None,
    excluded: Annotated[
        bool | None, typer.Option("--excluded/--included", help="Only excluded (or only included) episodes.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Newest first, at most this many.")] = 20,
    offset: Annotated[int, typer.Option(min=0, help="Skip this many first (the next page).")] = 0,
    as_json: JsonFlag = False,
) -> None:
    """List episodes, newest first."""
    from episodes.records import EpisodeSource, EpisodeStatus
    from episodes.rows import EpisodeQuery

    try:
        query = EpisodeQuery(
            status=EpisodeStatus(status.value) if status else None,
            source=EpisodeSource(source.value) if source else None,
            min_reward=min_reward,
            max_reward=max_reward,
            text=search,
            excluded=excluded,
        )
    except ValueError as exc:
        raise fail(str(exc)) from exc
    store = open_store()
    try:
        episodes = store.list_episodes(query, limit=limit, offset=offset)
    finally:
        store.close()
    if as_json:
        echo_json([e.model_dump(mode="json") for e in episodes])
        return
    if not episodes:
        typer.echo("no episodes yet: connect an IDE (rlide install --help) and call start_episode", err=True)
    for e in episodes:
        reward = "-" if e.reward_total is None else f"{e.reward_total:+.2f}"
        reward += " excluded" if e.excluded else ""
        # A policy episode is made of the student's turns (its tool calls, if any, are its steps).
        turns = f"turns={e.turn_count:<4} " if e.source is EpisodeSource.policy else ""
        typer.echo(
            f"{e.id}  {e.created_at:%Y-%m-%d %H:%M}  {e.status.value:<8} steps={e.step_count:<4} {turns}"
            f"reward={reward:<6} {one_line(e.task, 60)}"
        )


@episodes_app.command("show")
def episodes_show(episode_id: str, as_json: JsonFlag = False) -> None:
    """Show one episode with its steps, its policy turns (for the student's episodes) and rewards."""
    from episodes.codec import as_message
    from episodes.db import EpisodeNotFound
    from episodes.records import EpisodeSource, RewardSource

    store = open_store()
    try:
        detail = store.detail(episode_id)
        policy = detail.episode.source is EpisodeSource.policy
        turns = store.turns.policy_turns(episode_id) if policy else []
    except EpisodeNotFound as exc:
        raise fail(f"{exc}; `rlide episodes list` shows valid ids") from exc
    finally:
        store.close()
    # A turn in short: its whole request and logprobs are in `rlide episodes export --format art`.
    brief: list[dict[str, Any]] = [
        {
            **t.model_dump(mode="json", include={"id", "created_at", "model"}),
            "prompt_tokens": len(t.prompt_token_ids) if t.prompt_token_ids is not None else None,
            "completion_tokens": len(t.completion_token_ids) if t.completion_token_ids is not None else None,
            "answer": as_message(t.choice).get("content"),
        }
        for t in turns
    ]
    if as_json:
        echo_json({**detail.model_dump(mode="json"), **({"policy_turns": brief} if policy else {})})
        return
    e = detail.episode
    typer.echo(f"{e.id}  {e.status.value}  client={e.client}  workspace={e.workspace}\ntask: {e.task}")
    if e.summary:
        typer.echo(f"summary: {e.summary}")
    for s in detail.steps:
        outcome = f"ERROR {one_line(s.error, 80)}" if s.error else one_line(s.result_summary or "", 80)
        typer.echo(f"  [{s.id}] {s.created_at:%H:%M:%S} {s.tool} ({s.duration_ms:.1f} ms) {outcome}")
    for t, b in zip(turns, brief, strict=True):
        answer = one_line(b["answer"] or "", 60)
        typer.echo(
            f"  turn [{t.id}] {t.created_at:%H:%M:%S} {t.model}  prompt {b['prompt_tokens']} tokens,"
            f" answer {b['completion_tokens']} tokens: {answer!r}"
        )
    for r in detail.rewards:
        kind = "" if r.verified or r.source is not RewardSource.feedback else " (the agent's own rating: a claim)"
        typer.echo(f"  reward {r.source.value}{kind}: {r.value:+.2f} {one_line(r.comment or '', 120)}")
    if detail.verifier is not None:
        v = detail.verifier
        typer.echo(f"verifier: {v.command or 'none'} ({v.state.value}){': ' + v.reason if v.reason else ''}")
        if v.verdict is not None:
            typer.echo(f"  end state: {v.verdict.line}")
    typer.echo(f"reward: {e.reward_total}  {'verified' if e.verified else 'unverified: only claims, never trained on'}")
    for flag in detail.flags:
        where = f" {flag.path}:{flag.line}" if flag.path else ""
        cleared = f" (cleared by {flag.cleared_by})" if flag.cleared_by else ""
        typer.echo(f"  flag {flag.kind}{where}: {flag.detail}{cleared}")
    if e.flags:
        typer.echo(f"  not trained on until a person clears it: rlide episodes clear-flags {e.id}")


def one_line(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters: a step's error or a task may span many,
    and the listing is one line per item."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class ExportFormat(StrEnum):
    episodes = "episodes"
    sft = "sft"
    dpo = "dpo"
    art = "art"


@episodes_app.command("export")
def episodes_export(
    fmt: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="episodes: whole episodes; sft: chat JSONL with tool calls (TRL); dpo: {prompt, chosen, rejected}"
            " pairs; art: ART trajectory groups.",
        ),
    ] = ExportFormat.episodes,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write (default stdout).")] = None,
    min_reward: Annotated[
        float | None, typer.Option(min=-1.0, max=1.0, help="Only episodes whose total reward is at least this.")
    ] = None,
    status: Annotated[StatusChoice | None, typer.Option(help="episodes format: only this status.")] = None,
    view: Annotated[
        SftViewChoice,
        typer.Option(
            help="sft format: trace (every tool call and result) or answer (the task and the final answer only)."
        ),
    ] = SftViewChoice.trace,
) -> None:
    """Export the log as JSON lines: whole episodes, or training data (sft, dpo, art)."""
    from episodes.records import EpisodeStatus

    store = open_store()
    buffer = io.StringIO()
    try:
        if fmt is ExportFormat.episodes:
            episodes = store.list_episodes(status=EpisodeStatus(status.value) if status else None, limit=10**9)
            count = 0
            for e in episodes:
                if e.excluded or (min_reward is not None and (e.reward_total is None or e.reward_total < min_reward)):
                    continue
                buffer.write(json.dumps(store.detail(e.id).model_dump(mode="json"), ensure_ascii=False) + "\n")
                count += 1
        else:
            from training.data.export import ExportError, export

            try:
                count = export(store, fmt.value, min_reward, buffer, view=view.value)
            except ExportError as exc:
                raise fail(str(exc)) from exc
    finally:
        store.close()
    if output is None:
        sys.stdout.write(buffer.getvalue())
    else:
        output.write_text(buffer.getvalue(), encoding="utf-8")
        typer.echo(f"wrote {count} {fmt.value} records to {output}", err=True)


@episodes_app.command("path")
def episodes_path() -> None:
    """Print where the episode log lives."""
    typer.echo(cli_settings().public_dict()["database_url"])


def _register_subcommands() -> None:
    from mcp_server.cli import curation
    from mcp_server.cli.agent import agent_app
    from mcp_server.cli.dashboard import dashboard
    from mcp_server.cli.index import index, search
    from mcp_server.cli.models import models_app
    from mcp_server.cli.train import evaluate, policy_app, train_app

    curation.register(episodes_app)
    app.command()(index)
    app.command()(search)
    app.add_typer(train_app, name="train")
    app.add_typer(policy_app, name="policy")
    app.add_typer(models_app, name="models")
    app.add_typer(agent_app, name="agent")
    app.command("eval")(evaluate)
    app.command()(dashboard)


_register_subcommands()


def _run_as_package_main() -> None:
    """Let the `rlide` script's `__main__` stand for `python -m mcp_server`, which it is. The
    processes multiprocessing starts (env pool workers, index workers) re-import their parent's main
    module unless it is a package's `__main__`; for the script that meant importing this module
    (typer, pydantic-settings, structlog): 0.5-0.6 s of CPU in every worker, and 0.4 s more before
    an 8-worker pool answered."""
    program = sys.modules["__main__"]
    if getattr(program, "__spec__", None) is None:
        program.__spec__ = importlib.util.find_spec("mcp_server.__main__")


def main() -> None:
    """The `rlide` console script."""
    _run_as_package_main()
    app()


if __name__ == "__main__":
    main()
