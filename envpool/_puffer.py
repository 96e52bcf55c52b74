"""Import `pufferlib.vector` safely: from a private working directory, once, with stdout guarded.

`import pufferlib` creates a `resources` symlink in the current working directory (and fails if
that directory is read-only), and briefly swaps sys.stdout. We import it from a private temporary
directory under a lock, so neither the caller's cwd nor an MCP stdio stream is touched.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from types import ModuleType

_lock = threading.Lock()
_module: ModuleType | None = None


def pufferlib_vector() -> ModuleType:
    global _module
    with _lock:
        if _module is None:
            private = tempfile.mkdtemp(prefix="rlide-pufferlib-")
            previous = os.getcwd()
            os.chdir(private)
            try:
                with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                    import pufferlib.vector  # type: ignore[import-untyped]
            finally:
                os.chdir(previous)
            _module = pufferlib.vector
        return _module


@contextlib.contextmanager
def gym_notice_silenced() -> Iterator[None]:
    """Around the first `import gymnasium`. It loads the plugin of shimmy (a pufferlib dependency),
    which imports the retired `gym`, which prints to stderr a three-line notice asking its users to
    move to Gymnasium: in an MCP server's log that reads as rlide's own problem. pufferlib silences
    its own import of gymnasium the same way."""
    if "gymnasium" in sys.modules:
        yield
        return
    with _lock, open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
        yield
