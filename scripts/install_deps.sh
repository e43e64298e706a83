#!/usr/bin/env bash
# Installs the Debian 12 packages Chronos builds against (run as root); a no-op when present.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config
          libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev liburing-dev
          libpcre2-dev libutf8proc-dev libxxhash-dev libgtest-dev libbenchmark-dev
          libcpp-httplib-dev         # chronos serve
          python3-venv               # the OpenAI client test (tests/server)
          clang libclang-rt-14-dev   # clang + libFuzzer: the fuzz targets (tests/fuzz)
          clang-format)              # scripts/check_format.sh
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
