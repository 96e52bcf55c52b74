"""Imported once by the multiprocessing fork-server that starts pool workers (see `_vector`).

Workers then fork from a process where pufferlib, numpy and gymnasium are already imported. That
helper inherits the parent's stdout (maybe an MCP stdio stream): point it at stderr first.
"""

from envpool._puffer import pufferlib_vector
from envpool._vector import stdout_to_stderr

stdout_to_stderr()
pufferlib_vector()
