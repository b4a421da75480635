#!/usr/bin/env bash
# What one real player's run costs at the origin, through one fresh `streamcache serve --folder` on
# the origin of ../shared/bench: the player's own requests (from ffmpeg's trace log), then every
# origin request (`bytes=a-b` and body bytes), their count and the megabytes pulled. The same two
# player runs as the bench's `ffprobe:FILE` and `ffseek:FILE` scenarios.
#
#   bash Benchmarks/player-origin-requests.sh [BIN] [PROFILE] [FILE] [PLAYER]
#     BIN:     a release `streamcache` binary (default, or "": this checkout's release build, built first).
#     PROFILE: loopback (default), wan or cloud (see serve-on-bench-origin.sh).
#     FILE:    a file of the bench's media folder (default test_moovend.m4a: an MP4 whose index is at the end).
#     PLAYER:  ffprobe (default: `ffprobe -show_format`) or ffseek (`ffmpeg -ss 150 -i URL -t 5 -f null -`).
#   Env: BENCH_DIR, SERVE_ARGS (`-vv` logs the engine's reads and planned requests), KEEP_LOG
#        (see serve-on-bench-origin.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/serve-on-bench-origin.sh
PROFILE=${2:-loopback}
FILE=${3:-test_moovend.m4a}
PLAYER=${4:-ffprobe}
PORT=18095
serve_on_bench_origin "${1:-}" "$PROFILE" $PORT player
URL=http://127.0.0.1:$PORT/benchtok/$FILE
SIZE=$(stat -c %s "$BENCH_MEDIA/$FILE")
TRACE=$(mktemp)
STARTED=$(date +%s.%N)
case $PLAYER in
  ffprobe) ffprobe -v trace -show_format "$URL" >/dev/null 2>"$TRACE" ;;
  ffseek) ffmpeg -nostdin -v trace -ss 150 -i "$URL" -t 5 -f null - 2>"$TRACE" ;;
  *) echo "unknown player $PLAYER (ffprobe, ffseek)" >&2; exit 2 ;;
esac
echo "player's run: $(awk -v a="$STARTED" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s"
echo "player's requests:"
grep -a "^Range: " "$TRACE" | tr -d '\r' | sed 's/^/  /' || true
grep -a "Statistics:" "$TRACE" | sed 's/.*Statistics: /player read: /' | head -1 || true
rm -f "$TRACE"
# The idle read-ahead and the requests in flight end within the grace period (5 s).
sleep 6
echo "origin requests:"
awk -F'\t' -v f="/$FILE" 'index($4, f) {print "  " $7, $5; n++; bytes += $5} END {printf "origin requests: %d, origin MB: %.2f of %.2f\n", n, bytes / 1e6, '"$SIZE"' / 1e6}' "$ORIGIN_LOG"
