#!/usr/bin/env bash
# GPU check: builds Chronos for the local GPU, runs the CUDA tests, then benchmarks expert streaming
# on CUDA: the bundled demo model and a synthetic Mixtral-shaped checkpoint (~3 GB of BF16
# experts), each at 100%, 50% and 25% VRAM expert-cache budgets with --prefetch none and predict,
# against the all-in-VRAM run. Reports decode tokens/s, stall time, copy time (timed by events on
# the copy stream) and how much of the copy time was hidden behind compute.
#
#   tools/gpu_check.sh [WORK_DIR]        (default /tmp/chronos-gpu-check; about 5 minutes on one GPU)
#
# Needs what scripts/install_deps.sh installs, the CUDA toolkit (nvcc, cuBLAS), a GPU, and
# python3 with numpy for the synthetic checkpoint (skipped with a note without numpy).
# Environment: DEVICE (default cuda; cpu runs the same pipeline without a GPU, to check the
# script), SYNTH_LAYERS (default 16), PROMPTS (bench prompts, default 8), TOKENS (default 32).
# Results: WORK_DIR/gpu_check.md (the table), WORK_DIR/*-bench.json, WORK_DIR/cuda_tests.log.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-/tmp/chronos-gpu-check}
DEVICE=${DEVICE:-cuda}
SYNTH_LAYERS=${SYNTH_LAYERS:-16}
PROMPTS=${PROMPTS:-8}
TOKENS=${TOKENS:-32}
JOBS=$(nproc)
mkdir -p "$WORK"
log() { printf '\n== %s\n' "$*" >&2; }

if [ "$DEVICE" != cpu ]; then
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  ARCH=-DCMAKE_CUDA_ARCHITECTURES=native
else
  ARCH=-DCMAKE_CUDA_ARCHITECTURES=90  # only checking the script: one architecture builds faster
fi

log "build (Release, CUDA for the local GPU)"
cmake -S "$REPO" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHRONOS_CUDA=ON $ARCH \
  -DCHRONOS_BUILD_BENCH=OFF >"$WORK/configure.log"
cmake --build "$WORK/build" -j "$JOBS" --target chronos chronos_test_cuda
CHRONOS="$WORK/build/chronos"

log "CUDA tests"
set +e
"$WORK/build/tests/chronos_test_cuda" 2>&1 | tee "$WORK/cuda_tests.log"
tests_rc=${PIPESTATUS[0]}
set -e
if [ "$tests_rc" -ne 0 ]; then echo "gpu_check: CUDA tests failed (see $WORK/cuda_tests.log)" >&2; exit 1; fi
if [ "$DEVICE" != cpu ] && grep -q '^\[  SKIPPED \]' "$WORK/cuda_tests.log"; then
  echo "gpu_check: CUDA tests were skipped: no usable GPU is visible" >&2
  exit 1
fi

# A pack with trained predictors: traces of the model on the demo's training prompts, a
# co-activation pack, predictors trained on those traces.
prepare() {  # name model_dir
  local name=$1 model=$2
  if [ -f "$WORK/$name-pack/predictors.safetensors" ]; then return; fi
  log "$name: trace, pack, train predictors"
  "$CHRONOS" trace -m "$model" --prompts "$REPO/models/chronos-demo/prompts/train.jsonl" --limit 48 -n 32 \
    -o "$WORK/$name-traces"
  rm -rf "$WORK/$name-pack"
  "$CHRONOS" pack -m "$model" --traces "$WORK/$name-traces" -o "$WORK/$name-pack"
  "$CHRONOS" train-predictors --traces "$WORK/$name-traces" -o "$WORK/$name-pack" --epochs 10
}

bench() {  # name
  local name=$1
  log "$name: bench on $DEVICE"
  "$CHRONOS" bench -m "$WORK/$name-pack" --prompts "$REPO/models/chronos-demo/prompts/test.jsonl" \
    --limit "$PROMPTS" -n "$TOKENS" --expert-cache 100%,50%,25% --prefetch none,predict --device "$DEVICE" \
    --json "$WORK/$name-bench.json" 2>&1 | tee "$WORK/$name-bench.txt"
}

prepare demo "$REPO/models/chronos-demo"
bench demo
benched=(demo)
if python3 -c 'import numpy' 2>/dev/null; then
  if [ ! -f "$WORK/synthetic/config.json" ]; then
    log "synthetic checkpoint ($SYNTH_LAYERS layers)"
    python3 "$REPO/tools/make_synthetic_checkpoint.py" --out "$WORK/synthetic" --layers "$SYNTH_LAYERS"
  fi
  prepare synthetic "$WORK/synthetic"
  bench synthetic
  benched+=(synthetic)
else
  echo "gpu_check: python3 with numpy not found: the synthetic checkpoint is skipped" >&2
fi

# The table. Copy hidden = 1 - (decode time beyond the all-in-VRAM run) / (copy time), clamped to
# [0, 1]: the extra time also holds disk reads, so this is a lower bound on how much of the copy
# time overlapped compute.
python3 - "$WORK" "$DEVICE" "${benched[@]}" <<'EOF' | tee "$WORK/gpu_check.md"
import json, sys
work, device, names = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"| model | configuration | decode tok/s | vs all-in-VRAM | stall s | copies | copy s | copy hidden | hit % |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for name in names:
    rows = json.load(open(f"{work}/{name}-bench.json"))
    base = next(r for r in rows if r["all_resident"])
    per_step = base["decode_seconds"] / max(1, base["decode_steps"])
    for r in rows:
        extra = r["decode_seconds"] - per_step * r["decode_steps"]
        copy = r.get("copy_seconds", 0.0)
        hidden = "-" if copy <= 0 or r["all_resident"] else f"{max(0.0, min(1.0, 1 - extra / copy)):.0%}"
        ratio = r["decode_tokens_per_second"] / max(1e-9, base["decode_tokens_per_second"])
        hits = 100.0 * r["hits"] / max(1, r["lookups"])
        print(f"| {name} | {r['configuration']} | {r['decode_tokens_per_second']:.1f} | {ratio:.2f} | "
              f"{r['stall_seconds']:.3f} | {r.get('copies', 0)} | {copy:.3f} | {hidden} | {hits:.1f} |")
print(f"\n(device {device}; {work}/*-bench.json hold every field)")
EOF
