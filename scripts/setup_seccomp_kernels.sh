#!/usr/bin/env bash
# Optional (`make seccomp-kernels`): what tests/envpool/test_seccomp_kernels.py needs to run the
# aarch64 and riscv64 seccomp filters in real kernels of theirs under qemu. Needs root for
# apt-get: qemu-system-arm and qemu-system-misc, the aarch64, riscv64 and armhf cross compilers
# (about 600 MB installed). Then fetches two pinned Debian kernel packages (~170 MB, checked by
# sha256) and caches their images (~64 MB) under ~/.cache/rlide/seccomp-kernels.
# Without it those tests are skipped with the reason; the rest of the suite does not need it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf '[setup_seccomp_kernels] %s\n' "$*" >&2; }

PACKAGES=(qemu-system-arm qemu-system-misc gcc-aarch64-linux-gnu libc6-dev-arm64-cross
          gcc-riscv64-linux-gnu libc6-dev-riscv64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    say "needs root on Debian/Ubuntu to install: ${missing[*]}"
    say "  sudo apt-get install --no-install-recommends ${missing[*]}"
    exit 1
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
    || { apt-get update -qq >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }
fi
cd "$ROOT"
.venv/bin/python -m tests.envpool.seccomp_kernels fetch >&2
