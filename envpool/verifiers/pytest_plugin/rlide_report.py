"""rlide's pytest plugin: each test's outcome as pytest's own hooks saw it, for a verifier to read.

A test run's reward used to be read from the text of its output ("3 passed"), which the code under
test can print itself, and then from a report file, which the code under test can rewrite at exit.
This plugin is loaded into every pytest of a test run (`-p rlide_report`) from a folder the sandbox
mounts read-only (`envpool.sandbox.sites`), before any test module is imported, so before the code
under test. It streams lines to the run's stdout through its own copy of the descriptor (taken at
import, before pytest captures anything), each behind the run's nonce, as things happen:

    start      the session starts: a session that starts and never finishes (`os._exit` at
               import, a test that kills its interpreter) leaves the run with no report
    collected  every collected test's id: a collected test no line gives an outcome is an error
    outcome    one test's outcome (passed, failed, error, skipped, xfailed, xpassed), the moment
               pytest reports it
    tampered   one of this plugin's functions was rewritten (seen by an audit hook at once)
    finish     the exit status, what of pytest was found replaced since this module was imported
               (pytest's runner and report functions), and the files of every hook implementation
               the run could have written (not read-only): the verifier accepts only trusted ones
               (a `conftest.py`, a tests folder), so a hook registered from the code under test,
               which could rewrite each report, is found

Lines already written cannot be taken back, and a verifier keeps the worst outcome any line gives a
test, so a line printed by the code under test, or a table it rewrites afterwards, can only add
failures. The nonce leaves the environment at import, so a test's own subprocesses do not report.
Everything the hooks use is bound at import as a default argument (a tuple: replacing it is an audited
event this plugin watches), not looked up in this module or in `os`, so replacing a name there
changes nothing; a write to a descriptor that is no longer the run's stdout ends the process, so
the session never finishes.

What it cannot do: the code under test runs in the same process. With intent, it can read the nonce
and session bound here and write a whole report of its own, or make a test function return without
its asserts running. See docs/rewards.md. Standard library and pytest only; never imported outside
the sandbox.
"""

from __future__ import annotations

import os
import sys
import uuid
from _json import encode_basestring_ascii as _quote
from collections.abc import Callable
from typing import Any

import _pytest.python
import _pytest.reports
import _pytest.runner

MARK = "rlide-test-report"
_NONCE = os.environ.pop("RLIDE_NONCE", "")
_OUT = os.dup(1) if _NONCE else -1
_SESSION = uuid.uuid4().hex
# The unit separator before the newline lets a reader take the line out together with the newline it
# added, so pytest's progress dots ("..F.") stay on one line in the output an agent reads.
_HEAD = f'\x1f\n{MARK}:{_NONCE}:{{"session": "{_SESSION}", "event": '.encode()
_ROOT = os.getcwd()
_OPENED: dict[str, str] = {}
"""Non-Python files of the workspace this run opened for reading, each with the workspace file whose
code opened it (the innermost frame from the workspace): data a test reads its expected values from."""
_OPENED_MAX = 1000
_WATCHED = (
    ("runner.call_and_report", _pytest.runner, "call_and_report"),
    ("runner.runtestprotocol", _pytest.runner, "runtestprotocol"),
    ("runner.CallInfo.from_call", _pytest.runner.CallInfo, "from_call"),
    ("reports.TestReport.from_item_and_call", _pytest.reports.TestReport, "from_item_and_call"),
    ("python.pytest_pyfunc_call", _pytest.python, "pytest_pyfunc_call"),
    ("python.Function.runtest", _pytest.python.Function, "runtest"),
)
# What each owner holds itself (a classmethod object, not a fresh bound method each time).
_ORIGINAL = tuple((name, owner, attr, vars(owner).get(attr)) for name, owner, attr in _WATCHED)


def _identity(fd: int) -> tuple[int, int]:
    status = os.fstat(fd)
    return status.st_dev, status.st_ino


def _emit(
    event: str,
    body: str = "",
    _write: Callable[[int, bytes], int] = os.write,
    _fstat: Callable[[int], os.stat_result] = os.fstat,
    _exit: Callable[[int], Any] = os._exit,
    _out: int = _OUT,
    _stdout: tuple[int, int] = _identity(_OUT) if _OUT >= 0 else (0, 0),
    _head: bytes = _HEAD,
) -> None:
    """Write one line: `body` is the event's further JSON fields, each already quoted."""
    if _out < 0:
        return
    try:
        status = _fstat(_out)
        if (status.st_dev, status.st_ino) != _stdout:
            raise OSError("the report descriptor was replaced")
        data = _head + f'"{event}"{body}}}\n'.encode()
        while data:
            data = data[_write(_out, data) :]
    except OSError:
        _exit(70)  # no finish line will follow: the run has no report, never a partial one


def _strings(values: Any, _quote: Callable[[str], str] = _quote) -> str:
    return "[" + ", ".join(_quote(str(value)) for value in values) + "]"


def pytest_sessionstart(session: Any, _emit: Callable[..., None] = _emit) -> None:
    _emit("start")


def pytest_collection_finish(
    session: Any, _emit: Callable[..., None] = _emit, _strings: Callable[[Any], str] = _strings
) -> None:
    _emit("collected", ', "tests": ' + _strings(item.nodeid for item in session.items))


def pytest_runtest_logreport(
    report: Any,
    _emit: Callable[..., None] = _emit,
    _quote: Callable[[str], str] = _quote,
    _hasattr: Callable[[Any, str], bool] = hasattr,
) -> None:
    if report.when == "call":
        outcome = ("xpassed" if report.passed else "xfailed") if _hasattr(report, "wasxfail") else report.outcome
    elif report.failed:  # setup or teardown
        outcome = "error"
    elif report.skipped:
        outcome = "xfailed" if _hasattr(report, "wasxfail") else "skipped"
    else:
        return
    _emit("outcome", f', "test": {_quote(str(report.nodeid))}, "outcome": {_quote(str(outcome))}')


def _tampered(_original: tuple[tuple[str, Any, str, Any], ...] = _ORIGINAL, _vars: Any = vars) -> list[str]:
    return [name for name, owner, attr, original in _original if _vars(owner).get(attr) is not original]


def _writable_hooks(
    config: Any,
    _dir: Any = dir,
    _getattr: Any = getattr,
    _isabs: Callable[[str], bool] = os.path.isabs,
    _access: Callable[[str, int], bool] = os.access,
    _commonpath: Any = os.path.commonpath,
    _relpath: Any = os.path.relpath,
    _root: str = os.getcwd(),
) -> list[str]:
    """Where the hook implementations a run could have written come from: a path relative to the
    workspace when inside it, else absolute; "<name>" when a hook has no source file."""
    found: set[str] = set()
    for name in _dir(config.hook):
        get_hookimpls = _getattr(_getattr(config.hook, name, None), "get_hookimpls", None)
        if get_hookimpls is None:
            continue
        for impl in get_hookimpls():
            code = _getattr(impl.function, "__code__", None)  # never unwrapped: __wrapped__ is settable
            path = _getattr(code, "co_filename", "")
            if not _isabs(path):
                found.add(path or f"<{name}>")
            elif _access(path, os.W_OK):  # read-only: pytest, the tools site, the project's venv
                inside = _commonpath([_root, path]) == _root
                found.add(_relpath(path, _root) if inside else path)
    return sorted(found)


def pytest_sessionfinish(
    session: Any,
    exitstatus: Any,
    _emit: Callable[..., None] = _emit,
    _strings: Callable[[Any], str] = _strings,
    _tampered: Callable[[], list[str]] = _tampered,
    _writable_hooks: Callable[[Any], list[str]] = _writable_hooks,
    _int: Any = int,
    _opened: dict[str, str] = _OPENED,
) -> None:
    body = f', "exitstatus": {_int(exitstatus)}, "tampered": {_strings(_tampered())}'
    opened = ", ".join(f"[{_quote(path)}, {_quote(by)}]" for path, by in list(_opened.items()))
    _emit("finish", body + f', "hooks": {_strings(_writable_hooks(session.config))}, "opened": [{opened}]')


_CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".so", ".pyd")


def _note_open(
    args: tuple[Any, ...],
    _root: str = _ROOT,
    _opened: dict[str, str] = _OPENED,
    _fspath: Callable[[Any], Any] = os.fspath,
    _normpath: Callable[[str], str] = os.path.normpath,
    _join: Callable[[str, str], str] = os.path.join,
    _getframe: Callable[[int], Any] = sys._getframe,
    _isinstance: Any = isinstance,
    _len: Any = len,
) -> None:
    """An `open` audit event: keep a workspace data file opened for reading, and who opened it."""
    if _len(_opened) >= _OPENED_MAX or _len(args) < 2:
        return
    try:
        path = _fspath(args[0])
    except TypeError:  # a descriptor number
        return
    if not _isinstance(path, str) or path.endswith(_CODE_SUFFIXES):
        return
    mode = args[1]
    if _isinstance(mode, str) and any(c in mode for c in "wax+"):
        return
    path = _normpath(_join(_root, path))
    if not path.startswith(_root + "/") or path in _opened:
        return
    frame = _getframe(2)
    while frame is not None:
        where = frame.f_code.co_filename
        if where.startswith(_root + "/"):
            _opened[path[_len(_root) + 1 :]] = where[_len(_root) + 1 :]
            return
        frame = frame.f_back


def _watch(
    event: str,
    args: tuple[Any, ...],
    _mine: frozenset[int] = frozenset(),  # bound below, once this function exists
    _id: Callable[[Any], int] = id,
    _emit: Callable[..., None] = _emit,
    _quote: Callable[[str], str] = _quote,
    _str: Callable[[Any], str] = str,
    _note_open: Callable[[tuple[Any, ...]], None] = _note_open,
) -> None:
    """An audit hook (never removable): rewriting the code or the bound defaults of one of this
    plugin's functions is reported the moment it happens, before the rewritten code can run; a file
    opened is noted (`_note_open`)."""
    if event == "open":
        _note_open(args)
    elif event == "object.__setattr__" and args and _id(args[0]) in _mine:
        _emit("tampered", f', "what": {_quote("rlide_report." + _str(args[1]))}')


_OURS: tuple[Callable[..., Any], ...] = (_identity, _emit, _strings, _tampered, _writable_hooks, _note_open, _watch)
_OURS += (pytest_sessionstart, pytest_collection_finish, pytest_runtest_logreport, pytest_sessionfinish)
_watch.__defaults__ = (frozenset(id(function) for function in _OURS), *(_watch.__defaults__ or ())[1:])
if _NONCE:
    sys.addaudithook(_watch)
