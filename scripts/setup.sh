#!/usr/bin/env bash
# Sets up everything rlide needs on a fresh Debian/Ubuntu machine, idempotently and quickly on
# re-runs: system packages (when root), the virtualenv with every extra used by the tests, the
# torch-free pufferlib build, and the Node tools the tests use (the MCP Inspector).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
say() { printf '[setup] %s\n' "$*" >&2; }

# --- system packages ------------------------------------------------------------------------
# chromium + chromium-driver: the dashboard tests drive a real headless browser.
APT_PACKAGES=(bubblewrap postgresql patch chromium chromium-driver)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    say "installing system packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Debian starts a cluster for the postgresql package; rlide's tests run their own.
    if command -v pg_ctlcluster >/dev/null; then pg_ctlcluster --skip-systemctl-redirect 15 main stop 2>/dev/null || true; fi
  else
    say "WARNING: missing system packages (${missing[*]}) and not root: install them with"
    say "  sudo apt-get install ${missing[*]}"
    say "Without bubblewrap there is no sandbox; without postgresql or chromium their tests are skipped."
  fi
fi

# --- python virtualenv ------------------------------------------------------------------------
if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv with $PY"
  "$PY" -m venv .venv
fi
stamp=.venv/.rlide-setup
want=$(cat pyproject.toml scripts/*.sh scripts/*.py 2>/dev/null | sha256sum | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  say "installing rlide and its extras into .venv"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e ".[dev,postgres,docker,training,ray]"
  for hook in scripts/setup_*.sh; do
    [[ -e $hook ]] || continue
    say "running $hook"
    bash "$hook"
  done
  echo "$want" > "$stamp"
else
  say ".venv is up to date"
fi

# --- a second interpreter for the core suite (server, sandbox, pool, search): Python 3.13 -------
# CI runs the whole suite on 3.11 (.venv) and the core suite on each of these (scripts/test.sh).
# The training extra is left out: its torch and ART are exercised on 3.11 only.
# RLIDE_EXTRA_PYTHONS="" skips them; "3.12 3.13" adds 3.12.
for version in ${RLIDE_EXTRA_PYTHONS-3.13}; do
  venv=.venv-$version
  if ! py=$(bash scripts/find_python.sh "$version"); then
    say "WARNING: no Python $version interpreter found (PATH, pyenv, /usr/bin): its core suite is skipped"
    continue
  fi
  [[ -x $venv/bin/python ]] || { say "creating $venv with $py"; "$py" -m venv "$venv"; }
  if [[ ! -f $venv/.rlide-setup || $(cat "$venv/.rlide-setup") != "$want" ]]; then
    say "installing rlide's core into $venv"
    "$venv/bin/pip" install -q --upgrade pip >/dev/null
    "$venv/bin/pip" install -q -e ".[dev,postgres,docker]"
    PYTHON=$venv/bin/python bash scripts/setup_envpool.sh
    PYTHON=$venv/bin/python bash scripts/setup_memory.sh
    echo "$want" > "$venv/.rlide-setup"
  fi
done

# --- node tools for the tests: the MCP Inspector CLI (an independent client), the conformance suite ---
if command -v npm >/dev/null; then
  if ! cmp -s scripts/node-tools/package-lock.json .tools/package-lock.json \
      || [[ ! -x .tools/node_modules/.bin/mcp-inspector || ! -x .tools/node_modules/.bin/conformance ]]; then
    say "installing the Node test tools (MCP Inspector, conformance suite, Node 22) into .tools/"
    mkdir -p .tools
    cp scripts/node-tools/package.json scripts/node-tools/package-lock.json .tools/
    (cd .tools && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
else
  say "WARNING: npm not found: the MCP Inspector and conformance tests will be skipped (apt-get install nodejs npm)"
fi
say "ready: $ROOT/.venv/bin/rlide"
