"""envpool: sandboxed execution of hostile programs, a Gymnasium coding env, and a vectorized pool.

Public surface:
- `envpool.sandbox`: `make_sandbox(name, **options)`, `backend_problems()` (for `rlide doctor`),
  `RunRequest`, `RunResult`, `RunStatus`, `TestRunRequest`,
  `prepare_test_run`, `CancelToken`, errors.
- `envpool.env.CodingEnv` (its answers judged by an `envpool.env.Verifier`), `envpool.pool.EnvPool`
  (imports pufferlib lazily), `envpool.tasks`.
- `start_pool_helper()`: start ahead of time the process that pool workers fork from.
Importing `envpool` itself is cheap: it does not import pufferlib, gymnasium or numpy.
"""

from envpool.sandbox import (
    BACKENDS,
    DEFAULT_BACKEND,
    CancelToken,
    InvalidRequest,
    RunRequest,
    RunResult,
    RunStatus,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    TestRunRequest,
    backend_problems,
    make_sandbox,
    prepare_test_run,
    run_tests,
)


def start_pool_helper() -> None:
    """Start the process that pool workers fork from (multiprocessing's "forkserver"), once per
    process. It imports pufferlib and `envpool.pool` (~0.9 s); `EnvPool` starts it if it is not
    running. A caller that starts it before importing `envpool.pool` itself has both imports run
    at once, on two cores: the MCP server does, before its first `run_code` makes a pool."""
    import multiprocessing.forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(["envpool._preload"])
    multiprocessing.forkserver.ensure_running()


__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "CancelToken",
    "InvalidRequest",
    "RunRequest",
    "RunResult",
    "RunStatus",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "TestRunRequest",
    "backend_problems",
    "make_sandbox",
    "prepare_test_run",
    "run_tests",
    "start_pool_helper",
]
