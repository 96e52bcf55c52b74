#!/usr/bin/env bash
# Real open-source libraries, their sdists with their own test suites, fetched once per machine into
# .tools/projects/ for the reward tests and benchmarks/rewards.py: more-itertools (threaded tests,
# the suite that a 1 GiB address-space cap crashed) and cachetools (a src layout, a threading test).
# Each sdist's sha256 is pinned. Idempotent: nothing to do when they are there. Offline, the tests
# that need them skip and say so.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
DEST="$ROOT/.tools/projects"
mkdir -p "$DEST"
while read -r name version sha; do
  file="$DEST/${name//-/_}-$version.tar.gz"
  if [[ -f $file ]] && echo "$sha  $file" | sha256sum -c --status; then
    continue
  fi
  if ! "$PYTHON" -m pip download -q --no-binary :all: --no-deps "$name==$version" -d "$DEST" >/dev/null 2>&1 \
      || ! echo "$sha  $file" | sha256sum -c --status; then
    rm -f "$file"
    printf '[setup_projects] WARNING: could not fetch %s %s with sha256 %s: its tests skip\n' "$name" "$version" "$sha" >&2
  fi
done <<'PINS'
more-itertools 11.2.1 cbf08fd0af284dc69718b9b76a8e6203df624d70209ea511e4219d350c856f63
cachetools 8.0.2 30ac523adfc118b51d2b2e7bad8a0ddb31370dfe2700c7f10ca224f36ccf81e0
PINS
