#!/usr/bin/env bash
# Soak benchmark (not a test: it runs for minutes). Packs the bundled model, then runs long
# generations and many-prompt benches in every miss mode and prefetch policy at 5%, 25% and 50%
# expert budgets, sampling the resident set size, and checks what a long run must keep:
#   - every run exits 0; wait mode gives the resident model's exact text;
#   - the expert cache never holds more than its budget;
#   - RSS is flat after warm-up (the second half's peak within 5% + 4 MiB of the first half's);
#   - RUNS back-to-back wait runs are identical to the resident model;
#   - `| head -c 10` ends quietly (exit 0, no error on stderr);
#   - Ctrl-C leaves a byte prefix of the output and no partial files.
# Usage: scripts/soak.sh [TOKENS (default 2000)] [RUNS (default 20)] [BENCH_PROMPTS (default 40)];
# SOAK_DIR keeps the work folder (and its pack) between runs.
set -uo pipefail
cd "$(dirname "$0")/.."
TOKENS=${1:-2000}
RUNS=${2:-20}
BENCH_PROMPTS=${3:-40}
BIN=build/release/chronos
MODEL=models/chronos-demo
WORK=${SOAK_DIR:-$(mktemp -d /tmp/chronos-soak.XXXXXX)}
PROMPT="The history of the Debian project began when"
mkdir -p "$WORK"
failures=0
pass() { echo "soak: ok    $*"; }
fail() { echo "soak: FAIL  $*"; failures=$((failures + 1)); }

if [ ! -x "$BIN" ]; then
  cmake --preset release >/dev/null && cmake --build --preset release --target chronos >/dev/null || exit 1
fi

if [ ! -d "$WORK/pack" ]; then
  echo "soak: tracing, packing and training predictors in $WORK"
  "$BIN" trace -m "$MODEL" --prompts "$MODEL/prompts/train.jsonl" --limit 48 -n 32 -o "$WORK/traces" 2>/dev/null &&
    "$BIN" pack -m "$MODEL" --traces "$WORK/traces" -o "$WORK/pack" 2>/dev/null &&
    "$BIN" train-predictors --traces "$WORK/traces" -o "$WORK/pack" --epochs 8 2>/dev/null || exit 1
fi
PACK="$WORK/pack"

# run_sampled OUT ARGS...: runs chronos with stdout to OUT and stderr to OUT.err, samples VmRSS
# (KiB) every 0.2 s into OUT.rss; returns chronos's exit code.
run_sampled() {
  local out=$1
  shift
  "$BIN" "$@" >"$out" 2>"$out.err" &
  local pid=$!
  : >"$out.rss"
  while kill -0 "$pid" 2>/dev/null; do
    awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null >>"$out.rss"
    sleep 0.2
  done
  wait "$pid"
}

# rss_flat FILE: the second half's peak is within 5% + 4 MiB of the first half's. The last three
# samples (0.6 s) are left out: at exit the shared libraries' destructors page in tens of MiB of
# library code (the CUDA libraries linked into the binary), which is teardown, not growth.
rss_flat() {
  awk '{v[NR] = $1} END {
    NR -= 3
    if (NR < 4) exit 0
    h = int(NR / 2); a = 0; b = 0
    for (i = 1; i <= h; i++) if (v[i] > a) a = v[i]
    for (i = h + 1; i <= NR; i++) if (v[i] > b) b = v[i]
    printf "%d KiB -> %d KiB", a, b
    exit !(b <= a * 1.05 + 4096)
  }' "$1"
}

"$BIN" generate -m "$PACK" -p "$PROMPT" -n "$TOKENS" --ignore-eos >"$WORK/resident.txt" 2>/dev/null ||
  { echo "soak: the resident run failed"; exit 1; }
echo "soak: $TOKENS tokens per generation, pack $PACK"

for budget in 5% 25% 50%; do
  for miss in wait fallback; do
    for prefetch in none lru predict; do
      name="generate $budget $miss $prefetch"
      out="$WORK/gen-${budget%\%}-$miss-$prefetch.txt"
      stats="$out.json"
      start=$(date +%s.%N)
      run_sampled "$out" generate -m "$PACK" -p "$PROMPT" -n "$TOKENS" --ignore-eos \
        --expert-cache "$budget" --on-miss "$miss" --prefetch "$prefetch" --stats-json "$stats"
      rc=$?
      seconds=$(echo "$(date +%s.%N) - $start" | bc)
      if [ "$rc" -ne 0 ]; then fail "$name: exit $rc: $(tail -1 "$out.err")"; continue; fi
      if [ "$miss" = wait ] && ! cmp -s "$out" "$WORK/resident.txt"; then fail "$name: text differs from resident"; fi
      peak=$(python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['experts']; print(e['peak_cache_bytes'], e['budget_bytes'])" "$stats")
      read -r peak_bytes budget_bytes <<<"$peak"
      if [ "$peak_bytes" -gt "$budget_bytes" ]; then fail "$name: cache peak $peak_bytes > budget $budget_bytes"; fi
      if rss=$(rss_flat "$out.rss"); then pass "$name: ${seconds}s, RSS $rss, cache peak $peak_bytes of $budget_bytes"
      else fail "$name: RSS grew: $rss"; fi
    done
  done
done

same=0
for i in $(seq 1 "$RUNS"); do
  "$BIN" generate -m "$PACK" -p "$PROMPT" -n "$TOKENS" --ignore-eos --expert-cache 25% --prefetch predict \
    >"$WORK/repeat.txt" 2>/dev/null && cmp -s "$WORK/repeat.txt" "$WORK/resident.txt" && same=$((same + 1))
done
if [ "$same" -eq "$RUNS" ]; then pass "$RUNS back-to-back wait runs identical to resident"
else fail "only $same of $RUNS back-to-back wait runs identical to resident"; fi

"$BIN" generate -m "$PACK" -p "$PROMPT" -n "$TOKENS" --ignore-eos --expert-cache 5% 2>"$WORK/head.err" |
  head -c 10 >/dev/null
head_rc=${PIPESTATUS[0]}
if [ "$head_rc" = 0 ] && [ "$(grep -cv '^chronos: \(experts\|prompt\)' "$WORK/head.err")" = 0 ]; then
  pass "| head -c 10 ends quietly"
else
  fail "| head -c 10: exit $head_rc, stderr: $(cat "$WORK/head.err")"
fi

rm -rf "$WORK/interrupt"
mkdir -p "$WORK/interrupt"
# Job control on for this one: a script's background commands otherwise ignore SIGINT.
set -m
"$BIN" generate -m "$PACK" -p "$PROMPT" -n "$TOKENS" --ignore-eos --expert-cache 25% --io-latency-ms 2 \
  --stats-json "$WORK/interrupt/stats.json" >"$WORK/interrupt/out.txt" 2>/dev/null &
pid=$!
set +m
sleep 2
kill -INT "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
size=$(stat -c %s "$WORK/interrupt/out.txt")
if [ "$size" -gt 0 ] && cmp -s "$WORK/interrupt/out.txt" <(head -c "$size" "$WORK/resident.txt") &&
   [ -z "$(ls -A "$WORK/interrupt" | grep -v '^out.txt$')" ]; then
  pass "Ctrl-C after 2 s: a $size-byte prefix of the output, no partial files"
else
  fail "Ctrl-C: $size bytes, files: $(ls -A "$WORK/interrupt" | tr '\n' ' ')"
fi

out="$WORK/bench"
run_sampled "$out.txt" bench -m "$PACK" --prompts "$MODEL/prompts/test.jsonl" --limit "$BENCH_PROMPTS" -n 64 \
  --expert-cache 5%,25%,50% --on-miss wait,fallback --prefetch none,lru,predict --json "$out.json"
rc=$?
if [ "$rc" -ne 0 ]; then fail "bench $BENCH_PROMPTS prompts x 18 configurations: exit $rc: $(tail -1 "$out.txt.err")"
elif python3 - "$out.json" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
bad = [r["configuration"] for r in rows if r["on_miss"] == "wait" and not r["all_resident"] and not r["tokens_identical_to_exact"]]
over = [r["configuration"] for r in rows if r["peak_cache_bytes"] > r["budget_bytes"]]
for name in bad: print("  differs from exact:", name)
for name in over: print("  over budget:", name)
sys.exit(1 if bad or over else 0)
EOF
then
  rss=$(rss_flat "$out.txt.rss")
  pass "bench $BENCH_PROMPTS prompts x 18 configurations: wait rows identical to exact, budgets held, RSS $rss"
else
  fail "bench: a wait row differs from the exact run or a budget was exceeded ($out.json)"
fi

echo "soak: $failures failure(s); work folder $WORK"
exit $((failures > 0))
