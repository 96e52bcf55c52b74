"""Applying a unified diff to an in-memory set of files: the one reader of a candidate's patch.

A verifier used to apply a candidate's diff with GNU `patch` and decide which files it touched with
a separate parser; the two disagreed (a git rename onto `conftest.py`, or a C-quoted name such as
`"b/conf\\164est.py"` that `patch` decodes), and a policy being trained will find every such gap. So
here one piece of code reads the patch and produces the new files, and whatever is judged (trusted
files included) is checked on that result, never on names in the diff.

Accepted: what `git diff`, `diff -u`, `difflib.unified_diff` (and `training.scenarios.snapshots.
unified_diff`) and language models write: `diff --git` and `index` lines, `---`/`+++` names with an
optional tab and timestamp, `/dev/null` for creations and deletions, `new file mode` and `deleted
file mode` 100644 or 100755, several files and hunks, `\\ No newline at end of file` on either side,
`@@ -3 +3 @@` (counts omitted), CRLF lines (kept as they are), an empty line inside a hunk as an
empty context line when the hunk's counts expect one, prose before, between and after file sections.
Git's C-quoted names are decoded as git writes them.

Refused, each with a `PatchError` saying what to write instead: renames and copies, mode changes,
symlinks, submodules and binary patches (only regular text files are patched in place); `---` and
`+++` naming different files; a name that is absolute, has `..`, `.` or empty components, a
backslash or a control character; creating a file that exists or that clashes with a folder;
changing or deleting one that does not exist; two sections for one file; a deletion that does not
remove every line; a hunk whose lines do not match the file exactly; @@ counts that disagree with
the lines after them (rather than skip the rest as prose); a patch with no file in it. There is no
fuzz (context is never dropped) and nothing partial: the input is never changed and a failure
returns no files.

Placement follows GNU `patch` at fuzz 0: at the stated line (moved by the previous hunk's offset)
if the hunk's old lines match there, else at the nearest place they match (later first on a tie),
hunks of a file in order and never overlapping. Unlike `patch`, a hunk with less context on one
side is not pinned to the start or end of the file: it goes where its lines match exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import NoReturn

__all__ = ["PatchError", "PatchResult", "apply_patch", "holds_a_diff"]

_FILE_HEADERS = re.compile(r"^--- .*\n\+\+\+ ", re.MULTILINE)
_HUNK_HEADER = re.compile(r"@@ -(\d{1,9})(?:,(\d{1,9}))? \+(\d{1,9})(?:,(\d{1,9}))? @@")
_NEW_FILE_MODES = frozenset({"100644", "100755"})
_MODE_NAMES = {"120000": "a symbolic link", "160000": "a submodule (gitlink)", "040000": "a folder"}
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_MAX_PATH_BYTES = 4096  # PATH_MAX: the sandbox could not write a longer name anyway
_MAX_NAME_BYTES = 255  # NAME_MAX, per path component
_MAX_HEADER_CHARS = 4 * _MAX_PATH_BYTES + 64  # both quoted names of a `diff --git` line, and some
_MAX_DISTINCT_LINES = 0x110000  # one code point per distinct line (see _LineIndex)
_SEARCH_BUDGET = 50_000_000
"""Line positions scanned, over a whole patch, looking for hunks away from their stated line: a
patch of real edits uses a tiny part of it; hunks that each lie a whole file away do not."""


class PatchError(ValueError):
    """The patch does not apply or is refused; the one-line message says where, why, and what to do."""


@dataclass(frozen=True)
class PatchResult:
    files: dict[str, str]
    """Every file after the patch: path -> text (a new dict; the input is left as it was)."""
    touched: tuple[str, ...]
    """The paths the patch created, changed or deleted, in the patch's order."""


def holds_a_diff(text: str) -> bool:
    """Whether `text` holds a unified diff (a `---` line followed by a `+++` line)."""
    return _FILE_HEADERS.search(text) is not None


def apply_patch(files: Mapping[str, str], patch: str, strip: int = 1) -> PatchResult:
    """Apply the unified diff `patch` to `files` (workspace-relative POSIX path -> text), reading
    names as `patch -p<strip>` does. Raises `PatchError` if any part does not apply or is refused."""
    if strip < 0:
        raise ValueError(f"strip must be 0 or more, not {strip}")
    sections = _Parser(patch, strip).sections()
    result = dict(files)
    budget = _Budget(_SEARCH_BUDGET)
    for section in sections:
        _apply_section(result, section, budget)
    _check_folders(result, [s.path for s in sections if s.created])
    return PatchResult(files=result, touched=tuple(s.path for s in sections))


@dataclass(frozen=True)
class _Hunk:
    number: int
    """1-based, within its file."""
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    old: list[str]
    """Context and removed lines, each with its line ending ("\\n" unless marked as missing)."""
    new: list[str]
    """Context and added lines."""

    def where(self, path: str) -> str:
        return (
            f"{path}: hunk {self.number} (@@ -{self.old_start},{self.old_count} +{self.new_start},{self.new_count} @@)"
        )


@dataclass(frozen=True)
class _Section:
    path: str
    created: bool
    deleted: bool
    hunks: list[_Hunk]


@dataclass
class _Budget:
    left: int

    def spend(self, amount: int, where: str) -> None:
        self.left -= amount
        if self.left < 0:
            raise PatchError(f"{where}: hunks lie too far from their stated lines; fix the @@ line numbers")


class _Parser:
    """Reads a patch into file sections, line by line."""

    def __init__(self, patch: str, strip: int) -> None:
        self.lines = _split_lines(patch)
        self.strip = strip
        self.i = 0

    def sections(self) -> list[_Section]:
        sections: list[_Section] = []
        seen: set[str] = set()
        while self.i < len(self.lines):
            bare = self._bare()
            if bare.startswith("diff --git "):
                section = self._git_section()
            elif bare.startswith("--- "):
                section = self._plain_section()
            else:
                self._skip_outside(bare)
                continue
            if section.path in seen:
                raise PatchError(
                    f"{section.path}: two sections of the patch change it; put all its hunks in one section"
                )
            seen.add(section.path)
            sections.append(section)
        if not sections:
            raise PatchError("found no file to patch: expected '--- a/PATH' and '+++ b/PATH' lines, then @@ hunks")
        return sections

    def _bare(self, ahead: int = 0) -> str:
        """A line without its line ending (a header's CR is no part of it), or "" past the end."""
        if self.i + ahead >= len(self.lines):
            return ""
        return self.lines[self.i + ahead].removesuffix("\n").removesuffix("\r")

    def where(self) -> str:
        return f"line {self.i + 1}"

    def _skip_outside(self, bare: str) -> None:
        """Prose and other lines outside file sections are skipped, unless they would change a file."""
        _refuse_git_extension(bare, self.where())
        if bare.startswith("+++ "):
            raise PatchError(f"{self.where()}: a '+++' line without a '---' line just before it")
        if bare.startswith("@@"):
            raise PatchError(
                f"{self.where()}: a hunk without a file header: write '--- a/PATH' and '+++ b/PATH' before it"
            )
        self.i += 1

    def _git_section(self) -> _Section:
        path = self._git_path(self._bare().removeprefix("diff --git "))
        self.i += 1
        created = deleted = False
        while self.i < len(self.lines):
            bare = self._bare()
            _refuse_git_extension(bare, f"{path}: {self.where()}")
            if bare.startswith("new file mode "):
                _check_mode(path, bare.removeprefix("new file mode "), "create")
                created = True
            elif bare.startswith("deleted file mode "):
                _check_mode(path, bare.removeprefix("deleted file mode "), "delete")
                deleted = True
            elif not bare.startswith(("index ", "dissimilarity index ")):
                break
            self.i += 1
        if created and deleted:
            raise PatchError(f"{path}: both 'new file mode' and 'deleted file mode'")
        if self._bare().startswith("--- "):
            old, new = self._names()
            if path not in (old, new):
                raise PatchError(f"{path}: the '---'/'+++' lines name {old or new}, not the file of 'diff --git'")
            if (created and old is not None) or (deleted and new is not None):
                verb = "creates" if created else "deletes"
                side = "---" if created else "+++"
                raise PatchError(f"{path}: the git header {verb} it, so its '{side}' line must be /dev/null")
            created, deleted = created or old is None, deleted or new is None
            return _Section(path, created, deleted, self._hunks(path, may_be_empty=created or deleted))
        if self._bare().startswith("@@"):
            raise PatchError(f"{path}: {self.where()}: hunks need '--- a/{path}' and '+++ b/{path}' lines before them")
        if not (created or deleted):
            raise PatchError(f"{path}: its 'diff --git' section changes nothing (no hunks)")
        self._refuse_stray_hunk_lines(path, [])
        return _Section(path, created, deleted, [])  # an empty file, created or deleted

    def _plain_section(self) -> _Section:
        old, new = self._names()
        path = old or new
        assert path is not None  # _names refuses /dev/null on both sides
        created, deleted = old is None, new is None
        return _Section(path, created, deleted, self._hunks(path, may_be_empty=created or deleted))

    def _names(self) -> tuple[str | None, str | None]:
        """The paths of a '---' line and the '+++' line after it (None: /dev/null)."""
        if not self._bare(1).startswith("+++ "):
            raise PatchError(f"{self.where()}: a '---' line not followed by a '+++' line")
        old = self._header_path(self._bare().removeprefix("--- "))
        new = self._header_path(self._bare(1).removeprefix("+++ "))
        if old is None and new is None:
            raise PatchError(f"{self.where()}: '---' and '+++' are both /dev/null")
        if old is not None and new is not None and old != new:
            raise PatchError(
                f"{self.where()}: '---' names {old} but '+++' names {new}: renames are refused; "
                "write a deletion of the old file (+++ /dev/null) and a creation of the new one (--- /dev/null)"
            )
        self.i += 2
        return old, new

    def _header_path(self, rest: str) -> str | None:
        """The path of a '---'/'+++' line: quoted as git quotes, or up to a tab (then a timestamp)."""
        if len(rest) > _MAX_HEADER_CHARS:
            raise PatchError(f"{self.where()}: file name too long")
        if rest.startswith('"'):
            raw, tail = _unquote(rest, self.where())
            if tail and not tail[0].isspace():
                raise PatchError(f"{self.where()}: unexpected {_show(tail)} after the quoted name")
        else:
            raw = rest.split("\t", 1)[0].rstrip(" ")
        if raw == "/dev/null":
            return None
        return _strip_path(raw, self.strip, self.where())

    def _git_path(self, rest: str) -> str:
        """The one path a `diff --git A B` line names twice; refuses two different paths (a rename)."""
        if len(rest) > _MAX_HEADER_CHARS:
            raise PatchError(f"{self.where()}: file name too long")
        pairs: Iterator[tuple[str, str]]
        if rest.startswith('"'):
            first, tail = _unquote(rest, self.where())
            second = tail[1:] if tail.startswith(" ") else ""
            pairs = iter([(first, _unquote_whole(second, self.where()) if second.startswith('"') else second)])
        elif rest.endswith('"') and ' "' in rest:
            first, second = rest.split(' "', 1)
            pairs = iter([(first, _unquote_whole('"' + second, self.where()))])
        else:  # unquoted names may hold spaces: any split that names one file twice
            pairs = ((rest[:k], rest[k + 1 :]) for k, char in enumerate(rest) if char == " ")
        for first, second in pairs:
            path = _strip_quietly(first, self.strip)
            if path is not None and path == _strip_quietly(second, self.strip):
                return _strip_path(first, self.strip, self.where())
        raise PatchError(
            f"{self.where()}: 'diff --git' must name one file twice ({_show(rest)}); renames are refused: "
            "write a deletion of the old file (+++ /dev/null) and a creation of the new one (--- /dev/null)"
        )

    def _hunks(self, path: str, may_be_empty: bool) -> list[_Hunk]:
        hunks: list[_Hunk] = []
        while self._bare().startswith("@@"):
            hunks.append(self._hunk(path, len(hunks) + 1))
        self._refuse_stray_hunk_lines(path, hunks)
        if not hunks and not may_be_empty:
            raise PatchError(f"{path}: no @@ hunk after its '---' and '+++' lines")
        return hunks

    def _refuse_stray_hunk_lines(self, path: str, hunks: list[_Hunk]) -> None:
        """The first line after a section's last hunk (blank lines aside) that looks like a hunk line
        would be skipped as prose: a change silently dropped. Most often the @@ counts are short (an
        empty line counted as context ends up outside them), or the @@ line is missing."""
        ahead = 0
        while self._bare(ahead) == "" and self.i + ahead < len(self.lines):
            ahead += 1
        bare = self._bare(ahead)
        if bare[:1] not in ("+", "-", " ", "\\") or bare in ("--", "-- "):  # "-- ": a mail signature
            return
        if bare.startswith("--- ") and self._bare(ahead + 1).startswith("+++ "):
            return
        at = f"line {self.i + ahead + 1}"
        if hunks:
            raise PatchError(f"{hunks[-1].where(path)}: {at} looks like a hunk line past the @@ counts; fix the counts")
        raise PatchError(f"{path}: {at} looks like a hunk line but no '@@ -START,COUNT +START,COUNT @@' is before it")

    def _hunk(self, path: str, number: int) -> _Hunk:
        bare = self._bare()
        match = _HUNK_HEADER.match(bare)
        if match is None:
            raise PatchError(
                f"{path}: {self.where()}: unreadable hunk header {_show(bare)}: write '@@ -START,COUNT +START,COUNT @@'"
            )
        old_start, new_start = int(match[1]), int(match[3])
        old_count = 1 if match[2] is None else int(match[2])
        new_count = 1 if match[4] is None else int(match[4])
        hunk = _Hunk(number, old_start, old_count, new_start, new_count, [], [])
        if (old_count and not old_start) or (new_count and not new_start):
            raise PatchError(f"{hunk.where(path)}: a hunk with lines cannot start at line 0")
        self.i += 1
        _HunkBody(hunk, path).read(self)
        return hunk


class _HunkBody:
    """Fills a hunk's old and new lines from the lines its @@ counts cover, and a marker after them."""

    def __init__(self, hunk: _Hunk, path: str) -> None:
        self.sides = {"old": hunk.old, "new": hunk.new}
        self.where = hunk.where(path)
        self.left = {"old": hunk.old_count, "new": hunk.new_count}
        self.last: tuple[str, ...] = ()
        """The sides the previous line went to, which a `\\ No newline` marker ends."""
        self.ended: set[str] = set()
        """The sides whose last line was marked: no line may follow on them."""

    def read(self, parser: _Parser) -> None:
        while self.left["old"] or self.left["new"]:
            if parser.i >= len(parser.lines):
                self._short("the patch ends")
            self._line(parser, parser.lines[parser.i])
            parser.i += 1
        if parser.i < len(parser.lines) and parser.lines[parser.i].startswith("\\"):
            self._marker(parser)
            parser.i += 1

    def _line(self, parser: _Parser, line: str) -> None:
        # The last line of a patch may lack its newline: only a marker says a line has none.
        kind, text = line[0], line[1:].removesuffix("\n") + "\n"
        if line in ("\n", "\r\n") and self.left["old"] and self.left["new"]:
            kind, text = " ", line  # an empty context line that lost its leading space
        sides = {" ": ("old", "new"), "-": ("old",), "+": ("new",)}.get(kind)
        if kind == "\\":
            self._marker(parser)
        elif sides is None or not all(self.left[side] for side in sides):
            self._short(f"{parser.where()} is {_show(line)}")
        elif self.ended.intersection(sides):
            raise PatchError(f"{self.where}: {parser.where()}: a line after '\\ No newline at end of file' on its side")
        else:
            for side in sides:
                self.sides[side].append(text)
                self.left[side] -= 1
            self.last = sides

    def _marker(self, parser: _Parser) -> None:
        """`\\ No newline at end of file`: the line before it has no line ending."""
        if not self.last:
            raise PatchError(f"{self.where}: {parser.where()}: a '\\' line that follows no hunk line")
        for side in self.last:
            self.sides[side][-1] = self.sides[side][-1].removesuffix("\n")
            self.ended.add(side)
        self.last = ()

    def _short(self, why: str) -> NoReturn:
        raise PatchError(
            f"{self.where}: {why} with {self.left['old']} old and {self.left['new']} new lines still to come: "
            "fix the counts in the @@ line (or start every context line with a space)"
        )


def _apply_section(files: dict[str, str], section: _Section, budget: _Budget) -> None:
    path = section.path
    if section.created and path in files:
        raise PatchError(f"{path}: the patch creates it but it exists: diff against its content (--- a/{path})")
    if not section.created and path not in files:
        raise PatchError(f"{path}: no such file to change or delete; to create it write '--- /dev/null'")
    old = [] if section.created else _split_lines(files[path])
    new = _apply_hunks(path, old, section.hunks, budget)
    if not section.deleted:
        files[path] = "".join(new)
    elif new:
        raise PatchError(f"{path}: deleting it must remove every line, but {len(new)} would remain")
    else:
        del files[path]


def _apply_hunks(path: str, lines: list[str], hunks: list[_Hunk], budget: _Budget) -> list[str]:
    out: list[str] = []
    cursor = offset = 0  # hunks apply in order, after the previous one's old lines, GNU's offset carried
    index: _LineIndex | None = None
    for hunk in hunks:
        stated = hunk.old_start - 1 if hunk.old else hunk.old_start  # count 0: inserts after that line
        expected = stated + offset
        n = len(hunk.old)
        if n == 0:
            at = min(max(expected, cursor), len(lines))
        elif cursor <= expected <= len(lines) - n and lines[expected : expected + n] == hunk.old:
            at = expected
        else:
            index = index or _LineIndex(path, lines)
            found = index.nearest(hunk.old, expected, cursor, budget, hunk.where(path))
            if found is None:
                raise PatchError(_not_found(path, hunk, lines, cursor, index))
            at = found
        out.extend(lines[cursor:at])
        out.extend(hunk.new)
        cursor, offset = at + n, at - stated
        if hunk.new and not hunk.new[-1].endswith("\n") and cursor < len(lines):
            raise PatchError(f"{hunk.where(path)}: its last line has no newline but is not the end of the file")
    out.extend(lines[cursor:])
    return out


def _not_found(path: str, hunk: _Hunk, lines: list[str], cursor: int, index: _LineIndex) -> str:
    where = hunk.where(path)
    after = f" after line {cursor}" if cursor else ""
    if not lines:
        return f"{where}: the file is empty but the hunk has {len(hunk.old)} old lines"
    for k, line in enumerate(hunk.old, start=1):
        if line not in index.ids:
            if line.removesuffix("\n") in index.ids or line + "\n" in index.ids:
                why = "differs in the newline at the end of the file ('\\ No newline at end of file')"
            else:
                why = "is not in the file"
            return f"{where}: its old line {k} {_show(line)} {why}; copy context and removed lines exactly"
    return (
        f"{where}: its {len(hunk.old)} context and removed lines do not appear together in the file{after}; "
        "copy them exactly from the current file (no fuzz is applied)"
    )


class _LineIndex:
    """A file's lines as one string, a code point per distinct line, so that looking for a hunk's old
    lines is a C-speed substring search (linear time) rather than comparing line lists at every
    start: a patch of a few MB against pathological files must not take quadratic time."""

    def __init__(self, path: str, lines: list[str]) -> None:
        self.ids: dict[str, int] = {}
        for line in lines:
            self.ids.setdefault(line, len(self.ids))
        if len(self.ids) > _MAX_DISTINCT_LINES:
            raise PatchError(f"{path}: more than {_MAX_DISTINCT_LINES} distinct lines; too large to patch")
        self.text = "".join(chr(self.ids[line]) for line in lines)
        self.reversed = self.text[::-1]  # str.rfind has quadratic worst cases; find on the reverse has not

    def nearest(self, old: list[str], expected: int, cursor: int, budget: _Budget, where: str) -> int | None:
        """The start nearest to `expected` (later first on a tie), not before `cursor`, where `old`
        matches; None if nowhere. Searches windows doubling around `expected`: work ~ distance."""
        if any(line not in self.ids for line in old):
            return None
        needle = "".join(chr(self.ids[line]) for line in old)
        size, n = len(self.text), len(needle)
        if size - n < cursor:
            return None
        expected = min(max(expected, cursor), size - n)
        reach = 16
        while True:
            low, high = max(cursor, expected - reach), min(size - n, expected + reach)
            budget.spend(high - low + n, where)
            later = self.text.find(needle, expected, high + n)
            # the last start in [low, expected - 1] is the first one, reversed, in the mirrored range
            first = self.reversed.find(needle[::-1], size - n - expected + 1, size - low)
            earlier = size - n - first if first >= 0 and expected > low else -1
            if later >= 0 or earlier >= 0:
                if earlier < 0 or (later >= 0 and later - expected <= expected - earlier):
                    return later
                return earlier
            if low == cursor and high == size - n:
                return None
            reach *= 2


def _check_folders(files: dict[str, str], created: list[str]) -> None:
    """A created file must not lie under another file, nor where a folder of files is."""
    if not created:
        return
    folders = {folder for path in files for folder in _folders(path)}
    for path in created:
        if path in folders:
            raise PatchError(f"{path}: the patch creates it but it is a folder of other files")
        for folder in _folders(path):
            if folder in files:
                raise PatchError(f"{path}: the patch creates it but {folder} is a file")


def _folders(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:k]) for k in range(1, len(parts))]


def _refuse_git_extension(bare: str, where: str) -> None:
    """Git header lines whose change is not a plain text edit in place."""
    if bare.startswith(("rename from ", "rename to ", "rename old ", "rename new ", "similarity index ")):
        raise PatchError(
            f"{where}: renames are refused ({_show(bare)}): write a deletion of the old file "
            "(+++ /dev/null) and a creation of the new one (--- /dev/null) with its whole content"
        )
    if bare.startswith(("copy from ", "copy to ")):
        raise PatchError(f"{where}: copies are refused ({_show(bare)}): write a creation (--- /dev/null) of the copy")
    if bare.startswith(("old mode ", "new mode ")):
        raise PatchError(f"{where}: mode changes are refused ({_show(bare)}): leave the file's mode as it is")
    if bare == "GIT binary patch" or (bare.startswith("Binary files ") and bare.endswith(" differ")):
        raise PatchError(f"{where}: binary patches are refused ({_show(bare)}): only text files can be patched")


def _check_mode(path: str, mode: str, verb: str) -> None:
    if mode not in _NEW_FILE_MODES:
        kind = _MODE_NAMES.get(mode, f"a file of mode {_show(mode)}")
        raise PatchError(f"{path}: cannot {verb} {kind}: only regular files (mode 100644 or 100755)")


def _unquote(text: str, where: str) -> tuple[str, str]:
    """A git C-quoted name at the start of `text` (escapes as git writes them, octal bytes of UTF-8),
    and the text after its closing quote."""
    raw = bytearray()
    k = 1
    while k < len(text):
        char = text[k]
        if char == '"':
            try:
                return raw.decode("utf-8"), text[k + 1 :]
            except UnicodeDecodeError:
                raise PatchError(f"{where}: quoted name {_show(text[: k + 1])} is not UTF-8") from None
        if char != "\\":
            raw += char.encode("utf-8", "surrogatepass")
            k += 1
        elif text[k + 1 : k + 2] in _ESCAPES:
            raw.append(_ESCAPES[text[k + 1]])
            k += 2
        elif re.fullmatch(r"[0-3][0-7][0-7]", text[k + 1 : k + 4]):
            raw.append(int(text[k + 1 : k + 4], 8))
            k += 4
        else:
            raise PatchError(f"{where}: bad escape {_show(text[k : k + 4])} in a quoted name")
    raise PatchError(f"{where}: quoted name {_show(text)} has no closing quote")


def _unquote_whole(text: str, where: str) -> str:
    name, tail = _unquote(text, where)
    if tail:
        raise PatchError(f"{where}: unexpected {_show(tail)} after the quoted name")
    return name


def _strip_quietly(raw: str, strip: int) -> str | None:
    parts = raw.split("/")
    return "/".join(parts[strip:]) if len(parts) > strip and not raw.startswith("/") else None


def _strip_path(raw: str, strip: int, where: str) -> str:
    """The workspace path of a name in the patch, as `patch -p<strip>` reads it, checked."""
    if raw.startswith("/"):
        raise PatchError(f"{where}: absolute path {_show(raw)}: name files relative to the workspace (a/PATH)")
    path = _strip_quietly(raw, strip)
    if not path:
        raise PatchError(
            f"{where}: no file name left in {_show(raw)} after stripping {strip} leading folder(s): "
            "write a/PATH and b/PATH"
        )
    problem = _path_problem(path)
    if problem:
        raise PatchError(f"{where}: invalid path {_show(path)}: {problem}")
    return path


def _path_problem(path: str) -> str | None:
    """What makes `path` unfit as a workspace file (the rules of `envpool.sandbox.base.
    validate_relative_path`, plus control characters and length), or None."""
    if "\\" in path or any(ord(char) < 32 or ord(char) == 127 for char in path):
        return "no backslash, NUL or other control character"
    if path.startswith(("/", "-")):
        return "must be relative and not start with '-'"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "no '.', '..' or empty components"
    if len(path.encode("utf-8", "surrogatepass")) > _MAX_PATH_BYTES:
        return f"longer than {_MAX_PATH_BYTES} bytes"
    if any(len(part.encode("utf-8", "surrogatepass")) > _MAX_NAME_BYTES for part in parts):
        return f"a component longer than {_MAX_NAME_BYTES} bytes"
    return None


def _split_lines(text: str) -> list[str]:
    """Lines as `patch` counts them: split at "\\n" only (a "\\r" stays in its line); the last one
    keeps whether it has a newline."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _show(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:60] + "...")
