#!/usr/bin/env bash
# Long libFuzzer runs: builds the preset `fuzz` (clang, ASan + UBSan) and runs each target for
# SECONDS (default 600), one at a time, on its seeds (tests/fuzz/corpus) and on what earlier runs
# found (build/fuzz/tests/fuzz/corpus), then prints executions per target.
#   scripts/fuzz.sh [SECONDS] [TARGET...]      targets: safetensors manifest trace config
#                                              tokenizer_json tokenizer_codec (default: all)
# The script creates its output folders in the fuzz build folder: a crashing input is saved
# there as artifacts/TARGET/crash-*; after the fix it goes to
# tests/fuzz/regressions/TARGET/, where ctest --preset fuzz replays it. Exit status 1 when any
# target crashed. Logs: fuzz-logs/TARGET.log in the same folder.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(safetensors manifest trace config tokenizer_json tokenizer_codec)
fi
if [[ ! "$seconds" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2
  exit 2
fi

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "${CHRONOS_FUZZ_JOBS:-$(nproc)}"

build=build/fuzz
mkdir -p "$build/fuzz-logs"
failed=0
summary=()
for target in "${targets[@]}"; do
  exe=$build/tests/fuzz/fuzz_$target
  if [ ! -x "$exe" ]; then
    echo "no fuzz target '$target' ($exe)" >&2
    exit 2
  fi
  found=$build/tests/fuzz/corpus/$target
  artifacts=$build/artifacts/$target
  log=$build/fuzz-logs/$target.log
  mkdir -p "$found" "$artifacts"
  echo "fuzz_$target: $seconds s" >&2
  status=ok
  # -rss_limit_mb: a crafted input that makes a loader allocate gigabytes is a finding.
  if ! "$exe" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" "$found" "tests/fuzz/corpus/$target" >"$log" 2>&1; then
    status="FOUND: $(ls -t "$artifacts" | head -n 1) (see $log)"
    failed=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  corpus=$(ls "$found" | wc -l)
  summary+=("$(printf '%-16s %12s %10s %8s  %s' "$target" "${runs:-?}" "${rate:-?}" "$corpus" "$status")")
done

printf '%-16s %12s %10s %8s  %s\n' target executions exec/s corpus result
printf '%s\n' "${summary[@]}"
exit "$failed"
