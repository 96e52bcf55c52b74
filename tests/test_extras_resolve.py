"""Each environment rlide documents resolves against the package index, for the Python and platform it
is meant for: the CPU training extra (what `make setup` installs) and the GPU one (ART's LocalBackend
with its own torch and transformers pins, docs/gpu.md). A pin that drifts out of what its
dependencies allow fails here instead of on a user's GPU box. pip resolves for the target Python and
x86_64 manylinux without installing anything (`--dry-run --report`), with pip run by that Python
(pip evaluates environment markers such as numpy's `python_version` against its own interpreter, not
`--python-version`); skipped when no index answers or no such interpreter is here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# What a current x86_64 Linux accepts: pip takes --platform literally, not with the older tags it implies.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(17, 40)] + ["manylinux2014_x86_64"]


def _pip(*args: str, timeout: float, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    command = [python, "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> None:
    probe = _pip("download", "--no-deps", "--timeout", "15", "--retries", "1", "-d",
                 str(tmp_path_factory.mktemp("probe")), "openpipe-art==0.5.18", timeout=120)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"no package index answers here: {probe.stderr.strip()[-300:]}")


def resolve(extra: str, python: str, report: Path) -> dict[str, dict[str, Any]]:
    """Every distribution pip would install for rlide[extra] on `python`, by name: its metadata."""
    requirements = [*PROJECT["dependencies"], *PROJECT["optional-dependencies"][extra]]
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    found = subprocess.run(["bash", str(ROOT / "scripts" / "find_python.sh"), python], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"no Python {python} interpreter here (scripts/find_python.sh)")
    result = _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                  *platforms, "--only-binary=:all:", "--target", str(report.parent / "unused"),
                  *requirements, timeout=900, python=found.stdout.strip())  # fmt: skip
    assert result.returncode == 0, f"rlide[{extra}] does not resolve on Python {python}:\n{result.stderr[-3000:]}"
    installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower(): item["metadata"] for item in installs}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "python"), [("training", "3.11"), ("training", "3.12"), ("training", "3.13"), ("gpu", "3.12")]
)
def test_each_extra_resolves_for_its_python(index: None, tmp_path: Path, extra: str, python: str) -> None:
    assert PROJECT["requires-python"] and Requirement(f"python{PROJECT['requires-python']}").specifier.contains(python)
    resolved = resolve(extra, python, tmp_path / "report.json")
    for line in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"][extra]]:
        requirement = Requirement(line)
        if requirement.marker and not requirement.marker.evaluate({"python_version": python}):
            continue
        name = requirement.name.lower()
        assert name in resolved, (extra, name)
        version = resolved[name]["version"]
        assert requirement.specifier.contains(version, prereleases=True), (extra, name, version)
    if extra == "gpu":
        # ART's LocalBackend runs on the torch and transformers its backend extra pins (not the CPU
        # extra's), and brings vLLM up in a runtime of its own.
        environment = {"extra": "backend", "python_version": python, "sys_platform": "linux"}
        backend = [Requirement(line) for line in resolved["openpipe-art"]["requires_dist"]]
        pins = {r.name.lower(): r.specifier for r in backend if r.marker and r.marker.evaluate(environment)}
        assert {"torch", "transformers", "unsloth"} <= pins.keys()
        for name in ("torch", "transformers", "unsloth"):
            assert pins[name].contains(resolved[name]["version"]), (name, resolved[name]["version"], pins[name])
        assert "vllm" not in resolved
