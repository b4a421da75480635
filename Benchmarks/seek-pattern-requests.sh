#!/usr/bin/env bash
# The seek pattern of ../shared/bench against one fresh `streamcache serve --folder`, with the
# origin's log printed: five 256 KiB reads (0 %, 50 %, 10 %, 90 %, 30 % of rand200.bin), then
# the whole file, then every origin request (`bytes=a-b` and body bytes) and their count.
#
#   bash Benchmarks/seek-pattern-requests.sh [BIN]
#     BIN: a release `streamcache` binary (default: this checkout's release build, built first).
#   Env: BENCH_DIR (default ../shared/bench). Uses the bench's loopback origin (started if needed).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${1:-}" ]; then
  BIN=$(realpath "$1")
else
  swift build -c release --static-swift-stdlib --product streamcache >/dev/null
  BIN="$(swift build -c release --show-bin-path)/streamcache"
fi
BENCH_DIR=${BENCH_DIR:-"$(cd ../shared/bench && pwd)"}
cd "$BENCH_DIR"
. ./bench.env
./origin.sh start >/dev/null
STATE=$(mktemp -d /tmp/streamcache-seek.XXXXXX)
PORT=18094
"$BIN" serve --port $PORT --cache-dir "$STATE/cache" --control-token-file "$STATE/token" \
  --folder "$(origin_base)/media/" -H "Authorization: Bearer $ORIGIN_TOKEN" --url-token benchtok >"$STATE/serve.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$STATE"' EXIT
wait_port $PORT
sleep 0.3
: > "$ORIGIN_LOG"
URL=http://127.0.0.1:$PORT/benchtok/rand200.bin
SIZE=$(stat -c %s "$BENCH_MEDIA/rand200.bin")
for pct in 0 50 10 90 30; do
  off=$((SIZE * pct / 100))
  curl -s -o /dev/null -r $off-$((off + 262143)) -w "seek $pct %: %{time_total} s\n" "$URL"
done
curl -s -o /dev/null -w "full read: %{speed_download} B/s\n" "$URL"
sleep 1
kill $PID; wait $PID 2>/dev/null || true
awk -F'\t' '$4 ~ /rand200/ {print $7, $5; n++; bytes += $5} END {printf "origin requests: %d, origin bytes / size: %.3f\n", n, bytes / '"$SIZE"'}' "$ORIGIN_LOG"
