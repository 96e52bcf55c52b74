#!/usr/bin/env bash
# What tests/envpool/test_seccomp_kernels.py needs to run the aarch64 and riscv64 seccomp filters
# in real kernels of theirs under qemu (docs/sandbox.md, "The seccomp filters in real kernels"):
# as root, qemu-system-arm and qemu-system-misc and the aarch64, riscv64 and armhf cross compilers
# (about 600 MB installed), then two pinned Debian kernel packages (~170 MB fetched, checked by
# sha256), whose images (~64 MB) are cached under ~/.cache/rlide/seccomp-kernels.
# `make setup` runs it; RLIDE_SKIP_SECCOMP_KERNELS=1 leaves it out. It never fails the set-up:
# without it those tests are skipped with the reason, and nothing else needs it.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf '[setup_seccomp_kernels] %s\n' "$*" >&2; }
skip() { say "not set up: $*; the foreign-kernel seccomp tests will be skipped"; exit 0; }

[[ "${RLIDE_SKIP_SECCOMP_KERNELS:-}" == 1 ]] && skip "RLIDE_SKIP_SECCOMP_KERNELS=1"
PACKAGES=(qemu-system-arm qemu-system-misc gcc-aarch64-linux-gnu libc6-dev-arm64-cross
          gcc-riscv64-linux-gnu libc6-dev-riscv64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1 \
    || skip "needs root on Debian/Ubuntu (sudo apt-get install --no-install-recommends ${missing[*]})"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; } \
    || skip "apt-get install ${missing[*]} failed"
fi
cd "$ROOT" && .venv/bin/python -m tests.envpool.seccomp_kernels fetch >&2 || skip "the pinned kernels could not be fetched"
