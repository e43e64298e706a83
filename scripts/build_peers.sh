#!/usr/bin/env bash
# Builds the peers Chronos is measured against from their public source on PyPI:
#   llama.cpp     from the llama-cpp-python source distribution (vendor/llama.cpp)
#   ik_llama.cpp  from the ik-llama-cpp-python source distribution (vendor/ik_llama.cpp)
# Each is built for this CPU (-march=native), Release, with llama-bench (and, for llama.cpp,
# llama-quantize and llama-imatrix, which make the GGUF files of the comparisons, and
# llama-completion, which tools/memory_limit_side_by_side.py runs).
#
#   scripts/build_peers.sh [--dir DIR] [--no-amx] [llama.cpp] [ik_llama.cpp]  (default: both, DIR=peers)
#
# --no-amx builds in build-noamx/ for the CPU's AVX-512 extensions but without ggml's AMX kernels,
# whose matrix product crashes on some virtual machines that report AMX (a segmentation fault in
# ggml_backend_amx_mul_mat on the Intel Xeon of docs/families.md); the default build keeps them.
#
# Prints the llama-bench path of each peer. Versions are pinned below so that figures can be
# reproduced; a run with other versions says so in its output (llama-bench prints its build).
set -euo pipefail

dir=peers
peers=()
no_amx=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir="${2:?--dir needs a folder}"; shift 2 ;;
    --no-amx) no_amx=1; shift ;;
    llama.cpp|ik_llama.cpp) peers+=("$1"); shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_peers: unknown argument '$1' (expected --dir DIR, llama.cpp or ik_llama.cpp)" >&2; exit 2 ;;
  esac
done
[[ ${#peers[@]} -gt 0 ]] || peers=(llama.cpp ik_llama.cpp)

for tool in python3 cmake ninja tar; do
  command -v "$tool" >/dev/null || { echo "build_peers: '$tool' is not installed" >&2; exit 1; }
done
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

# fetch NAME PACKAGE VERSION -> prints the unpacked source folder
fetch() {
  local package="$1" version="$2" stem
  stem="$(echo "$package" | tr - _)-$version"
  if [[ ! -d "$dir/$stem" ]]; then
    if [[ ! -f "$dir/$stem.tar.gz" ]]; then
      python3 -m pip download --quiet --no-deps --no-binary :all: -d "$dir" "$package==$version" >&2
    fi
    tar -xzf "$dir/$stem.tar.gz" -C "$dir"
  fi
  echo "$dir/$stem"
}

build() {
  local src="$1"; shift
  local targets=("$@")
  local out="$src/build" isa=(-DGGML_NATIVE=ON)
  if [[ $no_amx == 1 ]]; then
    out="$src/build-noamx"
    isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
         -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
         -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  fi
  cmake -S "$src" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release "${isa[@]}" \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON "${launcher[@]}" >&2
  cmake --build "$out" --target "${targets[@]}" >&2
}

for peer in "${peers[@]}"; do
  case "$peer" in
    llama.cpp)
      src="$(fetch llama-cpp-python 0.3.36)/vendor/llama.cpp"
      build "$src" llama-bench llama-quantize llama-imatrix llama-completion llama-server
      ;;
    ik_llama.cpp)
      src="$(fetch ik-llama-cpp-python 0.1.5)/vendor/ik_llama.cpp"
      # The source distribution lacks the script that writes common/build-info.cpp (its build
      # rule runs it): write one that fills the template, naming the release as the commit.
      gen="$src/common/cmake/build-info-gen-cpp.cmake"
      if [[ ! -f "$gen" ]]; then
        mkdir -p "$(dirname "$gen")"
        cat > "$gen" <<'CMAKE'
include(${CMAKE_CURRENT_SOURCE_DIR}/cmake/build-info.cmake)
if(BUILD_COMMIT STREQUAL "unknown")
  set(BUILD_COMMIT "ik-llama-cpp-python-0.1.5")
endif()
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/common/build-info.cpp.in ${CMAKE_CURRENT_SOURCE_DIR}/common/build-info.cpp)
CMAKE
      fi
      build "$src" llama-bench
      ;;
  esac
  echo "$peer: $src/$([[ $no_amx == 1 ]] && echo build-noamx || echo build)/bin/llama-bench"
done
