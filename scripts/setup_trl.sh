#!/usr/bin/env bash
# A second environment, .venv-trl, for the tests that train one step with TRL itself on rlide's
# exports: TRL's `datasets` needs numpy >= 2 and pyarrow, while .venv's pufferlib pins numpy < 2.
# The same torch and transformers as .venv. Offline or failing, the TRL tests skip and say so.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-trl"
PINS=(torch==2.13.0 transformers==5.23.0 'trl==1.16.*' 'datasets==5.2.*')
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
say() { printf '[setup_trl] %s\n' "$*" >&2; }
if [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c 'import trl, datasets, torch' 2>/dev/null; then
  exit 0
fi
say "making $VENV (torch, transformers, trl, datasets) for the TRL export tests"
rm -rf "$VENV"
log=$(mktemp)
if ! { "$PY" -m venv "$VENV" && "$VENV/bin/pip" install -q "${PINS[@]}"; } >"$log" 2>&1; then
  rm -rf "$VENV"
  say "WARNING: could not install ${PINS[*]} (offline?): the TRL export tests skip; pip said:"
  tail -5 "$log" >&2
fi
rm -f "$log"
