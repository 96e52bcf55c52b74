"""Sandboxed execution: one `Sandbox` protocol, backends chosen by name.

Backends: `bwrap` (default on Linux), `bwrap-fresh` (a new sandbox per run), `docker` (optional
extra, needs a running engine), `unsafe-local` (no isolation; only when asked for by name).
"""

from __future__ import annotations

import sys
from typing import Any

from envpool.sandbox.base import (
    CancelToken,
    InvalidRequest,
    RunRequest,
    RunResult,
    RunStatus,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    TestRunRequest,
    prepare_test_run,
    run_tests,
)

BACKENDS = ("bwrap", "bwrap-fresh", "docker", "unsafe-local")
DEFAULT_BACKEND = "bwrap"


def make_sandbox(name: str = DEFAULT_BACKEND, **options: Any) -> Sandbox:
    """Create a sandbox backend by name; `options` go to its config dataclass (`BwrapConfig`,
    `DockerConfig`). Raises SandboxUnavailable if the backend cannot run here."""
    if name in ("bwrap", "bwrap-fresh"):
        from envpool.sandbox.bwrap import BwrapConfig, BwrapSandbox

        return BwrapSandbox(BwrapConfig(**{"fresh": name == "bwrap-fresh", **options}))
    if name == "docker":
        from envpool.sandbox.docker import DockerConfig, DockerSandbox

        return DockerSandbox(DockerConfig(**options))
    if name == "unsafe-local":
        from envpool.sandbox.local import UnsafeLocalSandbox

        return UnsafeLocalSandbox(**options)
    raise ValueError(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")


def sandbox_python(sandbox: str) -> str | None:
    """The `major.minor` of the Python that `sandbox` runs programs with, or None where no project
    virtualenv is bound (unsafe-local, or a docker image that does not say)."""
    if sandbox.startswith("bwrap"):  # the host's own interpreter, bound read-only
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    if sandbox == "docker":
        from envpool.sandbox.docker import image_python

        return image_python()
    return None


def backend_problems() -> dict[str, str | None]:
    """For `rlide doctor`: each backend -> None if it can run here, else why not. Starts nothing."""
    from envpool.sandbox.bwrap import bwrap_available
    from envpool.sandbox.docker import engine_problem

    bwrap = None if bwrap_available() else "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    return {
        "bwrap": bwrap,
        "bwrap-fresh": bwrap,
        "docker": engine_problem(),
        "unsafe-local": None,
    }


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
    "sandbox_python",
    "make_sandbox",
    "prepare_test_run",
    "run_tests",
]
