#!/usr/bin/env bash
# Read throughput of fio and chronos_bench_io side by side: same file, block sizes, queue depth,
# O_DIRECT, io_uring, one job, each block read once per pass; prints GB/s, CPU s/GB and the ratio.
#
#   scripts/bench_io_vs_fio.sh FILE [--block-sizes 128k,1M,4M,12M] [--queue-depth 32]
#                              [--pattern seq|rand] [--repeats 5] [--bench PATH/chronos_bench_io]
#
# Both tools read floor(size / block) whole blocks, so they move the same bytes. Both use O_DIRECT,
# so the page cache is neither used nor in need of dropping between runs (a disk behind a
# virtualised block device may still have a host-side cache: compare the two columns, not runs on
# different days). Passes alternate between the tools; medians of --repeats passes. Needs fio with the io_uring engine, and python3
# to read fio's JSON.
set -euo pipefail

usage() { sed -n '4,5p' "$0" | sed 's/^# *//' >&2; exit 2; }

[[ $# -ge 1 ]] || usage
file=$1
shift
block_sizes=128k,1M,4M,12M
queue_depth=32
pattern=seq
repeats=5
bench=${CHRONOS_BENCH_IO:-}
while [[ $# -gt 0 ]]; do
  case $1 in
    --block-sizes) block_sizes=$2; shift 2 ;;
    --queue-depth) queue_depth=$2; shift 2 ;;
    --pattern) pattern=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --bench) bench=$2; shift 2 ;;
    *) usage ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z $bench ]]; then
  bench=$(ls -t "$root"/build/*/bench/chronos_bench_io 2>/dev/null | head -n 1 || true)
fi
[[ -x $bench ]] || { echo "bench_io_vs_fio: chronos_bench_io not found; build it or pass --bench" >&2; exit 1; }
[[ -f $file ]] || { echo "bench_io_vs_fio: $file: no such file" >&2; exit 1; }
command -v fio > /dev/null || { echo "bench_io_vs_fio: fio is not installed (apt install fio)" >&2; exit 1; }
case $pattern in
  seq) fio_rw=read ;;
  rand) fio_rw=randread ;;
  *) echo "bench_io_vs_fio: --pattern must be seq or rand" >&2; exit 2 ;;
esac

to_bytes() {
  local text=$1 number=${1%[kKmMgG]}
  case $text in
    *[kK]) echo $((number << 10)) ;;
    *[mM]) echo $((number << 20)) ;;
    *[gG]) echo $((number << 30)) ;;
    *) echo "$number" ;;
  esac
}

# One fio pass: "GB/s CPU-s/GB" on stdout.
fio_once() {
  local block=$1 bytes=$2 log
  log=$(mktemp)
  if ! fio --name=chronos_io --filename="$file" --readonly --direct=1 --ioengine=io_uring \
      --rw="$fio_rw" --bs="$block" --iodepth="$queue_depth" --size="$bytes" --numjobs=1 \
      --output-format=json 2> "$log" | python3 -c '
import json, sys
job = json.load(sys.stdin)["jobs"][0]
read = job["read"]
gb = read["io_bytes"] / 1e9
cpu_s = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
print("%.4f %.4f" % (read["bw_bytes"] / 1e9, cpu_s / gb))'; then
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

median() { sort -g | awk '{ v[NR] = $0 } END { print v[int((NR + 1) / 2)] }'; }

size=$(stat -c %s "$file")
echo "file: $file ($(awk -v s="$size" 'BEGIN { printf "%.2f GB", s / 1e9 }')), O_DIRECT, io_uring, queue depth $queue_depth, $pattern, median of $repeats"
echo "fio: $(fio --version); ours: $bench"
printf '%8s  %12s %12s  %12s %12s  %7s\n' block "fio GB/s" "ours GB/s" "fio CPU s/GB" "ours CPU s/GB" ratio
IFS=, read -r -a blocks <<< "$block_sizes"
for block in "${blocks[@]}"; do
  block_bytes=$(to_bytes "$block")
  whole=$(( size / block_bytes * block_bytes ))
  fio_gbs=() fio_cpu=() our_gbs=() our_cpu=()
  # Alternating passes, so that drift in the disk (or the host behind it) hits both tools alike.
  for ((r = 0; r < repeats; r++)); do
    read -r gbs cpu < <(fio_once "$block" "$whole")
    fio_gbs+=("$gbs") fio_cpu+=("$cpu")
    read -r _ _ gbs cpu < <("$bench" --file "$file" --block-size "$block" --queue-depth "$queue_depth" \
                              --pattern "$pattern" --repeats 1 --tsv)
    our_gbs+=("$gbs") our_cpu+=("$cpu")
  done
  fio_median=$(printf '%s\n' "${fio_gbs[@]}" | median)
  fio_cpu_median=$(printf '%s\n' "${fio_cpu[@]}" | median)
  ours=$(printf '%s\n' "${our_gbs[@]}" | median)
  ours_cpu=$(printf '%s\n' "${our_cpu[@]}" | median)
  ratio=$(awk -v a="$ours" -v b="$fio_median" 'BEGIN { printf "%.1f%%", 100 * a / b }')
  printf '%8s  %12.3f %12.3f  %12.4f %12.4f  %7s\n' "$block" "$fio_median" "$ours" "$fio_cpu_median" "$ours_cpu" "$ratio"
done
