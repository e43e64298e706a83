#!/usr/bin/env bash
# The Python environment of the tests that act as real clients of chronos serve (the official
# `openai` package, from PyPI) and of tools/serve_load.py: build/client-venv. A no-op when present.
# The engine itself never needs Python.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/client-venv
if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "import openai" 2>/dev/null; then
  exit 0
fi
echo "creating $venv (the openai client for the serve tests)" >&2
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "openai>=1.40,<3"
