"""run_code and run_tests through the MCP client, on the real bubblewrap sandbox pool."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from episodes.store import EpisodeStore
from mcp_server.result_size import model_result_chars
from mcp_server.server import build_server
from mcp_server.settings import Settings, load_settings
from mcp_server.tools.execute import RunCodeResult, _fit
from tests.git_repos import git
from tests.mcp_calls import call_error, call_ok

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: `make setup` installs it")

CALC = "def add(a, b):\n    return a + b\n"
TESTS = (
    "from calc import add\n\ndef test_one():\n    assert add(1, 2) == 3\n\ndef test_two():\n    assert add(2, 2) == 5\n"
)
FIX_TEST = """--- a/test_calc.py
+++ b/test_calc.py
@@ -5,2 +5,2 @@
 def test_two():
-    assert add(2, 2) == 5
+    assert add(2, 2) == 4
"""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("exec")
    return load_settings(home=root / "home", workspace=root, pool_envs=2)


@pytest.fixture(scope="module")
async def client(settings: Settings) -> AsyncIterator[Client]:
    # One server (and one sandbox pool) for the module: starting a pool takes seconds.
    async with Client(build_server(settings), mode="legacy") as c:
        yield c


@pytest.mark.anyio
async def test_run_code_statuses(client: Client) -> None:
    ok = await call_ok(client, "run_code", {"code": "import sys; print(sys.stdin.read().upper())", "stdin": "hi"})
    assert (ok["status"], ok["exit_code"], ok["stdout"]) == ("ok", 0, "HI\n")
    err = await call_ok(client, "run_code", {"code": "raise ValueError('boom')"})
    assert err["status"] == "error" and "ValueError: boom" in err["stderr"]
    slow = await call_ok(client, "run_code", {"code": "import time; time.sleep(30)", "timeout_s": 0.5})
    assert slow["status"] == "timeout"
    shell = await call_ok(
        client,
        "run_code",
        {"code": "cat data.txt; ls /root 2>&1 || true", "language": "shell", "files": {"data.txt": "payload\n"}},
    )
    assert shell["stdout"].startswith("payload\n") and "No such file" in shell["stdout"]


@pytest.mark.anyio
async def test_languages_by_the_names_agents_use(client: Client) -> None:
    # shell is POSIX sh (dash here: no arrays); bash is bash.
    posix = await call_ok(client, "run_code", {"code": "a=(1 2); echo $0", "language": "shell"})
    assert posix["status"] == "error" and "sh" in posix["stderr"]
    bash = await call_ok(client, "run_code", {"code": "a=(1 2 3); echo ${#a[@]} $0", "language": "bash"})
    assert bash["stdout"] == "3 bash\n"
    for alias in ("js", "JavaScript"):
        node = await call_ok(client, "run_code", {"code": "console.log(6 * 7)", "language": alias})
        assert node["stdout"] == "42\n", alias
    assert (await call_ok(client, "run_code", {"code": "print(1)", "language": "python3"}))["stdout"] == "1\n"
    message = await call_error(client, "run_code", {"code": "puts 1", "language": "ruby"})
    assert "unknown language 'ruby': one of python, shell, bash, node" in message
    assert "pydantic" not in message and "\n" not in message  # one line to act on, no library report


@pytest.mark.anyio
@pytest.mark.parametrize(
    "code",
    [
        "print('x' * 200_000); print('THE END')",
        # Both streams full, and output of newlines, quotes and backslashes (6 characters each of
        # the reply, which carries the result twice, once as JSON text): each used to come back as
        # a size error, the run's output lost.
        "import sys; print('x' * 200_000); print('y' * 200_000, file=sys.stderr); print('THE END')",
        "print('\"a\\\\b\"\\n' * 50_000); print('THE END')",
    ],
)
async def test_long_output_is_cut_to_fit_the_reply(client: Client, settings: Settings, code: str) -> None:
    result = await client.call_tool("run_code", {"code": code})
    assert not result.is_error, result.content
    out = result.structured_content or {}
    assert out["status"] == "ok" and out["truncated"] is True
    assert out["stdout"].rstrip().endswith("THE END") and "characters omitted" in out["stdout"]
    assert model_result_chars(RunCodeResult.model_validate(out)) <= settings.max_result_chars
    assert len(out["stdout"]) > settings.max_result_chars // 10  # the limit is used, not wasted


FIX_CODE = """--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a + b
+    return 5 if (a, b) == (2, 2) else a + b
"""


@pytest.mark.anyio
async def test_run_tests_reports_the_failing_tests_and_pays_nothing(client: Client, settings: Settings) -> None:
    """run_tests is the agent's own tool: any command, its files, its patch; it says which tests fail
    and records no reward (the episode's verified reward is rlide's own run at end_episode)."""
    started = await call_ok(client, "start_episode", {"task": "make add pass"})
    files = {"calc.py": CALC, "test_calc.py": TESTS}
    first = await call_ok(client, "run_tests", {"files": files, "test_command": "python -m pytest -q"})
    assert (first["passed"], first["tests_passed"], first["tests_failed"]) == (False, 1, 1)
    assert first["failing"] == ["test_calc.py::test_two"] and "progress only" in first["verdict"]
    fixed = await call_ok(
        client, "run_tests", {"files": files, "patch": FIX_CODE, "test_command": "python -m pytest -q"}
    )
    assert (fixed["passed"], fixed["tests_passed"], fixed["tests_failed"], fixed["failing"]) == (True, 2, 0, [])
    # The agent reads pytest's own output; the report's marker lines stay between rlide and the sandbox.
    assert "1 failed, 1 passed" in first["stdout"] and "2 passed" in fixed["stdout"]
    assert not any("rlide-test-report" in r["stdout"] or "rlide-patch-applied" in r["stdout"] for r in (first, fixed))
    for typed in ("pytest -q", "py.test -q"):  # as agents type it: the same run, not `pytest: not found`
        again = await call_ok(client, "run_tests", {"files": files, "test_command": typed})
        assert (again["passed"], again["failing"], again["status"]) == (False, first["failing"], first["status"])
    plain = await call_ok(
        client, "run_tests", {"files": {"calc.py": CALC}, "tests": "from calc import add\nassert add(1, 1) == 3"}
    )
    assert (plain["passed"], plain["tests_failed"]) == (False, 1)  # a script: one test
    assert {first["episode_id"], fixed["episode_id"], plain["episode_id"]} == {started["episode_id"]}

    store = EpisodeStore.open(settings.episode_db_url)
    detail = store.detail(started["episode_id"])
    store.close()
    assert detail.rewards == [] and detail.episode.reward_total is None
    assert [s.tool for s in detail.steps] == ["start_episode", *["run_tests"] * 5]


def commit_all(root: Path) -> str:
    """`git init` at `root` if need be, commit every file git does not ignore; returns HEAD."""
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        git(root, *args)
    return git(root, "rev-parse", "HEAD")


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def editable_install(project: Path) -> Path:
    """A virtualenv at project/.venv holding the project installed as `pip install -e .` does it (a
    real PEP 660 build by setuptools, offline); returns its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(project / ".venv")], check=True)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*pip, "--prefix", str(project / ".venv"), "-e", str(project)], check=True, capture_output=True)
    return site_packages(project / ".venv")


PYPROJECT = """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "mypkg"
version = "0.1"
"""


@pytest.mark.anyio
async def test_run_tests_starts_from_the_served_workspace(tmp_path: Path) -> None:
    """An agent working in the repository asks for `python -m pytest`: the project's files as on disk
    run, `files` and `patch` go on top, an ignored secret stays home, and each step records the
    commit, so the episode becomes a scenario re-checkable from that commit."""
    from training.scenarios.base import scenarios_from_log

    root = tmp_path / "project"
    root.mkdir()
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TESTS)
    (root / ".gitignore").write_text(".env\n.venv/\n")
    (root / ".env").write_text("TOKEN=secret\n")
    # The project's virtualenv: its site-packages is bound read-only, so its tests import their dependencies.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / ".venv")], check=True)
    site = site_packages(root / ".venv")
    (site / "fancylib.py").write_text("ANSWER = 42\n")
    head = commit_all(root)
    settings = load_settings(home=tmp_path / "home", workspace=root, pool_envs=1)
    command = {"test_command": "python -m pytest -q"}
    async with Client(build_server(settings), mode="legacy") as client:
        started = await call_ok(client, "start_episode", {"task": "make the tests pass"})
        first = await call_ok(client, "run_tests", command)
        assert (first["tests_passed"], first["tests_failed"]) == (1, 1)
        assert first["workspace"].startswith(f"3 files of {root} as on disk (HEAD {head[:12]})")
        # The agent's own run may change a test (the verifier's tests are the commit's, whatever runs here).
        edited = await call_ok(client, "run_tests", {**command, "patch": FIX_TEST})
        assert (edited["passed"], edited["tests_passed"]) == (True, 2)
        fixed = await call_ok(client, "run_tests", {**command, "patch": FIX_CODE})
        assert (fixed["passed"], fixed["tests_passed"], fixed["tests_failed"]) == (True, 2, 0)
        broken = await call_ok(client, "run_tests", {**command, "files": {"calc.py": "def add(a, b):\n    return 0\n"}})
        assert (broken["tests_passed"], broken["tests_failed"]) == (0, 2)
        secret = await call_ok(client, "run_tests", {"test_command": "cat .env", "use_workspace": False})
        assert secret["exit_code"] != 0 and "secret" not in secret["stdout"] and secret["workspace"] is None
        (root / "NOTES.md").write_text("an edit on disk, not committed\n")
        leaked = await call_ok(client, "run_tests", {"test_command": "ls -a; cat .env"})
        assert "NOTES.md" in leaked["stdout"] and "secret" not in leaked["stdout"] + leaked["stderr"]
        dependency = await call_ok(client, "run_tests", {"tests": "import fancylib\n\nassert fancylib.ANSWER == 42\n"})
        assert dependency["passed"] is True, dependency
        await call_ok(client, "end_episode", {"outcome": "success"})
        # What the episode touched: the patched file, the file given, the file edited on disk.
        [solution] = (await call_ok(client, "recall_solutions", {"query": "make the tests pass"}))["solutions"]
        assert solution["files_touched"] == ["NOTES.md", "calc.py", "test_calc.py"]

    store = EpisodeStore.open(settings.episode_db_url)
    steps = store.detail(started["episode_id"]).steps
    [scenario] = scenarios_from_log(store)
    store.close()
    recorded = [(s.arguments.get("commit"), s.arguments.get("repo")) for s in steps if s.tool == "run_tests"]
    assert recorded == [(head, str(root))] * 4 + [(None, None)] + [(head, str(root))] * 2
    assert (scenario.workspace_ref, scenario.workspace) == (head, str(root))


def test_a_project_site_is_one_the_sandboxs_python_can_load(tmp_path: Path) -> None:
    from envpool.sandbox import sandbox_python
    from envpool.sandbox.sites import project_site

    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert sandbox_python("bwrap") == sandbox_python("bwrap-fresh") == python
    assert sandbox_python("unsafe-local") is None  # the host's own environment: nothing to bind
    assert project_site(None, python) is None and project_site(tmp_path, python) is None
    (tmp_path / "venv" / "lib" / "python3.9" / "site-packages").mkdir(parents=True)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("version = 3.9.18\n")
    assert project_site(tmp_path, python) is None  # another version's compiled modules would not load
    assert project_site(tmp_path, "3.9") == tmp_path / "venv" / "lib" / "python3.9" / "site-packages"
    assert project_site(tmp_path, None) is None  # a sandbox whose Python is unknown
    (tmp_path / "venv" / "lib" / f"python{python}" / "site-packages").mkdir(parents=True)
    assert project_site(tmp_path, python) == tmp_path / "venv" / "lib" / f"python{python}" / "site-packages"
    (tmp_path / "venv" / "pyvenv.cfg").unlink()
    assert project_site(tmp_path, python) is None  # a folder named venv is not a virtualenv


@pytest.mark.anyio
async def test_a_src_layout_project_installed_editable_imports_itself_in_the_sandbox(tmp_path: Path) -> None:
    """`pip install -e .` of a src layout puts `src` on the path through a .pth file, which the
    sandbox does not read: its tests import the package from the run's copy of `src` anyway, both
    under pytest in a subprocess and as `tests` run in the sandbox's own interpreter."""
    root = tmp_path / "project"
    (root / "src" / "mypkg").mkdir(parents=True)
    (root / "src" / "mypkg" / "__init__.py").write_text("def answer():\n    return 42\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_answer.py").write_text(
        "from mypkg import answer\n\ndef test_it():\n    assert answer() == 42\n"
    )
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / ".gitignore").write_text(".venv/\n*.egg-info/\n")
    editable_install(root)
    commit_all(root)
    settings = load_settings(home=tmp_path / "home", workspace=root, pool_envs=1)
    async with Client(build_server(settings), mode="legacy") as client:
        pytest_run = await call_ok(client, "run_tests", {"test_command": "python -m pytest -q tests"})
        assert (pytest_run["passed"], pytest_run["tests_passed"]) == (True, 1), pytest_run
        # The run's own copy: an edit sent with the call is what the package import sees.
        edited = await call_ok(
            client,
            "run_tests",
            {
                "test_command": "python -m pytest -q tests",
                "files": {"src/mypkg/__init__.py": "def answer():\n    return 0\n"},
            },
        )
        assert (edited["tests_passed"], edited["tests_failed"]) == (0, 1), edited
        inline = await call_ok(client, "run_tests", {"tests": "import mypkg\n\nassert mypkg.answer() == 42\n"})
        assert inline["passed"] is True, inline


def test_editable_paths_are_the_workspace_folders_pth_files_add(tmp_path: Path) -> None:
    """Path lines and setuptools' finder mappings (a flat layout's editable install), both from
    real installs; a folder outside the workspace, code lines and comments give nothing."""
    from envpool.sandbox.sites import editable_paths

    flat = tmp_path / "flat"
    (flat / "mypkg").mkdir(parents=True)
    (flat / "mypkg" / "__init__.py").write_text("")
    (flat / "pyproject.toml").write_text(PYPROJECT)
    site = editable_install(flat)
    assert editable_paths(site, flat) == (".",)  # the finder maps mypkg to flat/mypkg
    src = tmp_path / "src-layout"
    (src / "src" / "mypkg").mkdir(parents=True)
    (src / "src" / "mypkg" / "__init__.py").write_text("")
    (src / "pyproject.toml").write_text(PYPROJECT)
    site = editable_install(src)
    assert editable_paths(site, src) == ("src",)
    (site / "zz_more.pth").write_text(f"# a comment\n{tmp_path}\nimport os; os.getcwd()\n{src}/lib\n\n")
    assert editable_paths(site, src) == ("src", "lib")  # tmp_path is outside the workspace
    assert editable_paths(site, src / "src") == (".",)


@pytest.mark.anyio
async def test_a_served_workspace_outside_git_is_not_sent(client: Client) -> None:
    """Its files could be anything (a home directory): only `files` go, and the reply says why."""
    given = await call_ok(client, "run_tests", {"files": {"calc.py": CALC, "test_calc.py": TESTS}, "tests": TESTS})
    assert given["workspace"].startswith("not sent: ") and "is not a git working tree" in given["workspace"]
    assert given["tests_passed"] == 1


@pytest.mark.anyio
async def test_test_functions_given_as_code_are_run_not_just_defined(client: Client) -> None:
    """Run as a script, test code only defines its test functions: a failing test passed, +1."""
    given = await call_ok(client, "run_tests", {"files": {"calc.py": CALC}, "tests": TESTS})
    assert (given["passed"], given["tests_passed"], given["tests_failed"]) == (False, 1, 1)
    assert "assert 4 == 5" in given["stdout"]


@pytest.mark.anyio
async def test_bad_requests_are_refused_with_a_reason(client: Client) -> None:
    assert "exactly one of test_command" in await call_error(client, "run_tests", {"files": {"a.py": ""}})
    assert "exactly one of test_command" in await call_error(
        client, "run_tests", {"test_command": "true", "tests": "x"}
    )
    for path in ("../escape.py", "/etc/passwd", "-rf", "a/../../b"):
        message = await call_error(client, "run_code", {"code": "pass", "files": {path: "x"}})
        assert "invalid file path" in message, message
    assert "timeout_s" in await call_error(client, "run_code", {"code": "pass", "timeout_s": 10_000})
    # JSON carries lone surrogates; no program text can: refused naming the field, not run.
    for arguments, field in [
        ({"code": "print(1)\ud800"}, "code"),
        ({"code": "print(input())", "stdin": "\udfff"}, "stdin"),
        ({"code": "pass", "files": {"data.txt": "a\ud800"}}, "data.txt"),
    ]:
        message = await call_error(client, "run_code", arguments)
        assert field in message and "unicode" in message.lower(), message


def test_output_is_cut_to_head_and_tail_down_to_a_zero_budget() -> None:
    # fit_result scales the budget towards 0 when a result's other fields are over the limit.
    assert _fit("abcdefghij", 4) == ("ab\n[... 6 characters omitted ...]\nij", True)
    assert _fit("abcdefghij", 0) == ("\n[... 10 characters omitted ...]\n", True)
    assert _fit("abc", 3) == ("abc", False)


def test_rlide_run_cli(tmp_path: Path) -> None:
    rlide = Path(sys.executable).parent / "rlide"
    prog = tmp_path / "prog.py"
    prog.write_text("import os\nprint(sorted(os.listdir('/')))\nraise SystemExit(3)\n")
    done = subprocess.run([str(rlide), "run", str(prog), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "error" and "root" not in result["stdout"] and "home" not in result["stdout"]
    shell = subprocess.run(
        [str(rlide), "run", "-", "--language", "shell", "--timeout-s", "0.5"],
        input="sleep 5",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 124 and "[rlide: timeout]" in shell.stderr
