"""`docker`: the same fork-server, inside a locked-down container (optional extra: `docker` SDK).

The docker SDK checks that an engine answers and removes our labelled containers; the server
itself is started with `docker run -i` so it speaks the same stdin/stdout protocol as under bwrap.
Container: no network, read-only root, tmpfs workspace, all capabilities dropped except the few the
server needs to set up runs (children drop to an unprivileged uid and lose them), no-new-privileges,
cgroup memory and pids limits. Costs about +100 ms to start a server (platform.md), after which runs
fork from it like under bwrap. The test tools' site (pytest) and the served project's virtualenv
are bound read-only as under bwrap (`PythonSites`); the image brings Python and `patch`.

No engine runs on the project's machines by default: tests skip with the reason. Tested with
dockerd 20.10 (Debian docker.io, iptables and bridge off) and an image made by debootstrap.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field

from envpool.sandbox._client import FORKSERVER_SCRIPT
from envpool.sandbox.base import SandboxUnavailable
from envpool.sandbox.bwrap import HOSTNAME, MASKED, SANDBOX_CGROUP, SERVER_CAPS
from envpool.sandbox.cgroups import ServerCgroup
from envpool.sandbox.pooled import PooledForkServerSandbox
from envpool.sandbox.seccomp import docker_profile, filter_bytes
from envpool.sandbox.sites import PythonSites

LABEL = "rlide.sandbox"
#: Built locally by `scripts/setup_docker.sh`, as root (debootstrap + docker import): no image
#: registry is reachable from the project's machines.
DEFAULT_IMAGE = "rlide-sandbox:bookworm-2"


@dataclass(frozen=True)
class DockerConfig(PythonSites):
    image: str = field(default_factory=lambda: os.environ.get("RLIDE_DOCKER_IMAGE", DEFAULT_IMAGE))
    python: str = "python3"
    memory_mb: int = 2048  # whole-container cap (cgroup); as root each run also has its own memory group
    pids: int = 512
    workspace_mb: int = 256
    fresh: bool = False


def engine_problem(image: str | None = None) -> str | None:
    """Why docker cannot be used here (no SDK, no engine, no image), or None if it can."""
    try:
        import docker  # type: ignore[import-untyped]  # optional extra
    except ImportError:
        return "the docker SDK is not installed (pip install 'docker>=7')"
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    try:
        client = docker.from_env(timeout=3)
        client.ping()
    except Exception as exc:  # the SDK raises several unrelated types for "no engine"
        return f"no Docker engine answers: {exc}"
    image = image or os.environ.get("RLIDE_DOCKER_IMAGE", DEFAULT_IMAGE)
    try:
        client.images.get(image)
    except Exception:
        return f"docker image {image!r} is not present (build it as root: scripts/setup_docker.sh)"
    return None


def image_python(image: str | None = None) -> str | None:
    """The `major.minor` of the image's Python, from the `rlide.python` label setup_docker.sh gives
    it; None for an image without the label, or no engine. A project's virtualenv is bound only
    into an image whose Python can load its compiled modules."""
    try:
        import docker

        found = docker.from_env(timeout=3).images.get(image or DockerConfig().image)
    except Exception:  # no SDK, no engine, no image: the backend itself says which when started
        return None
    label = (found.labels or {}).get("rlide.python")
    return label if isinstance(label, str) else None


class DockerSandbox(PooledForkServerSandbox):
    name = "docker"

    def __init__(self, config: DockerConfig | None = None) -> None:
        self.config = config or DockerConfig()
        problem = engine_problem(self.config.image)
        if problem is not None:
            raise SandboxUnavailable(problem)
        super().__init__(
            fresh=self.config.fresh,
            drop_uid=True,
            # The container has its own memory and pids caps; this group holds its runs' groups.
            cgroup_limits=(self.config.memory_mb, self.config.pids) if os.geteuid() == 0 else None,
            launcher_joins_cgroup=False,
            isolate=True,
        )
        self._run_filter = filter_bytes()
        profile = docker_profile()
        self._profile: str | None = None
        if profile is not None:
            fd, self._profile = tempfile.mkstemp(prefix="rlide-seccomp-", suffix=".json")
            with os.fdopen(fd, "w") as fh:
                json.dump(profile, fh)

    def server_argv(self, uids: list[int], once: bool, cgroup: ServerCgroup | None) -> list[str]:
        c = self.config
        argv = [
            "docker", "run", "-i", "--rm", "--label", f"{LABEL}=1",
            "--network", "none", "--read-only", "--ipc", "private", "--hostname", HOSTNAME,
            "--tmpfs", f"/ws:size={c.workspace_mb}m,mode=0711", "--tmpfs", "/tmp:mode=0755",
            "--memory", f"{c.memory_mb}m", "--pids-limit", str(c.pids),
            "--security-opt", "no-new-privileges", "--cap-drop", "ALL",
            *(["--security-opt", f"seccomp={self._profile}"] if self._profile else []),
        ]  # fmt: skip
        for cap in SERVER_CAPS:
            argv += ["--cap-add", cap.removeprefix("CAP_")]
        for host, inside in [(str(FORKSERVER_SCRIPT), "/opt/rlide/forkserver.py"), *c.mounts()]:
            # --mount, not -v: a ':' in a path would split -v's value. Its value is CSV, so quoted.
            argv += ["--mount", f'type=bind,"source={host}","target={inside}",readonly']
        if cgroup is not None and cgroup.runs:
            private = os.path.dirname(SANDBOX_CGROUP)
            argv += [
                "--tmpfs",
                f"{private}:mode=0700",
                "--mount",
                f'type=bind,"source={cgroup.memory}","target={SANDBOX_CGROUP}"',
            ]
        argv += [
            "--workdir", "/ws", c.image,
            c.python, "-I", "-S", "/opt/rlide/forkserver.py",
            "--uids", ",".join(map(str, uids)), "--ws-root", "/ws",
            "--sweep", "uid", "--own-pidns", "1", "--once", "1" if once else "0",
            "--isolate", "1", "--workspace-mb", str(c.workspace_mb),
            *(["--cgroup", SANDBOX_CGROUP] if cgroup is not None and cgroup.runs else []),
            # Docker refuses mounts over /proc: each run's child masks them in its own mount namespace.
            "--masked", json.dumps(MASKED),
            *(["--run-filter", self._run_filter.hex()] if self._run_filter else []),
            *c.server_args(),
        ]  # fmt: skip
        return argv

    def close(self) -> None:
        super().close()
        if self._profile is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._profile)
        try:
            import docker

            client = docker.from_env(timeout=3)
            for container in client.containers.list(filters={"label": f"{LABEL}=1"}):
                container.remove(force=True)
        except Exception:  # best effort: `--rm` already removes them when the server exits
            pass
