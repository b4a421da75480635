#!/usr/bin/env bash
# What a client that leaves early costs the origin: through one fresh `streamcache serve --folder`
# on the bench's cloud profile, a client reads the first BYTES of rand30.bin (30 MiB) as fast as it
# can and closes the connection; once the proxy's idle downloads are over (the grace period is
# 5 s) the origin's requests and body bytes for the file are printed. A client this fast gets the
# long read split across connections, so this is what those connections fetch for nobody.
#
#   bash Benchmarks/reader-leaves.sh BYTES [BIN]
#     BIN: a release `streamcache` binary (default, or "": this checkout's release build, built first).
#   Env: BENCH_DIR, SERVE_ARGS, KEEP_LOG (see serve-on-bench-origin.sh). Starts the bench's origin
#        for the profile (stopping one that runs with other settings) and stops it on exit.
#
# Two binaries in turns, three rounds:
#   for _ in 1 2 3; do for BIN in OLD NEW; do bash Benchmarks/reader-leaves.sh 3000000 $BIN; done; done
set -euo pipefail
cd "$(dirname "$0")/.."
BYTES=${1:?bytes the client reads}
. Benchmarks/serve-on-bench-origin.sh
PORT=18097
serve_on_bench_origin "${2:-}" cloud $PORT leave
python3 - "$PORT" "$BYTES" <<'EOF'
import http.client, sys
port, wanted = int(sys.argv[1]), int(sys.argv[2])
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
connection.request("GET", "/benchtok/rand30.bin")
response = connection.getresponse()
got = 0
for _ in range(100_000):  # bounded: 64 KiB at most each
    if got >= wanted:
        break
    data = response.read1(65536)
    if not data:
        break
    got += len(data)
connection.close()
EOF
sleep 7
kill $PID; wait $PID 2>/dev/null || true
awk -F'\t' -v bin="$BIN" '$4 ~ /\/rand30\.bin$/ { bytes += $5; n++ }
  END { printf "%s: %d requests, %.2f MB\n", bin, n, bytes / 1e6 }' "$ORIGIN_LOG"
