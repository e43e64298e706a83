#!/usr/bin/env bash
# Installs what is missing, checks the formatting (scripts/check_format.sh), builds with warnings
# as errors, runs the whole test suite, then runs it again under AddressSanitizer +
# UndefinedBehaviorSanitizer (skip with CHRONOS_NO_ASAN=1);
# with nvcc, the GPU tests also run on the CPU emulation of the CUDA runtime; the fuzz targets run
# for a few seconds each.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/check_format.sh
jobs=$(nproc)
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release
# With nvcc the release build has the real CUDA code, whose GPU tests skip here: build them a
# second time on the CPU emulation of the CUDA runtime and run them (tests/cuda_emulator).
if [ -f build/release/tests/chronos_test_cuda ]; then
  cmake --preset emulated >/dev/null
  cmake --build --preset emulated -j "$jobs" --target chronos_test_cuda_emulated
  ctest --preset emulated -R '^cuda_emulated\.'
fi
# libFuzzer targets (clang, ASan + UBSan): each runs a few seconds from its seed corpus, and every
# input that once crashed one is replayed (tests/fuzz; scripts/fuzz.sh runs them long).
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs"
ctest --preset fuzz
if [ "${CHRONOS_NO_ASAN:-0}" != 1 ]; then
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan
fi
