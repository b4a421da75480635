#!/usr/bin/env bash
# `streamcache prefetch` of one of the bench's files into a fresh cache, against the origin of
# ../shared/bench: how long "download for offline" takes, and in how many origin requests.
#
#   bash Benchmarks/prefetch-time.sh [BIN] [PROFILE]
#     BIN:     a release `streamcache` binary (default, or "": this checkout's release build, built first).
#     PROFILE: cloud (default: +40 ms per request, 4 MB/s per connection, 60 MB/s link), wan (+40 ms
#              per request, one shared 10 MB/s link) or loopback, as ../shared/bench/run_all.sh sets them up;
#              or slowcloud (cloud with 0.4 MB/s per connection, see serve-on-bench-origin.sh).
#   Env: FILE (default test.mp3, 7.2 MB; rand30.bin is 31 MB), REPEATS (default 3), BENCH_DIR (default
#        ../shared/bench), PREFETCH_ARGS (more `prefetch` options, e.g. "--limit-rate 2MB"). Starts the
#        bench's origin for the profile (stopping one that runs with other
#        settings) and stops it on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/serve-on-bench-origin.sh
# The helper starts a proxy as well; the prefetch below runs on its own cache, beside it.
serve_on_bench_origin "${1:-}" "${2:-cloud}" 18096 prefetch
FILE=${FILE:-test.mp3}
CACHE=$(mktemp -d /tmp/streamcache-prefetch-cache.XXXXXX)
trap 'rm -rf "$CACHE"; kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; ./origin.sh stop >/dev/null 2>&1 || true; rm -rf "$STATE"' EXIT
for _ in $(seq "${REPEATS:-3}"); do
  rm -rf "$CACHE/c"
  : > "$ORIGIN_LOG"
  began=$(date +%s.%N)
  # PREFETCH_ARGS is split into words on purpose: it holds options.
  # shellcheck disable=SC2086
  "$BIN" prefetch "$(origin_base)/media/$FILE" -H "Authorization: Bearer $ORIGIN_TOKEN" --cache-dir "$CACHE/c" --quiet ${PREFETCH_ARGS:-} >/dev/null
  ended=$(date +%s.%N)
  # The origin logs a request once its body is sent.
  sleep 0.5
  awk -F'\t' -v f="/$FILE" -v s="$began" -v e="$ended" \
    'index($4, f) {n++; bytes += $5} END {printf "prefetch %s: %.2f s (%.2f MB/s), %d origin requests for the file, %d bytes\n", f, e - s, bytes / (e - s) / 1e6, n, bytes}' "$ORIGIN_LOG"
done
