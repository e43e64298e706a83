#!/usr/bin/env bash
# Installs what is missing, checks the formatting (scripts/check_format.sh), builds with warnings
# as errors, runs the whole test suite, then runs it again under AddressSanitizer +
# UndefinedBehaviorSanitizer (skip with CHRONOS_NO_ASAN=1), with every fuzz harness replaying its
# seeds and regressions and then mutating them for a few seconds (tests/fuzz; scripts/fuzz.sh runs
# them long under libFuzzer). The release build has the GPU tests twice: on the CUDA runtime (with
# nvcc; skipped without a device) and on its CPU emulation (tests/cuda_emulator), in every build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/client_venv.sh   # the openai client of the serve tests (PyPI)
bash scripts/check_format.sh
jobs=$(nproc)
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release
if [ "${CHRONOS_NO_ASAN:-0}" != 1 ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan
fi
