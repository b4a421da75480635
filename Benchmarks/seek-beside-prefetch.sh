#!/usr/bin/env bash
# Seeks into one file while two others on the same origin host are prefetched for offline use,
# through one fresh `streamcache serve --folder` on the origin of ../shared/bench: the prefetches
# (rand200.bin and rand30.bin, four connections each) start with the proxy; a second later, five
# 256 KiB reads of test.mp3 (0 %, 50 %, 10 %, 90 %, 30 %) are timed one after the other, then the
# proxy stops. Prints each seek's time and their median.
#
#   bash Benchmarks/seek-beside-prefetch.sh [BIN] [PROFILE]
#     BIN:     a release `streamcache` binary (default, or "": this checkout's release build, built first).
#     PROFILE: cloud (default: +40 ms per request, 4 MB/s per connection, 60 MB/s link), wan or loopback.
#   Env: BENCH_DIR, SERVE_ARGS, KEEP_LOG (see serve-on-bench-origin.sh); DELAY (seconds before the
#        seeks, default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/serve-on-bench-origin.sh
PROFILE=${2:-cloud}
case $PROFILE in
  loopback) ORIGIN=http://127.0.0.1:18080 ;;
  *) ORIGIN=http://127.0.0.1:18090 ;;
esac
SERVE_ARGS="${SERVE_ARGS:-} --prefetch $ORIGIN/media/rand200.bin $ORIGIN/media/rand30.bin"
PORT=18095
serve_on_bench_origin "${1:-}" "$PROFILE" $PORT beside-prefetch
sleep "${DELAY:-1}"
URL=http://127.0.0.1:$PORT/benchtok/test.mp3
SIZE=$(stat -c %s "$BENCH_MEDIA/test.mp3")
times=()
for pct in 0 50 10 90 30; do
  off=$((SIZE * pct / 100))
  t=$(curl -s -o /dev/null -r $off-$((off + 262143)) -w "%{time_total}" "$URL")
  echo "seek $pct %: $t s"
  times+=("$t")
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median of 5 seeks: %.1f ms\n", a[3] * 1000}'
awk -F'\t' 'index($4, "/rand") {n++} END {printf "prefetch requests answered so far: %d\n", n}' "$ORIGIN_LOG"
