#!/usr/bin/env bash
# One cold and one warm read of rand200.bin through a fresh `streamcache serve` per round, on the
# bench's loopback origin: MB/s of each, the proxy's CPU for the cold read (ticks of 10 ms, from
# /proc/PID/stat) and its peak RSS (VmHWM). With several binaries they take turns, round by round,
# so that a change in the machine's speed hits each alike.
#
#   bash Benchmarks/serve-cold-warm-cpu.sh ROUNDS BIN [BIN...]
#
# Needs the bench origin on loopback (cd ../shared/bench && . ./bench.env && ./origin.sh start,
# with ORIGIN_DELAY_MS=0 ORIGIN_LINK_MBYTES=0 ORIGIN_CONN_MBYTES=0).
set -euo pipefail
ROUNDS=${1:?rounds}
shift
[ $# -gt 0 ] || { echo "give at least one streamcache binary" >&2; exit 64; }
PORT=18098
URL=http://127.0.0.1:$PORT/tok/rand200.bin
for _ in $(seq "$ROUNDS"); do
  for BIN in "$@"; do
    STATE=$(mktemp -d /tmp/streamcache-cpu.XXXXXX)
    "$BIN" serve --folder http://127.0.0.1:18080/media/ --url-token tok --port $PORT -H 'Authorization: Bearer testtoken' \
      --cache-dir "$STATE/cache" --control-token-file "$STATE/token" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    cold=$(curl -s -o /dev/null -w '%{speed_download}' "$URL")
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    warm=$(curl -s -o /dev/null -w '%{speed_download}' "$URL")
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$STATE"
    echo "$BIN cold $(( ${cold%.*} / 1000000 )) MB/s  warm $(( ${warm%.*} / 1000000 )) MB/s  cold CPU $((after - before)) ticks  peak RSS $hwm kB"
  done
done
