#!/usr/bin/env bash
# The whole suite, as CI runs it: every test on .venv (Python 3.11), then the core suite (server,
# sandbox, pool, search: what runs without the training extra) on each extra interpreter that
# setup.sh prepared (.venv-3.13). Extra arguments go to pytest and run on .venv only.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True
# litellm's mock responses trip a pydantic serializer warning at interpreter exit, after pytest's summary.
export PYTHONWARNINGS="ignore:Pydantic serializer warnings:UserWarning"
if (($#)); then
  exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
fi
status=0
.venv/bin/python -m pytest -q -p no:cacheprovider || status=$?
for venv in .venv-3.*; do
  [[ -x $venv/bin/python ]] || continue
  printf '\n[test] the core suite on %s\n' "$("$venv/bin/python" -V)"
  # test_extras_resolve resolves for every Python from whichever runs it: once (above) is enough.
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --ignore=tests/test_extras_resolve.py || status=$?
done
exit "$status"
