#!/usr/bin/env bash
# Peak RSS of `streamcache serve` while N clients stream one large file through it: first through
# an empty cache (one shared download from nginx), then again from the warm cache. Release build.
#   bash Benchmarks/peak-rss-serve.sh [SIZE_MB] [CLIENTS]      (default 200 MB, 16 clients)
# Needs nginx, curl and python3. Everything runs on 127.0.0.1 and is cleaned up on exit.
# Peak RSS is the proxy's VmHWM (high-water mark) from /proc, read after each round.
set -euo pipefail
size_mb=${1:-200}
clients=${2:-16}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/Benchmarks/nginx-origin.sh"
start_origin $((size_mb * 1000 * 1000))

start_proxy "" rss
url="http://127.0.0.1:$proxy_port/rss/big.bin"
expected=$(sha256sum < "$work/www/big.bin" | cut -d' ' -f1)

round() {
  local name=$1 start end failures=0
  start=$(date +%s.%N)
  local pids=()
  for i in $(seq 1 "$clients"); do
    (curl -s -f "$url" | sha256sum | cut -d' ' -f1 > "$work/sum.$i") &
    pids+=($!)
  done
  wait "${pids[@]}"
  end=$(date +%s.%N)
  for i in $(seq 1 "$clients"); do [ "$(cat "$work/sum.$i")" = "$expected" ] || failures=$((failures + 1)); done
  local hwm
  hwm=$(awk '/VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$proxy_pid/status")
  python3 -c "import sys; n,s,e,c,h,f=sys.argv[1:]; print(f'{n}: {c} clients x {int(s)} MB in {float(e):.2f} s ({int(c)*int(s)/float(e):.0f} MB/s aggregate), proxy peak RSS so far {h} MiB, wrong bodies {f}')" \
    "$name" "$size_mb" "$(python3 -c "print($end - $start)")" "$clients" "$hwm" "$failures"
  [ "$failures" = 0 ]
}
round cold
origin_bytes=$(awk '{s += $10} END {print s}' "$work/logs/access.log")
echo "origin bytes / file size after the cold round: $(python3 -c "print(round($origin_bytes / ($size_mb * 1e6), 4))")"
round warm
