"""`rlide agent run`: N attempts of one agent at one task, in parallel, each on its own copy of the
start state, with nothing but the policy endpoint's base URL and an episode's API key.

For each attempt: the workspace as it is now (its commit and every uncommitted change) is copied to
`<home>/attempts/<batch>/<n>` (a git clone at that commit with the changes written over it; the
project's `.venv` is linked, not copied); the endpoint starts an episode there (`POST /episodes` with
the workspace, the agent's name and the batch), which captures the start state and runs the
project's tests on it; the command runs in the copy with the episode's base URL and key in its
environment and in its arguments; its exit status is posted as the episode's outcome (a claim), and
the endpoint's answer is rlide's verdict on the end state. The attempts of one run form one GRPO group
of their own size once all have ended (`training.data.groups.log_groups`).

The copies stay: replays and re-checks read the episode's repository at its start commit.
"""

from __future__ import annotations

import os
import shutil
import string
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from envpool.sandbox.sites import VENV_NAMES
from training.scenarios.snapshots import GitSnapshots, Snapshot

PLACEHOLDERS = ("base_url", "api_key", "task", "workspace", "model")
"""What a command's arguments may name in braces: `{base_url}` and so on."""


class AgentRunError(Exception):
    """An agent run that cannot start (the endpoint refused, the workspace cannot be copied), with why."""


@dataclass(frozen=True)
class AgentRun:
    """One run's settings. `command`: the agent's command line, whose arguments may name
    `PLACEHOLDERS`; `name`: the agent, recorded as the episodes' client (attempts of different agents
    never share a group)."""

    endpoint: str
    workspace: Path
    task: str
    command: tuple[str, ...]
    name: str
    attempts: int = 3
    parallel: int = 3
    timeout_s: float = 1800.0
    token: str | None = None
    model: str = "student"
    home: Path = Path("~/.rlide").expanduser()


@dataclass(frozen=True)
class Attempt:
    """What one attempt did: its episode, where it ran, the command's exit status (None: timed out
    or could not start), and rlide's verdict on its end state."""

    index: int
    episode_id: str
    workspace: str
    exit_status: int | None
    seconds: float
    log: str
    verified_reward: float | None
    verdict: str

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.index,
            "episode_id": self.episode_id,
            "workspace": self.workspace,
            "exit_status": self.exit_status,
            "seconds": round(self.seconds, 1),
            "log": self.log,
            "verified_reward": self.verified_reward,
            "verdict": self.verdict,
        }


def check_command(command: Sequence[str]) -> tuple[str, ...]:
    """The command, or ValueError naming a brace the arguments use that is no placeholder."""
    if not command:
        raise ValueError("no command: give the agent's command line after --, e.g. -- aider --message {task}")
    for arg in command:
        for _, field, _, _ in string.Formatter().parse(arg):
            if field is not None and field not in PLACEHOLDERS:
                raise ValueError(
                    f"{arg!r} names {{{field}}}, which is not one of {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                    " (write {{ and }} for a literal brace)"
                )
    return tuple(command)


def copy_start_state(snapshot: Snapshot, source: Path, dest: Path) -> None:
    """`dest`: a clone of `source` at the snapshot's commit with its uncommitted changes, so that the
    copy's start state is the source's; its virtualenv linked (the sandbox binds the project's site)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    for args in (
        ["clone", "-q", "--no-checkout", str(source), str(dest)],
        ["-C", str(dest), "checkout", "-q", "--detach", snapshot.commit],
    ):
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise AgentRunError(f"cannot copy {source} to {dest}: git {args[0]}: {done.stderr.strip()}")
    for path in snapshot.changed:
        target = dest / path
        if path in snapshot.files:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(snapshot.files[path], encoding="utf-8", errors="surrogateescape")
        elif (source / path).exists() or (source / path).is_symlink():  # binary or a symlink: as it is
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / path, target, follow_symlinks=False)
        else:
            target.unlink(missing_ok=True)  # deleted in the source's working tree
    for name in VENV_NAMES:
        if (source / name / "pyvenv.cfg").is_file() and not (dest / name).exists():
            (dest / name).symlink_to(source / name)


def run_agents(run: AgentRun, report: Callable[[str], None] = lambda line: None) -> list[Attempt]:
    """Run `run.attempts` attempts, `run.parallel` at a time; `report` gets a line as each ends."""
    command = check_command(run.command)
    snapshot = GitSnapshots().working_tree(run.workspace)
    batch = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    folder = run.home / "attempts" / batch
    headers = {"Authorization": f"Bearer {run.token}"} if run.token else {}
    with httpx.Client(base_url=run.endpoint.rstrip("/"), headers=headers, timeout=httpx.Timeout(30.0)) as http:

        def one(index: int) -> Attempt:
            attempt = _attempt(http, run, command, snapshot, batch, folder, index)
            report(
                f"attempt {index}: exit {attempt.exit_status}, {attempt.seconds:.0f} s,"
                f" verified reward {attempt.verified_reward} ({attempt.verdict[:200]})"
            )
            return attempt

        with ThreadPoolExecutor(max_workers=max(1, min(run.parallel, run.attempts))) as pool:
            return list(pool.map(one, range(run.attempts)))


def _attempt(
    http: httpx.Client,
    run: AgentRun,
    command: tuple[str, ...],
    snapshot: Snapshot,
    batch: str,
    folder: Path,
    index: int,
) -> Attempt:
    copy = folder / str(index)
    copy_start_state(snapshot, run.workspace, copy)
    started = _posted(
        http,
        "/episodes",
        {
            "task": run.task,
            "workspace": str(copy),
            "client": run.name,
            "batch": batch,
            "batch_size": run.attempts,
        },
    )
    values = {
        "base_url": started["shared_base_url"],
        "api_key": started["api_key"],
        "task": run.task,
        "workspace": str(copy),
        "model": run.model,
    }
    env = os.environ | {
        "OPENAI_BASE_URL": values["base_url"],
        "OPENAI_API_BASE": values["base_url"],  # litellm's and aider's name
        "OPENAI_API_KEY": values["api_key"],
        "RLIDE_EPISODE": values["api_key"],  # rlide's MCP server, if the agent starts one, records into it
        "RLIDE_TASK": run.task,
    }
    log = folder / f"{index}.log"
    began = time.monotonic()
    status: int | None
    with log.open("wb") as out:
        try:
            done = subprocess.run(
                [arg.format(**values) for arg in command],
                cwd=copy,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=run.timeout_s,
                check=False,
            )
            status = done.returncode
        except subprocess.TimeoutExpired:
            status = None
        except OSError as exc:  # the command does not exist, say
            out.write(f"rlide: the command could not start: {exc}\n".encode())
            status = None
    seconds = time.monotonic() - began
    # The exit status is the agent's own word on its attempt: recorded as a claim, never the reward.
    claim = {"outcome": "success" if status == 0 else "failure"}
    ended = _posted(http, f"/episodes/{started['episode_id']}/end", claim)
    verification = ended.get("verification") or {}
    return Attempt(
        index=index,
        episode_id=started["episode_id"],
        workspace=str(copy),
        exit_status=status,
        seconds=seconds,
        log=str(log),
        verified_reward=verification.get("reward"),
        verdict=verification.get("line") or "not verified (no verifier ran)",
    )


def _posted(http: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        # The end waits for the verifier's run of the project's tests.
        answer = http.post(path, json=body, timeout=httpx.Timeout(30.0, read=1800.0))
    except httpx.HTTPError as exc:
        raise AgentRunError(f"the policy endpoint at {http.base_url} cannot be reached: {exc}") from exc
    if answer.status_code >= 400:
        try:
            message = answer.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = answer.text[:500]
        raise AgentRunError(f"the policy endpoint refused {path} ({answer.status_code}): {message}")
    result: dict[str, Any] = answer.json()
    return result
