#!/usr/bin/env bash
# Small requests while other clients read a cached file as fast as they can: 2 curl clients read
# rand200.bin whole, over and over, while an 80 single-range requests of test.mp3 (2 bytes each,
# cached, 20 ms apart) are timed to their first byte; through one `streamcache serve` and straight
# from nginx, one after the other. Prints median, p90, p99 and max in ms.
#
#   bash Benchmarks/requests-beside-streams.sh [BIN]
#     BIN: a release `streamcache` binary (default: this checkout's release build, built first).
#   Env: STREAMS (default 2), REQUESTS (default 80). Needs the bench origin on 127.0.0.1:18080
#   (../shared/bench: ./origin.sh start, loopback profile) and its media.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${1:-}" ]; then BIN=$1; else
  swift build -c release --static-swift-stdlib --product streamcache >/dev/null
  BIN="$(swift build -c release --show-bin-path)/streamcache"
fi
STREAMS=${STREAMS:-2}; REQUESTS=${REQUESTS:-80}
PORT=18116; STATE=$(mktemp -d /tmp/streamcache-beside.XXXXXX); AUTH="Authorization: Bearer testtoken"
timeout 600 "$BIN" serve --port $PORT --cache-dir "$STATE/cache" --control-token-file "$STATE/token" \
  --folder http://127.0.0.1:18080/media/ -H "$AUTH" --url-token t >/dev/null 2>"$STATE/serve.log" &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$STATE"' EXIT
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.05; done
curl -sf -o /dev/null "http://127.0.0.1:$PORT/t/rand200.bin"; curl -sf -o /dev/null "http://127.0.0.1:$PORT/t/test.mp3"

measure() { # base URL of the media
  local streamers=""
  for _ in $(seq 1 "$STREAMS"); do
    ( end=$((SECONDS + 8)); while [ $SECONDS -lt $end ]; do curl -s -o /dev/null -H "$AUTH" "$1rand200.bin"; done ) &
    streamers="$streamers $!"
  done
  sleep 0.3
  for i in $(seq 1 "$REQUESTS"); do
    curl -sf -o /dev/null -H "$AUTH" -r $((i * 80000))-$((i * 80000 + 1)) -w "%{time_starttransfer}\n" "$1test.mp3"
    sleep 0.02
  done | sort -n | awk '{t[NR] = $1 * 1000} END {printf "median %.2f  p90 %.2f  p99 %.2f  max %.2f ms\n", t[int(NR / 2)], t[int(NR * 0.9)], t[int(NR * 0.99)], t[NR]}'
  # shellcheck disable=SC2086
  wait $streamers
}
echo -n "streamcache: "; measure "http://127.0.0.1:$PORT/t/"
echo -n "nginx:       "; measure "http://127.0.0.1:18080/media/"
