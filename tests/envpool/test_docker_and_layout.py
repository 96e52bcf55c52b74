"""The docker backend against a real engine (started by the tests when they can) and package rules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from envpool.sandbox.base import RunRequest, RunStatus, TestRunRequest, prepare_test_run
from envpool.sandbox.docker import DockerConfig, DockerSandbox, image_python

ENVPOOL = Path(__file__).resolve().parents[2] / "envpool"


@pytest.mark.usefixtures("docker_engine")
def test_docker_runs_and_contains(tmp_path: Path) -> None:
    sb = DockerSandbox()
    try:
        assert sb.run(RunRequest(code="print('hi')")).stdout == "hi\n"
        net = sb.run(RunRequest(code="import socket; socket.create_connection(('127.0.0.1', 22), timeout=2)"))
        assert net.status is RunStatus.ERROR
        assert sb.run(RunRequest(code="while True: pass", timeout_s=1)).status is RunStatus.TIMEOUT
        assert sb.run(RunRequest(code="x = bytearray(4 * 1024**3)", memory_mb=256)).status is RunStatus.MEMORY_LIMIT
        bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
        assert sb.run(RunRequest(code=bomb, timeout_s=1.5)).status is RunStatus.TIMEOUT
        host_file = tmp_path / "pwned"
        write = f"open({str(host_file)!r}, 'w').write('x')"
        assert sb.run(RunRequest(code=write)).status is RunStatus.ERROR and not host_file.exists()
        assert sb.run(RunRequest(code="print('alive')")).stdout == "alive\n"
    finally:
        sb.close()


@pytest.mark.usefixtures("docker_engine")
def test_docker_runs_a_projects_tests_as_bwrap_does(tmp_path: Path) -> None:
    """run_tests under docker: pytest from the tools' site, the project's virtualenv site and its
    editable `src` (the run's own copy), and `patch` from the image."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "fancylib.py").write_text("ANSWER = 42\n")
    files = {
        "src/mypkg/__init__.py": "def answer():\n    return 41\n",
        "tests/test_answer.py": "import fancylib\nfrom mypkg import answer\n\n\ndef test_it():\n"
        "    assert answer() == fancylib.ANSWER\n",
    }
    fix = (
        "--- a/src/mypkg/__init__.py\n+++ b/src/mypkg/__init__.py\n"
        "@@ -1,2 +1,2 @@\n def answer():\n-    return 41\n+    return 42\n"
    )
    command = "python3 -m pytest -q -p no:cacheprovider tests"
    sb = DockerSandbox(DockerConfig(project_site=str(site), project_paths=("src",)))
    try:
        failing = sb.run(prepare_test_run(TestRunRequest(files=files, test_command=command)))
        assert failing.exit_code == 1 and "1 failed" in failing.stdout, (failing.stdout, failing.stderr)
        passing = sb.run(prepare_test_run(TestRunRequest(files=files, patch=fix, test_command=command)))
        assert passing.ok and "1 passed" in passing.stdout, (passing.stdout, passing.stderr)
        version = sb.run(RunRequest(code="import sys; print('%d.%d' % sys.version_info[:2])")).stdout.strip()
    finally:
        sb.close()
    assert image_python() == version  # the label setup_docker.sh gives the image says the truth


def test_envpool_imports_none_of_the_other_packages() -> None:
    forbidden = ("mcp_server", "memory", "training")
    for path in ENVPOOL.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path}: imports {name}"


def test_forkserver_uses_only_the_standard_library() -> None:
    import sys

    tree = ast.parse((ENVPOOL / "sandbox" / "forkserver.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for mod in mods:
                top = mod.split(".")[0]
                assert top == "__future__" or top in sys.stdlib_module_names, mod
