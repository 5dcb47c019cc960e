#!/usr/bin/env bash
# Create .venv/ and install the project with its pinned dependencies (constraints.txt).
# Idempotent: re-installs only when pyproject.toml or constraints.txt changed.
set -euo pipefail
cd "$(dirname "$0")/.."

python=""
for candidate in "${PYTHON:-}" python3.11 python3 python; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1 &&
     "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    python="$candidate"; break
  fi
done
if [ -z "$python" ]; then
  echo "minruntime: error: Python >= 3.11 is needed (set PYTHON=/path/to/python3.11)" >&2
  exit 2
fi

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $("$python" --version)"
  "$python" -m venv .venv
fi

stamp=.venv/.minruntime-install
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "==> installing minruntime and its dependencies into .venv"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
  echo "$want" > "$stamp"
fi
