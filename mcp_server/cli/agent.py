"""`rlide agent run`: an agent scaffold's attempts at a task against the policy endpoint, recorded,
verified and grouped (`training.gateway.agent_run`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mcp_server.cli.common import cli_settings, fail

agent_app = typer.Typer(help="Run an agent scaffold against the policy endpoint, recorded and verified.")


@agent_app.command("run", context_settings={"allow_interspersed_args": False})
def agent_run(
    command: Annotated[
        list[str],
        typer.Argument(
            help="The agent's command line, after --. Its arguments may name {base_url}, {api_key}, {task},"
            " {workspace} and {model}; its environment has OPENAI_BASE_URL, OPENAI_API_BASE, OPENAI_API_KEY"
            " and RLIDE_EPISODE (the episode's key) set.",
            show_default=False,
        ),
    ],
    task: Annotated[str, typer.Option(help="What the agent is asked to do (its episode's task).")],
    workspace: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            file_okay=False,
            resolve_path=True,
            help="The git working tree whose state (commit and uncommitted changes) each attempt starts from"
            " (default: RLIDE_WORKSPACE or the current folder).",
        ),
    ] = None,
    attempts: Annotated[int, typer.Option(min=2, max=64, help="Attempts, each on its own copy: one GRPO group.")] = 3,
    parallel: Annotated[int | None, typer.Option(min=1, max=64, help="At most this many at once (default: all).")] = (
        None
    ),
    name: Annotated[
        str | None, typer.Option(help="The agent's name, recorded as the episodes' client (default: the command's).")
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(help="The policy endpoint's root URL (default: http://RLIDE_POLICY_HOST:RLIDE_POLICY_PORT)."),
    ] = None,
    model: Annotated[str, typer.Option(help="The model name {model} stands for.")] = "student",
    timeout: Annotated[float, typer.Option(min=1, help="Seconds one attempt may run before it is stopped.")] = 1800.0,
) -> None:
    """N attempts of one agent at a task, in parallel, each on its own copy of the start state.

    The policy endpoint (`rlide policy serve`, on this machine) starts an episode per attempt, captures
    its start state and runs the project's tests on it; the agent runs with the episode's base URL and
    key; its exit status is posted as a claim and rlide's verdict on the end state is the reward. The
    attempts form one GRPO group once all have ended. Copies stay under RLIDE_HOME/attempts. Prints JSON."""
    settings = cli_settings()
    from training.gateway.agent_run import AgentRun, AgentRunError, check_command, run_agents
    from training.scenarios.snapshots import SnapshotUnavailable

    try:
        check_command(command)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    root = workspace or settings.served_workspace
    if root is None:
        raise fail(settings.no_workspace_reason().replace("RLIDE_ALLOWED_ROOTS", "--workspace"))
    token = settings.policy_token.get_secret_value() if settings.policy_token else None
    host = settings.policy_host if settings.policy_host not in ("0.0.0.0", "::") else "127.0.0.1"
    run = AgentRun(
        endpoint=endpoint or f"http://{host}:{settings.policy_port}",
        workspace=root,
        task=task,
        command=tuple(command),
        name=name or Path(command[0]).name,
        attempts=attempts,
        parallel=parallel or attempts,
        timeout_s=timeout,
        token=token,
        model=model,
        home=settings.home,
    )
    try:
        done = run_agents(run, report=lambda line: typer.echo(line, err=True))
    except (AgentRunError, SnapshotUnavailable) as exc:
        raise fail(str(exc)) from exc
    rewards = [a.verified_reward for a in done]
    verified = [r for r in rewards if r is not None]
    summary = {
        "task": task,
        "agent": run.name,
        "workspace": str(root),
        "attempts": [a.to_json() for a in done],
        "verified": len(verified),
        "reward_variance": len(set(verified)) > 1,
    }
    typer.echo(json.dumps(summary, indent=2))
