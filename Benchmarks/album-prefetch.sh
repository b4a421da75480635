#!/usr/bin/env bash
# "Download the album for offline": the bench's files prefetched one after another by one fresh
# `streamcache serve` (a `streamcache prefetch` beside it hands each to the server), against the
# origin of ../shared/bench. Prints each file's time and origin requests: whether a file after the
# first profits from what the first measured of the host's path (HostPathMemory).
#
#   bash Benchmarks/album-prefetch.sh [BIN] [PROFILE]
#     BIN:     a release `streamcache` binary (default, or "": this checkout's release build, built first).
#     PROFILE: cloud (default: +40 ms per request, 4 MB/s per connection, 60 MB/s link), wan (+40 ms
#              per request, one shared 10 MB/s link) or loopback, as ../shared/bench/run_all.sh sets them up.
#   Env: SHOW_REQUESTS=1 lists each file's requests (time, range, bytes) on stderr. ALBUM (default "test.mp3 test_moovend.m4a rand30.bin"), REPEATS (default 3: a fresh server
#        and cache each), BENCH_DIR (default ../shared/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/serve-on-bench-origin.sh
ALBUM=${ALBUM:-test.mp3 test_moovend.m4a rand30.bin}
for repeat in $(seq "${REPEATS:-3}"); do
  serve_on_bench_origin "${1:-}" "${2:-cloud}" 18097 album
  line="run $repeat:"
  for file in $ALBUM; do
    : > "$ORIGIN_LOG"
    began=$(date +%s.%N)
    "$BIN" prefetch "$(origin_base)/media/$file" -H "Authorization: Bearer $ORIGIN_TOKEN" --cache-dir "$STATE/cache" --quiet >/dev/null 2>&1
    ended=$(date +%s.%N)
    # The origin logs a request once its body is sent.
    sleep 0.5
    [ -z "${SHOW_REQUESTS:-}" ] || awk -F'\t' -v f="/$file" 'index($4, f) {print "  " $1, $7, $5}' "$ORIGIN_LOG" >&2
    line+=$(awk -F'\t' -v f="/$file" -v s="$began" -v e="$ended" \
      'index($4, f) {n++; bytes += $5} END {printf " %s %.2f s, %d requests, %d bytes;", substr(f, 2), e - s, n, bytes}' "$ORIGIN_LOG")
  done
  echo "$line"
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  rm -rf "$STATE"
done
