#!/usr/bin/env bash
# How soon a reader has the start of a file, not only the whole of it: a cold read of rand30.bin
# (30 MiB) as fast as the client takes it, straight from the bench's origin and then through one
# fresh `streamcache serve --folder`, with the seconds at which the client had 1, 5, 10 and 20 MiB
# and the end, then the origin's requests for the proxy's read. A player buffering at its start,
# or any client that consumes in order, waits for the first of those figures, which a read split
# across connections that share one link (the `wan` profile) delays: its parts take the link's
# bytes from the reader's.
#
#   bash Benchmarks/in-order-delivery.sh [BIN] [PROFILE]
#     BIN:     a release `streamcache` binary (default, or "": this checkout's release build, built first).
#     PROFILE: wan (default), cloud or loopback (see serve-on-bench-origin.sh).
#   Env: BENCH_DIR, SERVE_ARGS, KEEP_LOG (see serve-on-bench-origin.sh). Starts the bench's origin
#        for the profile (stopping one that runs with other settings) and stops it on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/serve-on-bench-origin.sh
PORT=18098
serve_on_bench_origin "${1:-}" "${2:-wan}" $PORT in-order
read_in_order() {
  python3 - "$@" <<'EOF'
import http.client, sys, time
port, path = int(sys.argv[1]), sys.argv[2]
headers = {"Authorization": sys.argv[3]} if len(sys.argv) > 3 else {}
marks, seen = [1 << 20, 5 << 20, 10 << 20, 20 << 20], []
start = time.perf_counter()
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
connection.request("GET", path, headers=headers)
response = connection.getresponse()
buffer = memoryview(bytearray(1 << 16))
got = 0
for _ in range(1_000_000):  # bounded: 64 KiB at most each
    count = response.readinto(buffer)
    if not count:
        break
    got += count
    while marks and got >= marks[0]:
        seen.append("%d MiB %.2f s" % (marks.pop(0) >> 20, time.perf_counter() - start))
seen.append("end %.2f s (%d bytes)" % (time.perf_counter() - start, got))
print(", ".join(seen))
EOF
}
printf 'direct: '; read_in_order "$(origin_base | sed 's/.*://')" /media/rand30.bin "Bearer $ORIGIN_TOKEN"
: > "$ORIGIN_LOG"
printf 'proxy:  '; read_in_order $PORT /benchtok/rand30.bin
sleep 0.5
kill $PID; wait $PID 2>/dev/null || true
awk -F'\t' '$4 ~ /\/rand30\.bin$/ { printf "%s %s\n", $7, $5; n++ } END { printf "origin requests: %d\n", n }' "$ORIGIN_LOG"
