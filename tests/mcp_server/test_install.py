"""`rlide install`: real files under a temporary home, one host at a time."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_server.cli.install import (
    Host,
    InstallError,
    RemoteServer,
    ServerLaunch,
    config_path,
    default_launch,
    install,
    render,
)

ALL_HOSTS = list(Host)
PROJECT_HOSTS = [h for h in Host if h is not Host.claude_desktop]
SERVERS_KEY = {h: "servers" if h is Host.vscode else "mcpServers" for h in Host}
TYPED = {Host.claude_code, Host.vscode}  # hosts whose own tools write "type": "stdio"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def launch(tmp_path: Path) -> ServerLaunch:
    return ServerLaunch(command=str(tmp_path / "venv" / "bin" / "rlide"), args=["serve"], env={})


def expected_entry(host: Host, launch: ServerLaunch) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "stdio"} if host in TYPED else {}
    entry.update(command=launch.command, args=launch.args)
    if launch.env:
        entry["env"] = launch.env
    return entry


def user_path(host: Host, home: Path) -> Path:
    return config_path(host, home=home, platform="linux")


def do_install(host: Host, launch: ServerLaunch, home: Path, **kw: Any) -> Any:
    kw.setdefault("platform", "linux")
    return install(host, launch, home=home, **kw)


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.rlide-*.bak"))


def leftovers(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


# --- where each host keeps its file ------------------------------------------------------------

LINUX = {
    Host.claude_desktop: ".config/Claude/claude_desktop_config.json",
    Host.cursor: ".cursor/mcp.json",
    Host.claude_code: ".claude.json",
    Host.vscode: ".config/Code/User/mcp.json",
    Host.roopik: ".config/Roopik/User/globalStorage/roopik.roopik-dio/settings/mcp_settings.json",
}
MACOS = {
    Host.claude_desktop: "Library/Application Support/Claude/claude_desktop_config.json",
    Host.cursor: ".cursor/mcp.json",
    Host.claude_code: ".claude.json",
    Host.vscode: "Library/Application Support/Code/User/mcp.json",
    Host.roopik: "Library/Application Support/Roopik/User/globalStorage/roopik.roopik-dio/settings/mcp_settings.json",
}
WINDOWS = {
    Host.claude_desktop: "AppData/Roaming/Claude/claude_desktop_config.json",
    Host.cursor: ".cursor/mcp.json",
    Host.claude_code: ".claude.json",
    Host.vscode: "AppData/Roaming/Code/User/mcp.json",
    Host.roopik: "AppData/Roaming/Roopik/User/globalStorage/roopik.roopik-dio/settings/mcp_settings.json",
}
PROJECT = {
    Host.cursor: ".cursor/mcp.json",
    Host.claude_code: ".mcp.json",
    Host.vscode: ".vscode/mcp.json",
    Host.roopik: ".roo/mcp.json",
}


@pytest.mark.parametrize("platform,table", [("linux", LINUX), ("darwin", MACOS), ("win32", WINDOWS)])
@pytest.mark.parametrize("host", ALL_HOSTS)
def test_user_config_path(host: Host, platform: str, table: dict[Host, str], home: Path) -> None:
    assert config_path(host, home=home, platform=platform) == home / table[host]


@pytest.mark.parametrize("host", PROJECT_HOSTS)
def test_project_config_path(host: Host, home: Path, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    path = config_path(host, home=home, scope="project", project_dir=project)
    assert path == project / PROJECT[host]
    assert path.is_absolute()


def test_claude_desktop_has_no_project_scope(home: Path, launch: ServerLaunch, tmp_path: Path) -> None:
    with pytest.raises(InstallError, match="--scope user"):
        install(Host.claude_desktop, launch, home=home, scope="project", project_dir=tmp_path)


# --- fresh install, merge, idempotence, backups ------------------------------------------------


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_fresh_install_creates_file(host: Host, home: Path, launch: ServerLaunch) -> None:
    result = do_install(host, launch, home)
    path = user_path(host, home)
    assert result.path == path
    assert result.action == "created"
    assert result.backup is None
    on_disk = json.loads(path.read_text())
    assert on_disk == {SERVERS_KEY[host]: {"rlide": expected_entry(host, launch)}}
    assert result.config == on_disk
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert leftovers(path) == []


def existing_config(host: Host) -> dict[str, Any]:
    """A realistic config: other servers, other top-level keys, nested state."""
    other: dict[str, Any] = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}
    if host in TYPED:
        other["type"] = "stdio"
    return {
        "numStartups": 42,
        "projects": {"/home/you/code": {"allowedTools": [], "mcpServers": {"x": {"command": "x"}}}},
        SERVERS_KEY[host]: {
            "memory": other,
            "remote": {"type": "http", "url": "https://example.com/mcp", "headers": {"A": "b"}},
        },
        "inputs": [{"type": "promptString", "id": "key", "password": True}],
        "unicode": "caf\u00e9 \u2014 ok",
    }


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_merge_keeps_other_servers_and_keys(host: Host, home: Path, launch: ServerLaunch) -> None:
    path = user_path(host, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    before = existing_config(host)
    path.write_text(json.dumps(before, indent=4))

    result = do_install(host, launch, home)

    assert result.action == "updated"
    after = json.loads(path.read_text())
    for key, value in before.items():
        if key != SERVERS_KEY[host]:
            assert after[key] == value
    for name, entry in before[SERVERS_KEY[host]].items():
        assert after[SERVERS_KEY[host]][name] == entry
    assert after[SERVERS_KEY[host]]["rlide"] == expected_entry(host, launch)
    assert list(after) == list(before)  # top-level key order kept too


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_backup_holds_previous_bytes(host: Host, home: Path, launch: ServerLaunch) -> None:
    path = user_path(host, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = json.dumps(existing_config(host), indent=4).encode()
    path.write_bytes(old)

    result = do_install(host, launch, home)

    assert result.backup is not None
    assert result.backup.parent == path.parent
    assert result.backup.read_bytes() == old
    assert backups(path) == [result.backup]


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_second_run_is_unchanged(host: Host, home: Path, launch: ServerLaunch) -> None:
    path = user_path(host, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(existing_config(host)))
    first = do_install(host, launch, home)
    written = path.read_bytes()

    second = do_install(host, launch, home)

    assert first.action == "updated"
    assert second.action == "unchanged"
    assert second.backup is None
    assert path.read_bytes() == written
    assert backups(path) == [first.backup]


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_new_command_updates_entry_and_keeps_user_keys(host: Host, home: Path, launch: ServerLaunch) -> None:
    path = user_path(host, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    stale = {"command": "/old/rlide", "args": ["serve"], "url": "http://x", "disabled": False}
    stale["alwaysAllow"] = ["search_code"]
    stale["env"] = {"RLIDE_HOME": "/old/home", "TURBOPUFFER_API_KEY": "secret"}
    path.write_text(json.dumps({SERVERS_KEY[host]: {"rlide": stale}}))

    result = do_install(host, launch, home)

    entry = json.loads(path.read_text())[SERVERS_KEY[host]]["rlide"]
    assert result.action == "updated"
    assert entry == {
        **expected_entry(host, launch),
        "disabled": False,
        "alwaysAllow": ["search_code"],
        "env": {"TURBOPUFFER_API_KEY": "secret"},  # RLIDE_HOME is ours to drop, the key is not
    }
    assert do_install(host, launch, home).action == "unchanged"


def test_every_change_gets_its_own_backup(home: Path, launch: ServerLaunch, tmp_path: Path) -> None:
    path = user_path(Host.cursor, home)
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    first = do_install(Host.cursor, launch, home)
    other = ServerLaunch(command=str(tmp_path / "other" / "rlide"), args=["serve"], env={"RLIDE_HOME": "/x"})
    second = do_install(Host.cursor, other, home)

    assert first.backup is not None and second.backup is not None
    assert first.backup != second.backup
    assert first.backup.read_text() == "{}"
    assert json.loads(second.backup.read_text())["mcpServers"]["rlide"]["command"] == launch.command
    assert json.loads(path.read_text())["mcpServers"]["rlide"]["env"] == {"RLIDE_HOME": "/x"}


# --- refusals leave the file alone ------------------------------------------------------------


@pytest.mark.parametrize("host", ALL_HOSTS)
@pytest.mark.parametrize(
    "content,expected",
    [
        ('{"mcpServers": {"a": 1},, }', "not valid JSON"),
        ('{"mcpServers": {"a": "\x01"}}', "Invalid control character at line 1"),
        ("[1, 2]", "JSON object at the top level"),
        ('{"mcpServers": [], "servers": []}', "must be a JSON object"),
    ],
)
def test_bad_file_is_refused_and_untouched(
    host: Host, content: str, expected: str, home: Path, launch: ServerLaunch
) -> None:
    path = user_path(host, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)

    with pytest.raises(InstallError) as info:
        do_install(host, launch, home)

    message = str(info.value)
    assert expected in message
    assert str(path) in message
    assert "nothing was changed" in message
    assert path.read_text() == content
    assert backups(path) == [] and leftovers(path) == []


@pytest.mark.parametrize("host", [h for h in Host if h is not Host.vscode])
def test_comments_are_refused_where_the_host_rejects_them(host: Host, home: Path, launch: ServerLaunch) -> None:
    path = user_path(host, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('// mine\n{"mcpServers": {}}\n')
    with pytest.raises(InstallError, match="comments are not allowed"):
        do_install(host, launch, home)
    assert path.read_text() == '// mine\n{"mcpServers": {}}\n'


def test_empty_file_counts_as_empty_config(home: Path, launch: ServerLaunch) -> None:
    path = user_path(Host.claude_desktop, home)
    path.parent.mkdir(parents=True)
    path.write_text("\n")
    result = do_install(Host.claude_desktop, launch, home)
    assert result.action == "updated"
    assert result.backup is not None and result.backup.read_text() == "\n"


# --- VS Code's mcp.json is JSON with comments --------------------------------------------------

JSONC = """// User MCP servers
{
  /* remote one, see https://example.com */
  "servers": {
    "docs": {
      "type": "http",
      "url": "https://example.com/mcp", // trailing comment
      "headers": {"X-Note": "a // not a comment, nor /* this */"},
    },
  },
  "inputs": [],
}
"""


def test_vscode_reads_comments_and_keeps_strings(home: Path, launch: ServerLaunch) -> None:
    path = user_path(Host.vscode, home)
    path.parent.mkdir(parents=True)
    path.write_text(JSONC)

    result = do_install(Host.vscode, launch, home)

    after = json.loads(path.read_text())
    assert after["servers"]["docs"] == {
        "type": "http",
        "url": "https://example.com/mcp",
        "headers": {"X-Note": "a // not a comment, nor /* this */"},
    }
    assert after["inputs"] == []
    assert after["servers"]["rlide"] == expected_entry(Host.vscode, launch)
    assert result.backup is not None and result.backup.read_text() == JSONC
    assert any("comments" in note for note in result.notes)


def test_vscode_commented_file_already_installed_is_left_as_is(home: Path, launch: ServerLaunch) -> None:
    path = user_path(Host.vscode, home)
    path.parent.mkdir(parents=True)
    entry = json.dumps(expected_entry(Host.vscode, launch))
    text = f'{{\n  // keep me\n  "servers": {{"rlide": {entry},}}\n}}\n'
    path.write_text(text)
    assert do_install(Host.vscode, launch, home).action == "unchanged"
    assert path.read_text() == text


def test_vscode_unterminated_comment_is_refused(home: Path, launch: ServerLaunch) -> None:
    path = user_path(Host.vscode, home)
    path.parent.mkdir(parents=True)
    path.write_text('{"servers": {} /* oops\n')
    with pytest.raises(InstallError, match="unterminated"):
        do_install(Host.vscode, launch, home)
    assert path.read_text() == '{"servers": {} /* oops\n'


# --- --print, --scope project, dry runs --------------------------------------------------------


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_render_is_the_snippet_install_writes(host: Host, home: Path, launch: ServerLaunch) -> None:
    with_env = ServerLaunch(command=launch.command, args=["serve"], env={"RLIDE_HOME": "/data/rlide"})
    snippet = render(host, with_env)
    assert snippet == {SERVERS_KEY[host]: {"rlide": expected_entry(host, with_env)}}
    assert json.loads(json.dumps(snippet)) == snippet
    assert render(host, with_env, name="rl")[SERVERS_KEY[host]].keys() == {"rl"}
    do_install(host, with_env, home)
    assert json.loads(user_path(host, home).read_text()) == snippet


@pytest.mark.parametrize("host", PROJECT_HOSTS)
def test_project_scope_install(host: Host, home: Path, launch: ServerLaunch, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    result = do_install(host, launch, home, scope="project", project_dir=project)
    assert result.path == project / PROJECT[host]
    assert json.loads(result.path.read_text()) == render(host, launch)
    assert stat.S_IMODE(result.path.stat().st_mode) == 0o644
    assert not user_path(host, home).exists()
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("host", ALL_HOSTS)
def test_dry_run_writes_nothing(host: Host, home: Path, launch: ServerLaunch) -> None:
    path = user_path(host, home)
    fresh = do_install(host, launch, home, dry_run=True)
    assert fresh.action == "created" and not path.exists()
    assert fresh.config == render(host, launch)

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"other": 1}')
    planned = do_install(host, launch, home, dry_run=True)
    assert planned.action == "updated" and planned.backup is None
    assert path.read_text() == '{"other": 1}' and backups(path) == []


# --- file-system details -----------------------------------------------------------------------


def test_existing_permissions_are_kept(home: Path, launch: ServerLaunch) -> None:
    path = user_path(Host.claude_code, home)
    path.write_text('{"oauthAccount": {"email": "you@example.com"}}')
    os.chmod(path, 0o640)
    do_install(Host.claude_code, launch, home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_symlinked_config_stays_a_symlink(home: Path, launch: ServerLaunch, tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles" / "cursor-mcp.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text('{"mcpServers": {}}')
    link = user_path(Host.cursor, home)
    link.parent.mkdir()
    link.symlink_to(dotfiles)

    do_install(Host.cursor, launch, home)

    assert link.is_symlink()
    assert "rlide" in json.loads(dotfiles.read_text())["mcpServers"]


def test_directory_in_the_way_is_refused(home: Path, launch: ServerLaunch) -> None:
    user_path(Host.cursor, home).mkdir(parents=True)
    with pytest.raises(InstallError, match="not a regular file"):
        do_install(Host.cursor, launch, home)


# --- the launch command ------------------------------------------------------------------------


def test_default_launch_is_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLIDE_HOME", raising=False)
    launch = default_launch()
    assert Path(launch.command).is_absolute()
    assert launch.env == {}
    if Path(launch.command).stem == "rlide":
        assert launch.args == ["serve"]
    else:
        assert launch.args == ["-m", "mcp_server", "serve"]


def test_default_launch_passes_rlide_home_as_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLIDE_HOME", "state")
    assert default_launch().env == {"RLIDE_HOME": str(tmp_path / "state")}


def test_workspace_is_passed_and_kept_by_a_later_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, home: Path
) -> None:
    """Claude Desktop starts servers in /, where rlide serves no workspace: `--workspace` names one,
    and installing again without it (a new rlide path, say) keeps the one named before."""
    monkeypatch.delenv("RLIDE_HOME", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(tmp_path)
    first = default_launch(Path("project"))
    assert first.env == {"RLIDE_WORKSPACE": str(project)}
    do_install(Host.claude_desktop, first, home)
    do_install(Host.claude_desktop, default_launch(), home)
    entry = json.loads(user_path(Host.claude_desktop, home).read_text())["mcpServers"]["rlide"]
    assert entry["env"] == {"RLIDE_WORKSPACE": str(project)}
    with pytest.raises(InstallError, match="is not a folder"):
        default_launch(tmp_path / "missing")


def test_relative_command_is_rejected() -> None:
    with pytest.raises(ValueError, match="absolute"):
        ServerLaunch(command="rlide", args=["serve"], env={})


def test_blank_server_name_is_rejected(home: Path, launch: ServerLaunch) -> None:
    with pytest.raises(InstallError, match="name"):
        install(Host.cursor, launch, home=home, name=" ")


# --- checked-in examples -----------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clients"


@pytest.mark.skipif(sys.platform == "win32", reason="the placeholder is a POSIX path")
@pytest.mark.parametrize("host", ALL_HOSTS)
def test_examples_match_render(host: Host) -> None:
    placeholder = ServerLaunch(command="/home/you/.venv/bin/rlide", args=["serve"], env={})
    assert json.loads((EXAMPLES / f"{host.value}.json").read_text()) == render(host, placeholder)


REMOTE_SHAPE = {
    Host.cursor: {},
    Host.claude_code: {"type": "http"},
    Host.vscode: {"type": "http"},
    Host.roopik: {"type": "streamable-http"},
}


@pytest.mark.parametrize("host", list(REMOTE_SHAPE))
def test_a_remote_entry_replaces_the_stdio_one_in_each_hosts_spelling(
    host: Host, home: Path, launch: ServerLaunch
) -> None:
    path = user_path(host, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    do_install(host, launch, home)  # the stdio entry first, with a key a user added by hand
    config = json.loads(path.read_text())
    config[SERVERS_KEY[host]]["rlide"]["disabled"] = False
    path.write_text(json.dumps(config))
    remote = RemoteServer("http://127.0.0.1:8765/mcp", {"Authorization": "Bearer ${env:RLIDE_HTTP_TOKEN}"})
    assert do_install(host, remote, home).action == "updated"
    entry = json.loads(path.read_text())[SERVERS_KEY[host]]["rlide"]
    assert entry == {
        **REMOTE_SHAPE[host],
        "url": "http://127.0.0.1:8765/mcp",
        "headers": {"Authorization": "Bearer ${env:RLIDE_HTTP_TOKEN}"},
        "disabled": False,
    }
    assert do_install(host, remote, home).action == "unchanged"


def test_claude_desktop_and_bad_urls_are_refused_before_anything_is_written(home: Path) -> None:
    with pytest.raises(InstallError, match="Connectors"):
        do_install(Host.claude_desktop, RemoteServer("http://127.0.0.1:8765/mcp"), home)
    assert not user_path(Host.claude_desktop, home).exists()
    for bad in ("127.0.0.1:8765/mcp", "ftp://host/mcp", "http://host"):
        with pytest.raises(InstallError, match="not an http"):
            RemoteServer(bad)
