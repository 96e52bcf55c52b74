"""Imported once by the multiprocessing fork-server that starts pool workers (see `_vector`).

Workers then fork from a process where pufferlib, numpy, gymnasium and the pool's own modules
(pydantic, structlog, anyio with them) are already imported. Importing the latter in each worker
took 0.25 s of CPU apiece: a pool of 8 on 2 cores answered its first job 1 s later. That helper
inherits the parent's stdout (maybe an MCP stdio stream): point it at stderr first.
"""

from envpool._puffer import pufferlib_vector
from envpool._vector import stdout_to_stderr

stdout_to_stderr()
pufferlib_vector()
import envpool.pool  # noqa: E402,F401  (what unpickling a worker's env creators imports)
