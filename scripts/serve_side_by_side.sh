#!/usr/bin/env bash
# chronos serve and llama-server under the same load (tools/serve_load.py: N clients, each sending
# streamed completions of 32 tokens one after another) at 1, 2, 4, 8 and 16 concurrent requests, on
# the same GGUF file, resident; then chronos serve streaming its experts from a pack at 25% in wait
# mode. One server at a time, started fresh for each concurrency, 2 threads each. Prints one line per
# run; the figures in docs/serving.md come from it.
#
#   bash scripts/serve_side_by_side.sh FILE.gguf PACK_DIR LLAMA_SERVER [REQUESTS_PER_CLIENT]
set -euo pipefail
cd "$(dirname "$0")/.."
gguf=$1 pack=$2 llama_server=$3 per_client=${4:-2}
bin=build/release/chronos
port=18190
load() {  # label clients pid
  python3 tools/serve_load.py --url "http://127.0.0.1:$port" --clients "$2" --requests "$per_client" \
    --max-tokens 32 --pid "$3" --label "$1" --json
}
wait_up() {
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0; sleep 0.1; done
  echo "the server did not come up" >&2; return 1
}
experts_per_step() {
  curl -s "http://127.0.0.1:$port/metrics" | awk '/^chronos_expert_lookups_total / {l=$2} /^chronos_steps_total / {s=$2}
    END {if (s > 0) printf "%.1f", l / s; else printf "-"}'
}
stop() { kill -INT "$1"; wait "$1" 2>/dev/null || true; }

for n in 1 2 4 8 16; do
  # Warm-up request (first touches of the mapped file), then the load.
  "$bin" serve -m "$gguf" --port $port --parallel "$n" -c 512 -t 2 2>/dev/null &
  pid=$!; wait_up
  python3 tools/serve_load.py --url "http://127.0.0.1:$port" --clients 1 --requests 1 --max-tokens 8 --json >/dev/null
  echo "$(load "chronos resident" "$n" $pid)"
  stop $pid

  "$llama_server" -m "$gguf" --port $port --parallel "$n" -c $((512 * n)) -t 2 --no-webui 2>/dev/null >/dev/null &
  pid=$!; wait_up
  python3 tools/serve_load.py --url "http://127.0.0.1:$port" --clients 1 --requests 1 --max-tokens 8 --json >/dev/null
  echo "$(load "llama-server resident" "$n" $pid)"
  stop $pid

  "$bin" serve -m "$pack" --expert-cache 25% --on-miss wait --port $port --parallel "$n" -c 512 -t 2 2>>/tmp/serve_side_by_side.log &
  pid=$!; wait_up
  python3 tools/serve_load.py --url "http://127.0.0.1:$port" --clients 1 --requests 1 --max-tokens 8 --json >/dev/null
  line=$(load "chronos pack 25% wait" "$n" $pid)
  echo "${line%\}}, \"experts_per_step\": $(experts_per_step)}"
  stop $pid
done
