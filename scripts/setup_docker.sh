#!/usr/bin/env bash
# The optional docker sandbox backend: Debian's docker.io and debootstrap (root only, and only
# where no docker is installed at all, so a docker-ce install is left alone), and the sandbox image
# rlide-sandbox:bookworm-2 built locally with debootstrap + docker import (no image registry is
# reachable here): Python, and `patch` for run_tests' patches; pytest and a project's virtualenv
# are bound in from the host (envpool/sandbox/docker.py). The label says which Python it has, so
# a project's virtualenv is bound only into an image whose Python can load it. An engine is started only for the import and stopped after; the tests start
# their own. Never fails the set-up: without it, the docker backend says why it is unavailable.
set -uo pipefail
IMAGE="${RLIDE_DOCKER_IMAGE:-rlide-sandbox:bookworm-2}"
say() { printf '[setup_docker] %s\n' "$*" >&2; }
skip() { say "docker backend not set up: $*"; exit 0; }

[[ "$(id -u)" == 0 ]] || skip "needs root (apt-get install docker.io debootstrap, then re-run as root)"
command -v apt-get >/dev/null 2>&1 || skip "not a Debian/Ubuntu machine"
if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  wanted=()
  command -v dockerd >/dev/null 2>&1 || wanted+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || wanted+=(debootstrap)
  say "installing ${wanted[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${wanted[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
         --no-install-recommends "${wanted[@]}" >/dev/null 2>&1; } || skip "apt-get install ${wanted[*]} failed"
fi

started=""
if ! docker info >/dev/null 2>&1; then
  nohup dockerd --iptables=false --ip6tables=false --bridge=none >/tmp/rlide-setup-dockerd.log 2>&1 &
  started=$!
  for _ in $(seq 1 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { kill "$started" 2>/dev/null; skip "dockerd did not start (/tmp/rlide-setup-dockerd.log)"; }
fi
stop_engine() { [[ -z $started ]] || { kill "$started" 2>/dev/null; wait "$started" 2>/dev/null; }; }
trap stop_engine EXIT

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "$IMAGE is ready"
  exit 0
fi
# The machine's own apt mirror: the only package source it is known to reach.
mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)"
[[ -n $mirror ]] || mirror="$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null)"
[[ -n $mirror ]] || skip "no apt mirror configured to debootstrap from"
rootfs="$(mktemp -d /tmp/rlide-rootfs.XXXXXX)"
say "building $IMAGE with debootstrap from the machine's apt mirror (a few minutes, once)"
if debootstrap --variant=minbase --include=python3-minimal,libpython3.11-stdlib,patch bookworm "$rootfs" "$mirror" \
     >/tmp/rlide-debootstrap.log 2>&1 \
   && python="$(chroot "$rootfs" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
   && tar -C "$rootfs" -c . | docker import --change "LABEL rlide.python=$python" - "$IMAGE" >/dev/null; then
  say "$IMAGE is ready"
else
  say "docker backend not set up: building $IMAGE failed (/tmp/rlide-debootstrap.log)"
fi
rm -rf "$rootfs"
exit 0
