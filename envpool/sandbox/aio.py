"""Async use of a single sandbox (without a pool): run in a worker thread, cancel = kill the run."""

from __future__ import annotations

import anyio
import anyio.to_thread

from envpool.sandbox.base import CancelToken, RunRequest, RunResult, Sandbox, TestRunRequest, prepare_test_run


async def run_async(sandbox: Sandbox, request: RunRequest) -> RunResult:
    """`sandbox.run` off the event loop. If the caller is cancelled, the run is killed in its sandbox
    (not left running in an abandoned thread) and the cancellation propagates at once."""
    token = CancelToken()

    def work() -> RunResult:
        try:
            return sandbox.run(request, token)
        finally:
            token.close()  # only the thread closes it: it may still be select()ing on it

    try:
        return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        token.cancel()  # a no-op if the run already finished and closed the token
        raise


async def run_tests_async(sandbox: Sandbox, test: TestRunRequest) -> RunResult:
    return await run_async(sandbox, await anyio.to_thread.run_sync(prepare_test_run, test))
