"""`apply_patch`: rlide's own diffs round-trip, real git diffs apply as GNU patch applies them, and
every trick a policy could try through a diff's names or headers is refused with its reason."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st

from envpool.verifiers.patches import PatchError, PatchResult, apply_patch
from tests.git_repos import git
from training.scenarios.snapshots import unified_diff

GNU_PATCH = shutil.which("patch")
requires_gnu_patch = pytest.mark.skipif(GNU_PATCH is None, reason="GNU patch is not installed; apt-get install patch")

PATHS = ["a.py", "pkg/b.py", "c.txt"]
_line = st.sampled_from(["a", "b", "", " c", "d\r", "\tx", "a b"])
_text = st.builds(
    lambda lines, end: "\n".join(lines) + ("\n" if end and lines else ""),
    st.lists(_line, max_size=10),
    st.booleans(),
)
_tree = st.fixed_dictionaries({path: st.none() | _text for path in PATHS})


def _existing(tree: dict[str, str | None]) -> dict[str, str]:
    return {path: text for path, text in tree.items() if text is not None}


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(old=_tree, new=_tree)
def test_applies_everything_rlide_unified_diff_writes(old: dict[str, str | None], new: dict[str, str | None]) -> None:
    # unified_diff writes nothing for a missing file against an empty one: no diff can say that
    hypothesis.assume(all({old[p], new[p]} != {None, ""} for p in PATHS))
    diff = unified_diff(old, new)
    hypothesis.assume(diff)
    before = _existing(old)
    result = apply_patch(before, diff)
    assert result.files == _existing(new)
    assert set(result.touched) == {p for p in PATHS if old[p] != new[p]}
    assert before == _existing(old)  # the input is untouched


def test_creates_changes_and_deletes_files() -> None:
    old = {"keep.py": "k\n", "mod.py": "1\n2\n3\n", "gone.py": "bye\n"}
    new = {"keep.py": "k\n", "mod.py": "1\ntwo\n3", "new/made.py": "hi\r\nthere\r\n", "gone.py": None}
    result = apply_patch(old, unified_diff(dict(old), new))
    assert result == PatchResult(
        files={"keep.py": "k\n", "mod.py": "1\ntwo\n3", "new/made.py": "hi\r\nthere\r\n"},
        touched=("gone.py", "mod.py", "new/made.py"),
    )


# --- agreement with GNU patch -----------------------------------------------------------------


def gnu_patch(files: dict[str, str], patch: str, *options: str) -> dict[str, str] | None:
    """The files after `patch --batch --forward -p1` in a scratch folder, or None if it failed."""
    assert GNU_PATCH is not None
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        for path, text in files.items():
            (scratch / path).parent.mkdir(parents=True, exist_ok=True)
            (scratch / path).write_bytes(text.encode())
        done = subprocess.run(
            [GNU_PATCH, "--batch", "--forward", "-p1", "--no-backup-if-mismatch", "--reject-file=-", *options],
            cwd=scratch,
            input=patch.encode(),
            capture_output=True,
        )
        if done.returncode != 0:
            return None
        return {
            str(file.relative_to(scratch)): file.read_bytes().decode()
            for file in sorted(scratch.rglob("*"))
            if file.is_file()
        }


def ours(files: dict[str, str], patch: str) -> dict[str, str] | None:
    try:
        return apply_patch(files, patch).files
    except PatchError:
        return None


def git_diff(old: dict[str, str], new: dict[str, str], repo: Path) -> str:
    """The `git diff` of a commit of `old` to `new`, made by git itself."""
    git(repo.parent, "init", "-q", repo.name)
    git(repo, "config", "core.autocrlf", "false")
    for path, text in old.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(text.encode())
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "old")
    for path in old.keys() - new.keys():
        (repo / path).unlink()
    for path, text in new.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(text.encode())
    git(repo, "add", "-A")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", "-C", str(repo), "diff", "--cached"], env=env, capture_output=True, check=True)
    return done.stdout.decode()


def _module(name: str, functions: int) -> str:
    parts = [f'"""The {name} module."""\n\nimport os\n']
    for k in range(functions):
        parts.append(f"\n\ndef {name}_{k}(value):\n    total = value * {k}\n\n    return total + {k}\n")
    return "".join(parts)


OLD_TREE = {
    "app/core.py": _module("core", 12),
    "app/util.py": _module("util", 4),
    "app/old.py": "print('old')\n",
    "README.md": "# title\n\nsome text\nno newline at the end",
    "win.txt": "one\r\ntwo\r\nthree\r\nfour\r\n",
    "conftest.py": "import os\n",
    "my dir/été.py": "x = 1\n",
}


def _new_tree() -> dict[str, str]:
    new = {path: text for path, text in OLD_TREE.items() if path != "app/old.py"}
    core = new["app/core.py"]
    core = core.replace("total = value * 2\n", "total = value * 2 + 1\n")
    core = core.replace("def core_7(value):\n", "def core_7(value):\n    # seven\n")
    core = core.replace("    return total + 11\n", "    return total + 11\n\n\nLAST = True\n")
    new["app/core.py"] = core
    new["app/util.py"] = new["app/util.py"].replace("import os\n", "import os\nimport sys\n")
    new["app/made.py"] = "made = 1\n\n\nprint(made)\n"
    new["README.md"] = "# title\n\nsome text\nstill no newline, changed"
    new["win.txt"] = "one\r\n2\r\nthree\r\nfour\r\n"
    new["my dir/été.py"] = "x = 2\n"
    return new


@requires_gnu_patch
def test_git_diffs_apply_as_gnu_patch_applies_them(tmp_path: Path) -> None:
    new = _new_tree()
    diff = git_diff(OLD_TREE, new, tmp_path / "repo")
    assert "\\ No newline at end of file" in diff and "new file mode" in diff and "deleted file mode" in diff
    assert '+++ "b/my dir/\\303\\251t\\303\\251.py"' in diff
    assert ours(OLD_TREE, diff) == gnu_patch(OLD_TREE, diff) == new


@requires_gnu_patch
def test_hunks_away_from_their_stated_lines_apply_where_gnu_patch_puts_them(tmp_path: Path) -> None:
    diff = git_diff(OLD_TREE, _new_tree(), tmp_path / "repo")
    moved = dict(OLD_TREE)
    # lines added between hunks, and removed before them: every later hunk is some lines off
    moved["app/core.py"] = (
        moved["app/core.py"]
        .replace("def core_4(value):\n", "def extra():\n    pass\n\n\ndef core_4(value):\n")
        .replace("def core_9(value):\n    total = value * 9\n\n    return total + 9\n", "")
    )
    expected = gnu_patch(moved, diff)
    assert expected is not None and "def extra():" in expected["app/core.py"]
    assert ours(moved, diff) == expected
    assert "    # seven\n" in expected["app/core.py"] and "LAST = True\n" in expected["app/core.py"]


@requires_gnu_patch
def test_a_hunk_whose_context_is_gone_fails_as_in_gnu_patch(tmp_path: Path) -> None:
    diff = git_diff(OLD_TREE, _new_tree(), tmp_path / "repo")
    changed = {**OLD_TREE, "app/core.py": OLD_TREE["app/core.py"].replace("def core_7(value):\n", "def seven(v):\n")}
    assert gnu_patch(changed, diff) is None
    why = r"^app/core.py: hunk 2 \(@@ -\d+,6 \+\d+,7 @@\): its old line 3 'def core_7\(value\):\\n' is not in"
    with pytest.raises(PatchError, match=why):
        apply_patch(changed, diff)


@requires_gnu_patch
@pytest.mark.parametrize(
    "patch",
    [
        # a C-quoted name, decoded by both
        '--- a/x.py\n+++ "b/x\\056py"\n@@ -1 +1 @@\n-a\n+b\n',
        # an empty context line that lost its leading space, and counts left out
        "--- a/x.py\n+++ b/x.py\n@@ -1,5 +1,5 @@\n a\n\n-c\n+C\n d\n e\n@@ -7 +7 @@\n-g\n+G\n",
        # a stated line a few lines off, prose around, a timestamp after a tab
        "Here is the fix:\n--- a/x.py\t2024-01-01 10:00:00\n+++ b/x.py\t2024-01-01 10:00:01\n"
        "@@ -7,3 +7,3 @@ def f():\n e\n-f\n+F\n g\nThat is all.\n",
        # a pure insertion (diff -U0) past the end, which GNU patch appends
        "--- a/x.py\n+++ b/x.py\n@@ -40,0 +41 @@\n+end\n",
    ],
)
def test_llm_shaped_diffs_apply_as_gnu_patch_applies_them(patch: str) -> None:
    files = {"x.py": "a\n\nc\nd\ne\nf\ng\n"}
    expected = gnu_patch(files, patch)
    assert expected is not None
    assert ours(files, patch) == expected


@st.composite
def _edits(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Unique old lines and an edit of them."""
    old = [f"v{k}\n" for k in range(draw(st.integers(2, 60)))]
    new: list[str] = []
    for k, line in enumerate(old):
        action = draw(st.sampled_from(["keep"] * 12 + ["drop", "change", "add"]))
        new += {"keep": [line], "drop": [], "change": [f"c{k}\n"], "add": [line, f"n{k}\n"]}[action]
    return old, new


@requires_gnu_patch
@hypothesis.settings(max_examples=80, deadline=None)
@hypothesis.given(edit=_edits(), data=st.data())
def test_offsets_agree_with_gnu_patch_without_fuzz(edit: tuple[list[str], list[str]], data: st.DataObject) -> None:
    old, new = edit
    diff = unified_diff({"f.py": "".join(old)}, {"f.py": "".join(new)})
    hypothesis.assume(diff)
    # Lines put in between hunks move the later ones; inside a hunk, both fail (no fuzz). Never
    # before the first or after the last line: GNU patch pins a hunk that starts or ends the file
    # there (less context on one side), where this applier looks for an exact match.
    hunks = [(int(a) - 1, int(a) - 1 + int(n or 1)) for a, n in re.findall(r"^@@ -(\d+)(?:,(\d+))?", diff, re.M)]
    inside = data.draw(st.booleans())
    spots = [at for at in range(1, len(old)) if inside == any(start < at < end for start, end in hunks)]
    hypothesis.assume(spots)
    at = data.draw(st.sampled_from(spots))
    extra = [f"x{k}\n" for k in range(data.draw(st.integers(1, 5)))]
    files = {"f.py": "".join(old[:at] + extra + old[at:])}
    expected = gnu_patch(files, diff, "--fuzz=0")
    assert ours(files, diff) == expected
    assert (expected is None) == inside


# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quoted", "path"),
    [
        ('"b/conf\\164est.py"', "conftest.py"),
        ('"b/\\303\\251t\\303\\251.py"', "été.py"),
        ('"b/q\\"uote.py"', 'q"uote.py'),
        ('"b/dir/x.py"\t2024-01-01 00:00:00', "dir/x.py"),
    ],
)
def test_git_quoted_names_are_decoded_as_git_writes_them(quoted: str, path: str) -> None:
    result = apply_patch({}, f"--- /dev/null\n+++ {quoted}\n@@ -0,0 +1 @@\n+x\n")
    assert result == PatchResult(files={path: "x\n"}, touched=(path,))


@pytest.mark.parametrize(("quoted", "path"), [('"b/a\\tb.py"', "a\tb.py"), ('"b/a\\nb\\\\.py"', "a\nb\\.py")])
def test_quoted_control_characters_are_decoded_then_refused(quoted: str, path: str) -> None:
    with pytest.raises(PatchError) as raised:
        apply_patch({}, f"--- /dev/null\n+++ {quoted}\n@@ -0,0 +1 @@\n+x\n")
    assert str(raised.value) == f"line 1: invalid path {path!r}: no backslash, NUL or other control character"


def test_a_quoted_conftest_is_seen_as_conftest() -> None:
    patch = (
        'diff --git "a/conf\\164est.py" "b/conf\\164est.py"\nindex 1..2 100644\n'
        '--- "a/conf\\164est.py"\n+++ "b/conf\\164est.py"\n@@ -1 +1 @@\n-import os\n+import pytest\n'
    )
    result = apply_patch({"conftest.py": "import os\n"}, patch)
    assert result.touched == ("conftest.py",)
    assert result.files == {"conftest.py": "import pytest\n"}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("b/../x.py", r"invalid path '\.\./x\.py': no '\.', '\.\.' or empty components"),
        ("b/a/../../x.py", "no '.', '..' or empty components"),
        ("b/./x.py", "no '.', '..' or empty components"),
        ("b//x.py", "invalid path '/x.py': must be relative"),
        ("/etc/passwd", "absolute path '/etc/passwd': name files relative to the workspace"),
        ('"/etc/passwd"', "absolute path"),
        ('"b/x\\000.py"', "control character"),
        ("b/x\x00.py", "control character"),
        ("b/a\\b.py", "backslash"),
        ('"b/\\056\\056/x.py"', "no '.', '..' or empty components"),
        ("b/-rf", "not start with '-'"),
        ("x.py", r"no file name left in 'x\.py' after stripping 1 leading folder\(s\): write a/PATH and b/PATH"),
        ('"b/x', "no closing quote"),
        ('"b/\\q"', "bad escape"),
        ('"b/\\377"', "not UTF-8"),
        ("b/" + "n" * 300, "a component longer than 255 bytes"),
    ],
)
def test_names_outside_the_workspace_are_refused(name: str, why: str) -> None:
    with pytest.raises(PatchError, match=why):
        apply_patch({}, f"--- /dev/null\n+++ {name}\n@@ -0,0 +1 @@\n+x\n")


# --- refusals ---------------------------------------------------------------------------------

RENAME = "diff --git a/x.py b/conftest.py\nsimilarity index 100%\nrename from x.py\nrename to conftest.py\n"
REFUSALS = {
    "rename onto conftest.py": (RENAME, r"^line 1: 'diff --git' must name one file twice .*renames are refused"),
    "rename lines": (
        "diff --git a/x.py b/x.py\nsimilarity index 90%\nrename from x.py\nrename to x.py\n",
        r"^x\.py: line 2: renames are refused .*deletion of the old file .* creation of the new one",
    ),
    "rename lines outside a git header": (
        "rename from x.py\nrename to conftest.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n",
        "^line 1: renames are refused",
    ),
    "copy": (
        "diff --git a/x.py b/x.py\ncopy from x.py\ncopy to x.py\n",
        r"copies are refused .*write a creation \(--- /dev/null\) of the copy",
    ),
    "mode change": (
        "diff --git a/x.py b/x.py\nold mode 100644\nnew mode 100755\n",
        r"^x\.py: line 2: mode changes are refused \('old mode 100644'\): leave the file's mode as it is",
    ),
    "symlink": (
        "diff --git a/l.py b/l.py\nnew file mode 120000\nindex 0..1\n--- /dev/null\n+++ b/l.py\n"
        "@@ -0,0 +1 @@\n+x.py\n\\ No newline at end of file\n",
        r"^l\.py: cannot create a symbolic link: only regular files \(mode 100644 or 100755\)",
    ),
    "submodule": (
        "diff --git a/sub b/sub\nnew file mode 160000\nindex 0..1\n--- /dev/null\n+++ b/sub\n"
        "@@ -0,0 +1 @@\n+Subproject commit 1234\n",
        "cannot create a submodule",
    ),
    "binary": (
        "diff --git a/x.py b/x.py\nindex 1..2 100644\nGIT binary patch\nliteral 3\nKcmZo*\n\nliteral 0\n",
        "binary patches are refused",
    ),
    "binary, diff style": ("Binary files a/x.py and b/x.py differ\n", "binary patches are refused"),
    "different --- and +++ names": (
        "--- a/x.py\n+++ b/conftest.py\n@@ -1 +1 @@\n-a\n+b\n",
        r"^line 1: '---' names x\.py but '\+\+\+' names conftest\.py: renames are refused",
    ),
    "git header and --- name different files": (
        "diff --git a/x.py b/x.py\n--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-a\n+b\n",
        r"^x\.py: the '---'/'\+\+\+' lines name y\.py, not the file of 'diff --git'",
    ),
    "creating a file that exists": (
        "--- /dev/null\n+++ b/x.py\n@@ -0,0 +1 @@\n+b\n",
        r"^x\.py: the patch creates it but it exists: diff against its content \(--- a/x\.py\)",
    ),
    "changing a file that does not exist": (
        "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n",
        "^nope.py: no such file to change or delete; to create it write '--- /dev/null'",
    ),
    "deleting a file that does not exist": (
        "--- a/nope.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n",
        "^nope.py: no such file to change or delete",
    ),
    "two sections for one file": (
        "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-b\n+c\n",
        r"^x\.py: two sections of the patch change it; put all its hunks in one section",
    ),
    "deleting part of a file": (
        "--- a/x.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n",
        r"^x\.py: deleting it must remove every line, but 1 would remain",
    ),
    "a file inside a file": (
        "--- /dev/null\n+++ b/x.py/y.py\n@@ -0,0 +1 @@\n+b\n",
        r"^x\.py/y\.py: the patch creates it but x\.py is a file",
    ),
    "a file where a folder is": (
        "--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n+b\n",
        "^d: the patch creates it but it is a folder of other files",
    ),
    "context that is not there": (
        "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n b\n-a\n+A\n",
        r"^x\.py: hunk 1 \(@@ -1,2 \+1,2 @@\): its 2 context and removed lines do not appear together in the file",
    ),
    "a line missing its final newline": (
        "--- a/d/e.py\n+++ b/d/e.py\n@@ -1 +1 @@\n-e\n+E\n",
        r"^d/e\.py: hunk 1 .*: its old line 1 'e\\n' differs in the newline at the end of the file",
    ),
    "counts larger than the hunk": (
        "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\ndiff --git a/y.py b/y.py\n",
        r"^x\.py: hunk 1 \(@@ -1,3 \+1,3 @@\): line 7 is 'diff --git a/y\.py b/y\.py\\n' with 1 old and 1 new lines",
    ),
    "counts smaller than the hunk": (
        "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+A\n+more\n",
        r"^x\.py: hunk 1 \(@@ -1,1 \+1,1 @@\): line 6 looks like a hunk line past the @@ counts; fix the counts",
    ),
    "hunk lines without an @@ line": (
        "--- /dev/null\n+++ b/new.py\n+content\n",
        r"^new\.py: line 3 looks like a hunk line but no '@@ -START,COUNT \+START,COUNT @@' is before it",
    ),
    "hunk lines after an empty line past the counts": (
        "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+A\n\n+more\n",
        r"^x\.py: hunk 1 \(@@ -1,1 \+1,1 @@\): line 7 looks like a hunk line past the @@ counts",
    ),
    "overlapping hunks": (
        "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n@@ -2 +2 @@\n-b\n+B\n",
        r"^x\.py: hunk 2 .*do not appear together in the file after line 2",
    ),
    "a hunk without a file": ("@@ -1 +1 @@\n-a\n+b\n", "^line 1: a hunk without a file header"),
    "a hunk header without numbers": (
        "--- a/x.py\n+++ b/x.py\n@@ ... @@\n-a\n+b\n",
        r"^x\.py: line 3: unreadable hunk header '@@ \.\.\. @@': write '@@ -START,COUNT \+START,COUNT @@'",
    ),
    "no diff at all": ("I could not fix it.\n", "^found no file to patch"),
    "a line after the missing newline": (
        "--- a/x.py\n+++ b/x.py\n@@ -1 +1,2 @@\n-a\n+A\n\\ No newline at end of file\n+B\n",
        r"a line after '\\ No newline at end of file' on its side",
    ),
    "a missing newline before the end": (
        "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+A\n\\ No newline at end of file\n",
        r"^x\.py: hunk 1 .*: its last line has no newline but is not the end of the file",
    ),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_refusals_say_what_to_do(case: str) -> None:
    patch, why = REFUSALS[case]
    files = {"x.py": "a\nb\n", "d/e.py": "e", "conftest.py": "import os\n"}
    with pytest.raises(PatchError, match=why) as raised:
        apply_patch(files, patch)
    assert "\n" not in str(raised.value)
    assert files == {"x.py": "a\nb\n", "d/e.py": "e", "conftest.py": "import os\n"}


def test_nothing_is_applied_when_a_later_file_fails() -> None:
    files = {"a.py": "a\n", "b.py": "b\n"}
    patch = (
        "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-a\n+A\n"
        "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+new\n"
        "--- a/b.py\n+++ b/b.py\n@@ -1 +1 @@\n-not b\n+B\n"
    )
    with pytest.raises(PatchError, match=r"^b\.py: hunk 1"):
        apply_patch(files, patch)
    assert files == {"a.py": "a\n", "b.py": "b\n"}


# --- what language models write ----------------------------------------------------------------


def test_empty_files_are_created_and_deleted_by_git_headers() -> None:
    patch = (
        "diff --git a/empty.py b/empty.py\nnew file mode 100644\nindex 0000000..e69de29\n"
        "diff --git a/old.py b/old.py\ndeleted file mode 100644\nindex e69de29..0000000\n"
    )
    result = apply_patch({"old.py": ""}, patch)
    assert result == PatchResult(files={"empty.py": ""}, touched=("empty.py", "old.py"))


def test_crlf_patch_headers_and_a_fenced_diff_are_read() -> None:
    patch = "```diff\r\n--- a/x.py\r\n+++ b/x.py\r\n@@ -1,2 +1,2 @@\r\n a\r\n-b\r\n+B\r\n```\r\n"
    result = apply_patch({"x.py": "a\r\nb\r\n"}, patch)
    assert result.files == {"x.py": "a\r\nB\r\n"}


def test_a_patch_without_a_final_newline_and_a_mail_signature() -> None:
    patch = "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n-- \n2.39.5\n"
    assert apply_patch({"x.py": "a\nb\n"}, patch).files == {"x.py": "a\nB\n"}
    assert apply_patch({"x.py": "a\nb\n"}, patch.split("-- \n")[0].rstrip("\n")).files == {"x.py": "a\nB\n"}


def test_hunks_go_to_the_nearest_match_in_order() -> None:
    files = {"x.py": "".join(f"{k % 3}\n" for k in range(30))}  # 0 1 2 0 1 2 ...
    patch = "--- a/x.py\n+++ b/x.py\n@@ -14,2 +14,2 @@\n 1\n-2\n+two\n@@ -15,2 +15,2 @@\n 1\n-2\n+TWO\n"
    lines = apply_patch(files, patch).files["x.py"].split("\n")
    # the first hunk's stated start (line 14, a 1) matches; the second may not overlap it: next 1-2 pair
    assert [k + 1 for k, line in enumerate(lines) if not line.isdigit() and line] == [15, 18]


def test_strip_zero_reads_names_as_they_are() -> None:
    patch = "--- x.py\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert apply_patch({"x.py": "a\n"}, patch, strip=0).touched == ("x.py",)


def test_pathological_patches_take_linear_time() -> None:
    # 200,000 lines in runs of 4,999 equal ones, hunks of 5,000 lines that match nowhere, or only
    # at the other end of the file: comparing line lists at every start would take minutes.
    files = {"x.py": "a\n" * 4999 + "c\n" + ("a\n" * 4999 + "b\n") * 39}
    never = "--- a/x.py\n+++ b/x.py\n@@ -1,5000 +1,5000 @@\n" + " a\n" * 4999 + "-a\n+x\n"
    with pytest.raises(PatchError, match="do not appear together in the file"):
        apply_patch(files, never)
    far = "--- a/x.py\n+++ b/x.py\n@@ -195001,5000 +195001,5000 @@\n" + " a\n" * 4999 + "-c\n+C\n"
    assert apply_patch(files, far).files["x.py"].startswith("a\n" * 4999 + "C\n")


_pieces = st.sampled_from(
    [
        *("diff --git a/x.py b/x.py\n", 'diff --git "a/x.py" "b/x.py"\n', "--- a/x.py\n", "+++ b/x.py\n"),
        *("--- /dev/null\n", "+++ /dev/null\n", '+++ "b/\\1\n', "@@ -1 +1 @@\n", "@@ -0,0 +1,2 @@\n"),
        *("@@ -1,2 +0,0 @@\n", "@@ -2,3 +2,3 @@\n", "@@ -999999999,0 +1 @@\n", " a\n", "-a\n", "+a\n", "-b\n"),
        *("\n", "\\ No newline at end of file\n", "new file mode 100644\n", "deleted file mode 100644\n"),
        *("index 1..2\n", "prose\n", "-- \n", "\r\n", " a\r\n", "+", "-", "\\", "@@", "--- ", "diff --git "),
    ]
)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(parts=st.lists(_pieces, max_size=20), text=st.sampled_from(["a\nb\n", "a", "", "a\nb\na\nb\n"]))
def test_any_patch_applies_or_raises_patch_error(parts: list[str], text: str) -> None:
    files = {"x.py": text}
    try:
        result = apply_patch(files, "".join(parts))
    except PatchError as error:
        assert "\n" not in str(error)
    else:
        assert set(result.touched) <= {"x.py"} and set(result.files) <= {"x.py"}
    assert files == {"x.py": text}
