#!/usr/bin/env bash
# Prints the path of a working Python X.Y interpreter, or nothing (exit 1) when there is none:
# python X.Y on PATH, then pyenv's builds (whose shims answer only for the selected versions), then
# the system's. Used by setup.sh (the extra virtualenvs) and the tests that resolve for other Pythons.
# Usage: scripts/find_python.sh 3.13
set -uo pipefail
want=${1:?usage: find_python.sh X.Y}
candidates=("python$want")
for dir in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin; do
  [[ -d $dir ]] && candidates+=("$dir/python$want")
done
candidates+=("/usr/bin/python$want" "/usr/local/bin/python$want")
for candidate in "${candidates[@]}"; do
  got=$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
  if [[ $got == "$want" ]]; then
    command -v "$candidate"
    exit 0
  fi
done
exit 1
