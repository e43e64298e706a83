#!/usr/bin/env bash
# Several `chronos serve` processes behind nginx, on loopback: two servers of the same model, an nginx
# upstream in front (least connections, no buffering so server-sent events stream through), eight
# requests through it, and each server's /metrics showing it took some. What a user who outgrows one
# machine does across machines, with the servers' addresses in the upstream (docs/serving.md).
#
#   bash scripts/serve_behind_nginx.sh [MODEL]      # default: the bundled model; needs nginx (installs it)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/default}
bin=build/release/chronos
[[ -x $bin ]] || { echo "build first: bash scripts/demo.sh" >&2; exit 1; }
if ! command -v nginx >/dev/null; then
  echo "installing nginx-light" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
fi
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

for port in 18181 18182; do
  "$bin" serve -m "$model" --port $port --parallel 2 -t 1 2> "$work/serve-$port.log" &
  pids+=($!)
done
cat > "$work/nginx.conf" <<EOF
daemon off;
worker_processes 1;
error_log $work/error.log;
pid $work/nginx.pid;
events { worker_connections 256; }
http {
  access_log $work/access.log;
  client_body_temp_path $work;
  proxy_temp_path $work;
  upstream chronos {
    least_conn;
    server 127.0.0.1:18181 max_fails=1 fail_timeout=5s;
    server 127.0.0.1:18182 max_fails=1 fail_timeout=5s;
  }
  server {
    listen 127.0.0.1:18180;
    location / {
      proxy_pass http://chronos;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;           # server-sent events go through as they are written
      proxy_read_timeout 600s;
      proxy_next_upstream error timeout http_503;   # a full server: try the other
    }
  }
}
EOF
for _ in $(seq 100); do
  curl -sf http://127.0.0.1:18181/health >/dev/null && curl -sf http://127.0.0.1:18182/health >/dev/null && break
  sleep 0.2
done
nginx -c "$work/nginx.conf" &
pids+=($!)
sleep 0.5

echo "8 requests through nginx on 127.0.0.1:18180:"
for i in $(seq 8); do
  curl -sf http://127.0.0.1:18180/v1/completions \
    -d "{\"prompt\": \"The history of the\", \"max_tokens\": 24, \"stream\": $([[ $((i % 2)) == 0 ]] && echo true || echo false)}" \
    -o "$work/reply-$i" &
done
wait_ok=0
for job in $(jobs -p); do
  case " ${pids[*]} " in *" $job "*) continue ;; esac
  wait "$job" || wait_ok=1
done
[[ $wait_ok == 0 ]] || { echo "a request through nginx failed" >&2; exit 1; }
for port in 18181 18182; do
  served=$(curl -s http://127.0.0.1:$port/metrics | awk '/^chronos_requests_total\{endpoint="completions",status="200"\}/ {print $2}')
  echo "server on port $port answered ${served:-0} of them"
  [[ ${served:-0} -gt 0 ]] || { echo "nginx sent nothing to port $port" >&2; exit 1; }
done
echo "ok"
