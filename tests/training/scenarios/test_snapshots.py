"""Replays at a git commit: `GitSnapshots` reads the commit (or a working tree), the sandbox runs the tests.

A real temporary repository whose tests pass at one commit and fail at the next.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.git_repos import git, plain_venv
from training.scenarios.base import Scenario, Verifier, verify
from training.scenarios.errors import VerifierUnavailable
from training.scenarios.snapshots import GitSnapshots, NotAWorkingTree, SnapshotUnavailable

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

GOOD = "def add(a, b):\n    return a + b\n"
BROKEN = "def add(a, b):\n    return a - b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
FIX = (
    "The fix:\n```diff\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n-    return a - b\n+    return a + b\n```"
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """`good` (tag): tests pass; `main`, one commit later: `add` subtracts and the tests fail."""
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "calc.py").write_text(GOOD)
    (root / "tests" / "test_calc.py").write_text(TESTS)
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    (root / "link.py").symlink_to("calc.py")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "add works")
    git(root, "tag", "good")
    (root / "calc.py").write_text(BROKEN)
    git(root, "commit", "-q", "-am", "break add")
    (root / "calc.py").write_text("uncommitted edits never reach a snapshot\n")
    return root


def test_a_commit_is_read_exactly_without_touching_the_worktree(repo: Path) -> None:
    snapshots = GitSnapshots()
    good = snapshots.files(repo, "good")
    assert good.files == {"calc.py": GOOD, "tests/test_calc.py": TESTS}
    assert sorted(good.skipped) == ["link.py", "logo.png"]  # a symlink and a binary cannot travel as text
    assert good.commit == git(repo, "rev-parse", "good")
    head = snapshots.files(str(repo), "main")
    assert head.files["calc.py"] == BROKEN and head.commit == git(repo, "rev-parse", "HEAD")
    assert snapshots.files(repo, head.commit[:10]).files == head.files  # an abbreviated id resolves too
    assert (repo / "calc.py").read_text().startswith("uncommitted")
    assert git(repo, "status", "--porcelain") == "M calc.py"


def test_missing_repositories_refs_and_oversized_snapshots_say_why(repo: Path, tmp_path: Path) -> None:
    snapshots = GitSnapshots()
    with pytest.raises(VerifierUnavailable, match="does not exist"):
        snapshots.files(tmp_path / "nowhere", "main")
    (tmp_path / "plain").mkdir()
    with pytest.raises(VerifierUnavailable, match="not a git repository"):
        snapshots.files(tmp_path / "plain", "main")
    with pytest.raises(VerifierUnavailable, match="has no commit 'gone'"):
        snapshots.files(repo, "gone")
    with pytest.raises(VerifierUnavailable, match="has no commit"):
        snapshots.files(repo, "0" * 40)
    for bad in ("--output=/tmp/x", "-h", "main extra", ""):
        with pytest.raises(VerifierUnavailable, match="is not a git ref"):
            snapshots.files(repo, bad)
    with pytest.raises(VerifierUnavailable, match=r"too large.*3 files"):
        GitSnapshots(max_files=2).files(repo, "good")
    with pytest.raises(VerifierUnavailable, match=r"too large.*limits 4096 files, 40 bytes"):
        GitSnapshots(max_bytes=40).files(repo, "good")


def test_a_working_tree_is_read_as_on_disk_without_ignored_files(repo: Path, tmp_path: Path) -> None:
    """What run_tests sends of the served workspace: uncommitted edits and new files included,
    ignored files (a secret), symlinks and binaries not; `commit` is HEAD's id."""
    (repo / ".gitignore").write_text("*.env\n")
    (repo / "local.env").write_text("TOKEN=never-sent\n")
    (repo / "deploy.pem").write_text("-----BEGIN PRIVATE KEY-----\n")  # not ignored, but a key nobody committed
    (repo / ".docker").mkdir()
    (repo / ".docker" / "config.json").write_text('{"auths": {"registry": {"auth": "dG9rZW4="}}}\n')  # so is this
    (repo / "tests" / "test_new.py").write_text("def test_new():\n    pass\n")
    git(repo, "rm", "-q", "--cached", "logo.png")
    (repo / "logo.png").unlink()  # deleted: listed by neither the index nor the disk
    (repo / "data.bin").write_bytes(b"\x00\xff")
    tree = GitSnapshots().working_tree(repo)
    assert tree.files == {
        ".gitignore": "*.env\n",
        "calc.py": "uncommitted edits never reach a snapshot\n",
        "tests/test_calc.py": TESTS,
        "tests/test_new.py": "def test_new():\n    pass\n",
    }
    assert sorted(tree.skipped) == [".docker/config.json", "data.bin", "deploy.pem", "link.py"]
    assert tree.commit == git(repo, "rev-parse", "HEAD")
    assert tree.changed == (
        ".docker/config.json",
        ".gitignore",
        "calc.py",
        "data.bin",
        "deploy.pem",
        "logo.png",
        "tests/test_new.py",
    )
    inside = GitSnapshots().working_tree(repo / "tests")  # a subdirectory: its files, relative to it
    assert inside.files == {"test_calc.py": TESTS, "test_new.py": "def test_new():\n    pass\n"}
    assert inside.changed == ("test_new.py",)
    (tmp_path / "plain").mkdir()
    with pytest.raises(NotAWorkingTree, match="not a git working tree"):
        GitSnapshots().working_tree(tmp_path / "plain")
    with pytest.raises(SnapshotUnavailable, match=r"working tree of .* too large.*use_workspace=false"):
        GitSnapshots(max_files=3).working_tree(repo)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    (fresh / "a.py").write_text("x = 1\n")
    assert GitSnapshots().working_tree(fresh) == type(tree)(commit="", files={"a.py": "x = 1\n"}, changed=("a.py",))


def test_installed_folders_are_left_out_of_a_working_tree(repo: Path) -> None:
    """A plain `python -m venv .venv` writes no .gitignore entry: its files, node_modules, caches
    and a virtualenv of any name stay home, one skipped entry each; tracked files always travel."""
    plain_venv(repo / ".venv")
    plain_venv(repo / "tools" / "py")
    for rel in (
        "node_modules/left-pad/index.js",
        "web/node_modules/x/a.js",
        "tests/__pycache__/t.py",
        "pkg.egg-info/PKG",
    ):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("installed\n")
    (repo / "build").mkdir()
    (repo / "build" / "gen.py").write_text("TRACKED = True\n")
    git(repo, "add", "-f", "build/gen.py")  # tracked, though its folder is a build output's name
    (repo / "tools" / "run.py").write_text("print('mine')\n")
    tree = GitSnapshots(max_files=12).working_tree(repo)  # the venvs alone hold more files than that
    assert set(tree.files) == {"calc.py", "tests/test_calc.py", "build/gen.py", "tools/run.py"}
    assert sorted(tree.skipped) == [
        ".venv/",
        "link.py",
        "logo.png",
        "node_modules/",
        "pkg.egg-info/",
        "tests/__pycache__/",
        "tools/py/",
        "web/node_modules/",
    ]


def test_a_tree_too_large_names_its_largest_folders(repo: Path) -> None:
    (repo / "data").mkdir()
    for i in range(6):
        (repo / "data" / f"sample{i}.txt").write_text("x" * 1000)
    with pytest.raises(SnapshotUnavailable) as raised:
        GitSnapshots(max_files=5).working_tree(repo)
    message = str(raised.value)
    assert "largest: data/ (6 files" in message and ".gitignore" in message
    with pytest.raises(SnapshotUnavailable, match=r"largest: data/ \(6 files, 6000 bytes\)"):
        GitSnapshots(max_bytes=5000).working_tree(repo)


@pytest.fixture
def sandbox() -> Iterator[object]:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap missing: `make setup` installs it")
    from training.scenarios.sandbox_runner import SandboxRunner

    runner = SandboxRunner()
    yield runner
    runner.close()


def _scenario(repo: Path, ref: str) -> Scenario:
    """A replay at `ref` of the repository, as a log scenario holds it (`_scenario_from_detail`)."""
    data = {
        "project": {},
        "fail_to_pass": ["tests/test_calc.py::test_add"],
        "pass_to_pass": [],
        "trusted": {"tests/test_calc.py": hashlib.sha256(TESTS.encode()).hexdigest()},  # the commit's tests
        "files": {},
        "deleted": [],
    }
    return Scenario(
        id=f"git/{ref}",
        messages=({"role": "user", "content": "make the tests pass"},),
        verifier=Verifier("command", data),
        workspace_ref=ref,
        workspace=str(repo),
    )


def test_a_replay_reads_its_commit_and_runs_the_students_patch_on_it(repo: Path, sandbox: object) -> None:
    from training.scenarios.sandbox_runner import SandboxRunner

    assert isinstance(sandbox, SandboxRunner)
    assert verify(_scenario(repo, "main"), "nothing to change", workspace_runner=sandbox) == 0.0
    assert verify(_scenario(repo, "main"), FIX, workspace_runner=sandbox) == 1.0  # the student's patch, applied
    assert verify(_scenario(repo, "main"), FIX.replace("a + b", "a * b"), workspace_runner=sandbox) == 0.0
    with pytest.raises(VerifierUnavailable, match="has no commit 'gone'"):
        verify(_scenario(repo, "gone"), FIX, workspace_runner=sandbox)
    no_repo = Scenario(id="x", messages=(), verifier=_scenario(repo, "main").verifier, workspace_ref="main")
    with pytest.raises(VerifierUnavailable, match="re-runs its project's tests"):
        verify(no_repo, FIX, workspace_runner=sandbox)


def test_a_commit_is_what_its_id_names_whatever_the_repository_says(repo: Path) -> None:
    """An agent can write the repository's replace refs, attributes and filter drivers; the commit a
    verifier trusts as its tests is read as the objects it names."""
    good = git(repo, "rev-parse", "good")
    git(repo, "replace", good, git(repo, "rev-parse", "main"))  # `good` now shows `main`'s tree to git
    (repo / ".git" / "info" / "attributes").write_text("* export-ignore\n*.py filter=evil\n")
    git(repo, "config", "filter.evil.smudge", "sed s/return/raise/")
    assert git(repo, "show", "good:calc.py") == BROKEN.strip()  # what git itself now says
    snapshot = GitSnapshots().files(repo, good)
    assert snapshot.files == {"calc.py": GOOD, "tests/test_calc.py": TESTS}
    assert GitSnapshots().texts_at(repo, good, ["calc.py"]) == {"calc.py": GOOD}
