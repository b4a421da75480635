#!/usr/bin/env bash
# The seek pattern of ../shared/bench against one fresh `streamcache serve --folder`, with the
# origin's log printed: five 256 KiB reads (0 %, 50 %, 10 %, 90 %, 30 % of the file), then the
# whole file, then every origin request (`bytes=a-b` and body bytes) and their count.
#
#   bash Benchmarks/seek-pattern-requests.sh [BIN] [PROFILE]
#     BIN:     a release `streamcache` binary (default, or "": this checkout's release build, built first).
#     PROFILE: loopback (default: rand200.bin, no shim), wan (+40 ms per request, one shared 10 MB/s
#              link) or cloud (+40 ms per request, 4 MB/s per connection, 60 MB/s link), both on
#              rand30.bin, as ../shared/bench/run_all.sh sets them up.
#   Env: BENCH_DIR (default ../shared/bench), SERVE_ARGS, KEEP_LOG (see serve-on-bench-origin.sh). FILE: another of the
#        bench's files (rand30.bin, rand200.bin). PATTERN=cold: the whole read alone, on the fresh
#        proxy (a cold read's requests and speed). SEEKS: other seek points, in % of the file
#        (default "0 50 10 90 30"). Starts the bench's origin for the profile
#        (stopping one that runs with other settings) and stops it on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/serve-on-bench-origin.sh
PROFILE=${2:-loopback}
case $PROFILE in
  loopback) FILE=${FILE:-rand200.bin} ;;
  *) FILE=${FILE:-rand30.bin} ;;
esac
PORT=18094
serve_on_bench_origin "${1:-}" "$PROFILE" $PORT seek
URL=http://127.0.0.1:$PORT/benchtok/$FILE
SIZE=$(stat -c %s "$BENCH_MEDIA/$FILE")
if [ "${PATTERN:-seek}" = seek ]; then
  for pct in ${SEEKS:-0 50 10 90 30}; do
    off=$((SIZE * pct / 100))
    curl -s -o /dev/null -r $off-$((off + 262143)) -w "seek $pct %: %{time_total} s\n" "$URL"
  done
fi
curl -s -o /dev/null -w "full read: %{speed_download} B/s\n" "$URL"
sleep 1.5
kill $PID; wait $PID 2>/dev/null || true
awk -F'\t' -v f="/$FILE" 'index($4, f) {print $7, $5; n++; bytes += $5} END {printf "origin requests: %d, origin bytes / size: %.3f\n", n, bytes / '"$SIZE"'}' "$ORIGIN_LOG"
