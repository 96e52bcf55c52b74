"""Register rlide as an MCP server in an IDE host's config file (`rlide install HOST`).

Each host keeps a JSON file that maps server names to launch commands. We merge one entry into
that file and touch nothing else: other servers, other top-level keys (Claude Code's
`~/.claude.json` holds its whole state) and unknown keys of our own entry all survive. Writes are
atomic, the previous bytes are kept in a backup next to the file, and a second run is a no-op.

Where each host reads its config, and the sources for it, are in docs/clients.md.

Errors: everything the user can fix raises `InstallError` with a message that names the file and
says what to do next. This module never prints; the CLI prints what it returns.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "Host",
    "InstallError",
    "InstallResult",
    "RemoteServer",
    "Scope",
    "ServerLaunch",
    "config_path",
    "default_launch",
    "install",
    "render",
]

Scope = Literal["user", "project"]
Action = Literal["created", "updated", "unchanged"]


class Host(StrEnum):
    claude_desktop = "claude-desktop"
    cursor = "cursor"
    claude_code = "claude-code"
    vscode = "vscode"
    roopik = "roopik"


class InstallError(Exception):
    """A config file could not be updated; the message says which file and what to do."""


@dataclass(frozen=True)
class ServerLaunch:
    """How a host should start `rlide serve` over stdio."""

    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Hosts start servers from their own working directory (often `/` for GUI apps), so a
        # relative command would resolve differently there than in the shell that ran install.
        if not Path(self.command).is_absolute():
            raise ValueError(f"ServerLaunch.command must be an absolute path, got {self.command!r}")


@dataclass(frozen=True)
class RemoteServer:
    """A running `rlide serve --http` for hosts that connect to a URL instead of starting a process."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")) or "/" not in self.url.split("://", 1)[1]:
            raise InstallError(f"--url {self.url!r} is not an http(s) URL with a path, e.g. http://127.0.0.1:8765/mcp")


# How each host spells a streamable-HTTP server entry; Claude Desktop's file takes none (remote
# servers are added in its Settings > Connectors), so it is missing here on purpose.
_REMOTE_TYPE: dict[Host, str | None] = {
    Host.cursor: None,  # {"url": ..., "headers": ...}
    Host.claude_code: "http",
    Host.vscode: "http",
    Host.roopik: "streamable-http",
}


@dataclass(frozen=True)
class InstallResult:
    path: Path
    action: Action
    backup: Path | None
    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Format:
    servers_key: str
    stdio_type: bool  # the host's own tools write `"type": "stdio"`; we match them
    jsonc: bool  # the host accepts comments and trailing commas in this file
    label: str


_FORMATS: dict[Host, _Format] = {
    Host.claude_desktop: _Format("mcpServers", stdio_type=False, jsonc=False, label="Claude Desktop"),
    Host.cursor: _Format("mcpServers", stdio_type=False, jsonc=False, label="Cursor"),
    Host.claude_code: _Format("mcpServers", stdio_type=True, jsonc=False, label="Claude Code"),
    Host.vscode: _Format("servers", stdio_type=True, jsonc=True, label="VS Code"),
    Host.roopik: _Format("mcpServers", stdio_type=False, jsonc=False, label="Roopik (Dio agent)"),
}

# Keys of our own entry that we own. Anything else a user added to the rlide entry by hand
# (`disabled`, `alwaysAllow`, `autoApprove`, `cwd`...) is kept across re-installs; `url` and
# `headers` go because they would turn our stdio entry into a broken HTTP one.
_MANAGED_KEYS = frozenset({"type", "command", "args", "env", "url", "headers", "transport"})
_MANAGED_ENV = frozenset({"RLIDE_HOME"})

# Roopik is a VS Code fork (product.json nameShort "Roopik") whose built-in agent Dio is a Roo
# Code fork published as `roopik.roopik-dio`; Roo keeps global MCP servers in this file.
_ROOPIK_DIO_SETTINGS = ("Roopik", "User", "globalStorage", "roopik.roopik-dio", "settings")


def default_launch(workspace: Path | None = None) -> ServerLaunch:
    """The launch command for the rlide installed next to the running interpreter; `workspace`: the
    project it serves (`RLIDE_WORKSPACE`), for hosts that start servers in `/` or the home folder."""
    # absolute(), not resolve(): a venv's python is a symlink to the base interpreter, and
    # resolving it would point the host at a python that cannot import rlide.
    bin_dir = Path(sys.executable).absolute().parent
    script = bin_dir / ("rlide.exe" if os.name == "nt" else "rlide")
    if script.is_file():
        command, args = str(script), ["serve"]
    else:
        command, args = str(Path(sys.executable).absolute()), ["-m", "mcp_server", "serve"]
    env: dict[str, str] = {}
    home = os.environ.get("RLIDE_HOME")
    if home:
        # The host's working directory is not ours, so a relative RLIDE_HOME would move.
        env["RLIDE_HOME"] = str(Path(home).expanduser().absolute())
    if workspace is not None:
        folder = workspace.expanduser().absolute()
        if not folder.is_dir():
            raise InstallError(f"--workspace {workspace} is not a folder; nothing was changed.")
        env["RLIDE_WORKSPACE"] = str(folder)
    return ServerLaunch(command=command, args=args, env=env)


def _app_data(home: Path, platform: str) -> Path:
    """The per-user application data folder Electron apps use (`app.getPath('appData')`)."""
    if platform == "darwin":
        return home / "Library" / "Application Support"
    if platform.startswith(("win", "cygwin")):
        return home / "AppData" / "Roaming"
    return home / ".config"


def config_path(
    host: Host,
    *,
    home: Path,
    scope: Scope = "user",
    project_dir: Path | None = None,
    platform: str = sys.platform,
) -> Path:
    """Where `host` reads its MCP servers for `scope` (see docs/clients.md for sources)."""
    host = Host(host)
    if scope == "project":
        root = (project_dir if project_dir is not None else Path.cwd()).expanduser().absolute()
        project_files = {
            Host.cursor: root / ".cursor" / "mcp.json",
            Host.claude_code: root / ".mcp.json",
            Host.vscode: root / ".vscode" / "mcp.json",
            Host.roopik: root / ".roo" / "mcp.json",
        }
        if host not in project_files:
            raise InstallError(
                f"{_FORMATS[host].label} has no project-level MCP config; "
                f"run `rlide install {host.value} --scope user` instead."
            )
        return project_files[host]
    if scope != "user":
        raise InstallError(f"unknown scope {scope!r}; use 'user' or 'project'.")
    home = home.expanduser().absolute()
    app_data = _app_data(home, platform)
    if host is Host.claude_desktop:
        return app_data / "Claude" / "claude_desktop_config.json"
    if host is Host.cursor:
        return home / ".cursor" / "mcp.json"
    if host is Host.claude_code:
        return home / ".claude.json"
    if host is Host.vscode:
        return app_data / "Code" / "User" / "mcp.json"
    return app_data.joinpath(*_ROOPIK_DIO_SETTINGS, "mcp_settings.json")


def _entry(host: Host, launch: ServerLaunch | RemoteServer) -> dict[str, Any]:
    if isinstance(launch, RemoteServer):
        if host not in _REMOTE_TYPE:
            raise InstallError(
                f"{_FORMATS[host].label} takes remote servers only in its settings (Settings > Connectors), not in"
                " its config file: register the stdio server instead (leave out --url)"
            )
        kind = _REMOTE_TYPE[host]
        remote: dict[str, Any] = {"type": kind} if kind else {}
        remote["url"] = launch.url
        if launch.headers:
            remote["headers"] = dict(launch.headers)
        return remote
    entry: dict[str, Any] = {"type": "stdio"} if _FORMATS[host].stdio_type else {}
    entry["command"] = launch.command
    entry["args"] = list(launch.args)
    if launch.env:
        entry["env"] = dict(launch.env)
    return entry


def render(host: Host, launch: ServerLaunch | RemoteServer, *, name: str = "rlide") -> dict[str, Any]:
    """The snippet to paste into the host's config: `{servers_key: {name: entry}}`."""
    host = Host(host)
    _check_name(name)
    return {_FORMATS[host].servers_key: {name: _entry(host, launch)}}


def _check_name(name: str) -> None:
    if not name or name != name.strip():
        raise InstallError(f"server name {name!r} must be non-empty, without surrounding spaces.")


def _strip_jsonc(text: str) -> str:
    """Drop `//` and `/* */` comments and trailing commas outside strings.

    Comments become spaces (newlines kept) so JSON error positions still match the file.
    """
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
            continue
        if ch == '"':
            in_string = True
            out.append(ch)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end == -1 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end == -1:
                raise ValueError("unterminated /* comment")
            out.append("".join(c if c == "\n" else " " for c in text[i : end + 2]))
            i = end + 2
        else:
            out.append(ch)
            i += 1
    return _strip_trailing_commas("".join(out))


def _strip_trailing_commas(text: str) -> str:
    out: list[str] = []
    in_string = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                out.append(text[i : i + 2])
                i += 2
                continue
            in_string = ch != '"'
        elif ch == '"':
            in_string = True
        elif ch == ",":
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            if j < n and text[j] in "}]":
                out.append(" ")
                i += 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _parse(path: Path, raw: bytes, fmt: _Format, host: Host) -> tuple[dict[str, Any], bool]:
    """Parse an existing config; returns (config, whether comments/trailing commas were dropped)."""
    untouched = f"nothing was changed. Fix or move the file, then run `rlide install {host.value}` again."
    try:
        text = raw.decode("utf-8-sig")  # Windows editors like to add a BOM
    except UnicodeDecodeError as exc:
        raise InstallError(f"{path} is not UTF-8 text ({exc.reason}); {untouched}") from exc
    if not text.strip():
        return {}, False  # an empty file is what some hosts leave behind; treat it as `{}`
    stripped = text
    if fmt.jsonc:
        try:
            stripped = _strip_jsonc(text)
        except ValueError as exc:
            raise InstallError(f"{path} is not valid JSON with comments ({exc}); {untouched}") from exc
    try:
        config = json.loads(stripped)
    except json.JSONDecodeError as exc:
        hint = "" if fmt.jsonc else " (comments are not allowed in this file)"
        what = exc.msg.removesuffix(" at")  # json's "Invalid control character at"
        raise InstallError(
            f"{path} is not valid JSON{hint}: {what} at line {exc.lineno}, column {exc.colno}; {untouched}"
        ) from exc
    if not isinstance(config, dict):
        raise InstallError(f"{path} must hold a JSON object at the top level; {untouched}")
    servers = config.get(fmt.servers_key)
    if servers is not None and not isinstance(servers, dict):
        raise InstallError(f'"{fmt.servers_key}" in {path} must be a JSON object; {untouched}')
    return config, stripped != text


def _merge(config: dict[str, Any], fmt: _Format, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """A copy of `config` with our entry set; every other key keeps its value and its place."""
    merged = dict(config)
    servers = dict(merged.get(fmt.servers_key) or {})
    old = servers.get(name)
    old = old if isinstance(old, dict) else {}
    kept = {k: v for k, v in old.items() if k not in _MANAGED_KEYS}
    new = {**entry, **kept}
    # Variables a user added to our entry (API keys for a scale-out backend, say) stay; only
    # the ones rlide sets are ours to change or drop.
    old_env = old.get("env")
    user_env = {k: v for k, v in old_env.items() if k not in _MANAGED_ENV} if isinstance(old_env, dict) else {}
    if user_env:
        new["env"] = {**user_env, **entry.get("env", {})}
    servers[name] = new
    merged[fmt.servers_key] = servers
    return merged


def _backup_path(path: Path) -> Path:
    # Timestamped and never overwritten, so repeated installs cannot lose the oldest original.
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = path.with_name(f"{path.name}.rlide-{stamp}.bak")
    counter = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.rlide-{stamp}-{counter}.bak")
        counter += 1
    return candidate


class _ChangedUnderUs(Exception):
    pass


def _write_atomic(path: Path, data: bytes, mode: int, *, expected: bytes | None) -> None:
    """Replace `path` with `data` in one step, unless its bytes are no longer `expected`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        # Hosts such as Claude Code rewrite their file while they run; if it changed since we
        # read it, replacing it would throw their change away. Checked as late as possible.
        if expected is not None and path.read_bytes() != expected:
            raise _ChangedUnderUs
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def install(
    host: Host,
    launch: ServerLaunch | RemoteServer,
    *,
    home: Path,
    scope: Scope = "user",
    project_dir: Path | None = None,
    name: str = "rlide",
    dry_run: bool = False,
    platform: str = sys.platform,
) -> InstallResult:
    """Add or update the `name` server in `host`'s config file; see the module docstring."""
    host = Host(host)
    _check_name(name)
    fmt = _FORMATS[host]
    path = config_path(host, home=home, scope=scope, project_dir=project_dir, platform=platform)
    # Dotfile managers symlink these files; replacing the link with a regular file would
    # silently detach it from the user's dotfiles, so write through to the target instead.
    target = path.resolve() if path.is_symlink() else path
    if target.exists() and not target.is_file():
        raise InstallError(f"{target} exists but is not a regular file; nothing was changed.")

    raw = target.read_bytes() if target.exists() else None
    existing, lossy = _parse(target, raw, fmt, host) if raw is not None else ({}, False)
    merged = _merge(existing, fmt, name, _entry(host, launch))

    if raw is not None and merged == existing:
        return InstallResult(path=path, action="unchanged", backup=None, config=merged)
    action: Action = "created" if raw is None else "updated"
    notes: list[str] = []
    if lossy:
        notes.append(f"comments and trailing commas in {path} are not kept; the backup has them.")
    if dry_run:
        return InstallResult(path=path, action=action, backup=None, config=merged, notes=notes)

    backup: Path | None = None
    # An existing file keeps its permissions. A new user-level file may later hold secrets in
    # `env`, so only its owner reads it; a project file is meant to be shared through git.
    new_mode = 0o644 if scope == "project" else 0o600
    mode = target.stat().st_mode & 0o7777 if raw is not None else new_mode
    data = (json.dumps(merged, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        if raw is not None:
            backup = _backup_path(target)
            shutil.copy2(target, backup)
        _write_atomic(target, data, mode, expected=raw)
    except _ChangedUnderUs:
        if backup is not None:
            backup.unlink(missing_ok=True)
        raise InstallError(
            f"{path} changed while rlide was updating it (is {fmt.label} running?); "
            f"nothing was changed. Run `rlide install {host.value}` again."
        ) from None
    except OSError as exc:
        raise InstallError(f"could not write {path}: {exc.strerror or exc}; the file was not changed.") from exc
    return InstallResult(path=path, action=action, backup=backup, config=merged, notes=notes)
