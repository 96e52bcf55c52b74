"""Build pufferlib 3.0.0 from its sdist without torch, cache the wheel, install it.

Why this exists: pufferlib 3.0.0 is published only as an sdist whose setup.py imports torch and
downloads raylib/box2d, and `NO_OCEAN=1 NO_TRAIN=1` trips an upstream NameError
(`c_extension_paths`, fixed upstream in PR #336, unreleased). See docs/sandbox.md.

Steps (each idempotent):
1. find the sdist through pip's own configured indexes (pip's PackageFinder; no host is named here),
2. check the pinned sha256,
3. apply three exact-match edits (each must match exactly once, or we stop),
4. build a pure-Python wheel with NO_OCEAN=1 NO_TRAIN=1 into .tools/wheels/ (cached),
5. install it with --no-deps and its runtime requirements named here: its metadata says numpy<2,
   which has no Python 3.13 wheels, while the pure-Python part rlide uses runs on numpy 2 (the
   numpy version is rlide's own requirement, by Python version, in pyproject.toml).

Usage: python scripts/build_pufferlib.py [--python PATH] [--wheel-dir DIR] [--no-install]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

NAME = "pufferlib"
VERSION = "3.0.0"
SDIST = f"{NAME}-{VERSION}.tar.gz"
SDIST_SHA256 = "7df3a3e3f5f894d78d2a1f5374097890aec01473183e748abefe4f3faa10eaa9"
WHEEL = f"{NAME}-{VERSION}-py3-none-any.whl"
# The wheel's own requirements less numpy, plus psutil, which pufferlib.vector imports undeclared.
RUNTIME_REQUIREMENTS = [
    "psutil>=5.9",
    "gym<=0.23",
    "gymnasium<=0.29.1",
    "pettingzoo<=1.24.1",
    "shimmy[gym-v21]",
    "setuptools",  # gym 0.23 imports distutils, gone from the standard library since 3.12
]

ROOT = Path(__file__).resolve().parent.parent

# (file, old, new): exact-match edits; each `old` must occur exactly once.
EDITS: list[tuple[str, str, str]] = [
    (
        "setup.py",
        "c_extensions = []\nif not NO_OCEAN:\n",
        "c_extensions = []\nc_extension_paths = []  # rlide: upstream PR #336\nif not NO_OCEAN:\n",
    ),
    (
        "setup.py",
        "from torch.utils import cpp_extension\n"
        "from torch.utils.cpp_extension import (\n"
        "    CppExtension,\n"
        "    CUDAExtension,\n"
        "    BuildExtension,\n"
        "    CUDA_HOME,\n"
        ")\n",
        "if os.getenv('NO_TRAIN', '0') == '1':  # rlide: build without torch\n"
        "    import types as _types\n"
        "    cpp_extension = _types.SimpleNamespace(BuildExtension=build_ext)\n"
        "    CppExtension = CUDAExtension = BuildExtension = CUDA_HOME = None\n"
        "else:\n"
        "    from torch.utils import cpp_extension\n"
        "    from torch.utils.cpp_extension import (\n"
        "        CppExtension,\n"
        "        CUDAExtension,\n"
        "        BuildExtension,\n"
        "        CUDA_HOME,\n"
        "    )\n",
    ),
    (
        "pyproject.toml",
        'requires = ["setuptools", "wheel", "Cython", "numpy", "torch"]',
        'requires = ["setuptools", "wheel", "numpy"]',
    ),
]


def log(msg: str) -> None:
    # A build script talks to the person running it; stderr keeps stdout clean for callers.
    sys.stderr.write(f"[build_pufferlib] {msg}\n")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_sdist(dest: Path) -> Path:
    """Fetch the sdist via pip's PackageFinder, so pip's configured indexes/proxies/certs apply.

    `pip download --no-binary :all:` cannot be used: it prepares metadata, which runs the broken
    setup.py. pip's internals are used instead, as pip itself would resolve the link.
    """
    target = dest / SDIST
    if target.exists() and sha256_of(target) == SDIST_SHA256:
        return target
    from pip._internal.commands import create_command  # only pip knows its own configuration

    cmd = create_command("download")
    options, _ = cmd.parse_args(["--no-deps", "--no-binary", ":all:", f"{NAME}=={VERSION}"])
    with cmd.main_context():
        session = cmd.get_default_session(options)
        finder = cmd._build_package_finder(options=options, session=session)
        links = [
            c.link for c in finder.find_all_candidates(NAME) if str(c.version) == VERSION and c.link.filename == SDIST
        ]
        if not links:
            raise SystemExit(f"{SDIST} not found on pip's configured indexes")
        log(f"downloading {links[0].filename}")
        resp = session.get(links[0].url_without_fragment, stream=True)
        resp.raise_for_status()
        tmp = target.with_suffix(".part")
        with tmp.open("wb") as fh:
            for chunk in resp.iter_content(1 << 20):
                fh.write(chunk)
    got = sha256_of(tmp)
    if got != SDIST_SHA256:
        tmp.unlink()
        raise SystemExit(f"sha256 mismatch for {SDIST}: got {got}, pinned {SDIST_SHA256}")
    tmp.replace(target)
    return target


def safe_extract(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data")  # refuses absolute paths, `..`, device nodes
    return into / f"{NAME}-{VERSION}"


def apply_edits(src: Path) -> None:
    for rel, old, new in EDITS:
        path = src / rel
        text = path.read_text()
        count = text.count(old)
        if count != 1:
            raise SystemExit(f"edit to {rel} expected exactly one match, found {count}")
        path.write_text(text.replace(old, new))


def build_wheel(python: str, wheel_dir: Path) -> Path:
    wheel = wheel_dir / WHEEL
    if wheel.exists():
        log(f"cached wheel {wheel}")
        return wheel
    wheel_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pufferlib-build-") as tmp:
        tmpdir = Path(tmp)
        sdist = download_sdist(wheel_dir)
        src = safe_extract(sdist, tmpdir)
        apply_edits(src)
        env = dict(os.environ, NO_OCEAN="1", NO_TRAIN="1")
        log("building wheel (NO_OCEAN=1 NO_TRAIN=1)")
        subprocess.run(
            [python, "-m", "pip", "wheel", "--no-deps", "-w", str(tmpdir / "out"), str(src)],
            env=env,
            check=True,
            cwd=tmpdir,
        )
        built = tmpdir / "out" / WHEEL
        if not built.exists():
            raise SystemExit(f"wheel {WHEEL} was not produced")
        built.replace(wheel)
    return wheel


def installed(python: str) -> bool:
    probe = (
        "import importlib.metadata as m, sys;"
        f"sys.exit(0 if m.version('{NAME}') == '{VERSION}' and m.version('psutil') else 1)"
    )
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--python", default=sys.executable, help="interpreter to install into")
    parser.add_argument("--wheel-dir", type=Path, default=ROOT / ".tools" / "wheels")
    parser.add_argument("--no-install", action="store_true")
    args = parser.parse_args()
    wheel = build_wheel(args.python, args.wheel_dir)
    if args.no_install:
        return 0
    if installed(args.python):
        log("pufferlib already installed")
        return 0
    subprocess.run(
        [args.python, "-m", "pip", "install", "--quiet", *RUNTIME_REQUIREMENTS],
        check=True,
    )
    subprocess.run(
        [args.python, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
    )
    log("installed pufferlib " + VERSION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
