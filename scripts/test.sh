#!/usr/bin/env bash
# Installs what is missing, builds with warnings as errors, runs the whole test suite, then
# runs it again under AddressSanitizer + UndefinedBehaviorSanitizer (skip with CHRONOS_NO_ASAN=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
jobs=$(nproc)
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release
if [ "${CHRONOS_NO_ASAN:-0}" != 1 ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan
fi
