#!/usr/bin/env bash
# Installs what is missing, builds the release binary and generates text with the bundled model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target chronos
./build/release/chronos generate -p "${1:-The history of}" -n "${2:-64}"
