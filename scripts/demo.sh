#!/usr/bin/env bash
# Installs what is missing, builds the release binary and generates text with the bundled model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target chronos
./build/release/chronos generate -p "${1:-The history of the}" -n "${2:-64}" --temp 0.8 --top-p 0.95 --repeat-penalty 1.1 --seed 1
