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
#   Env: BENCH_DIR (default ../shared/bench). PATTERN=cold: the whole read alone, on the fresh
#        proxy (a cold read's requests and speed). Starts the bench's origin for the profile
#        (stopping one that runs with other settings) and stops it on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${1:-}" ]; then
  BIN=$(realpath "$1")
else
  swift build -c release --static-swift-stdlib --product streamcache >/dev/null
  BIN="$(swift build -c release --show-bin-path)/streamcache"
fi
PROFILE=${2:-loopback}
case $PROFILE in
  loopback) export ORIGIN_DELAY_MS=0 ORIGIN_LINK_MBYTES=0 ORIGIN_CONN_MBYTES=0; FILE=rand200.bin ;;
  wan) export ORIGIN_DELAY_MS=40 ORIGIN_LINK_MBYTES=10 ORIGIN_CONN_MBYTES=0; FILE=rand30.bin ;;
  cloud) export ORIGIN_DELAY_MS=40 ORIGIN_LINK_MBYTES=60 ORIGIN_CONN_MBYTES=4; FILE=rand30.bin ;;
  *) echo "unknown profile $PROFILE (loopback, wan, cloud)" >&2; exit 2 ;;
esac
export ORIGIN_RATE=0
BENCH_DIR=${BENCH_DIR:-"$(cd ../shared/bench && pwd)"}
cd "$BENCH_DIR"
. ./bench.env
./gen_media.sh >/dev/null
./origin.sh stop >/dev/null 2>&1 || true
./origin.sh start >/dev/null
STATE=$(mktemp -d /tmp/streamcache-seek.XXXXXX)
PORT=18094
"$BIN" serve --port $PORT --cache-dir "$STATE/cache" --control-token-file "$STATE/token" \
  --folder "$(origin_base)/media/" -H "Authorization: Bearer $ORIGIN_TOKEN" --url-token benchtok >"$STATE/serve.log" 2>&1 &
PID=$!
# Each step is excused: errexit also holds in the trap, and a step that fails would skip the rest.
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; ./origin.sh stop >/dev/null 2>&1 || true; rm -rf "$STATE"' EXIT
wait_port $PORT
sleep 0.3
: > "$ORIGIN_LOG"
URL=http://127.0.0.1:$PORT/benchtok/$FILE
SIZE=$(stat -c %s "$BENCH_MEDIA/$FILE")
if [ "${PATTERN:-seek}" = seek ]; then
  for pct in 0 50 10 90 30; do
    off=$((SIZE * pct / 100))
    curl -s -o /dev/null -r $off-$((off + 262143)) -w "seek $pct %: %{time_total} s\n" "$URL"
  done
fi
curl -s -o /dev/null -w "full read: %{speed_download} B/s\n" "$URL"
sleep 1.5
kill $PID; wait $PID 2>/dev/null || true
awk -F'\t' -v f="/$FILE" 'index($4, f) {print $7, $5; n++; bytes += $5} END {printf "origin requests: %d, origin bytes / size: %.3f\n", n, bytes / '"$SIZE"'}' "$ORIGIN_LOG"
