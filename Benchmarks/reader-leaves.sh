#!/usr/bin/env bash
# What a client that leaves early costs the origin: through a fresh `streamcache serve` per round,
# a client reads the first BYTES of rand30.bin (30 MiB) as fast as it can and closes the
# connection; once the proxy's idle downloads are over (the grace period is 5 s) the proxy is
# stopped, and the origin's requests and body bytes for the file are counted from the bench
# origin's access log. A client this fast gets the long read split across connections, so this
# is what those connections fetch for nobody. With several binaries they take turns, round by round.
#
#   bash Benchmarks/reader-leaves.sh ROUNDS BYTES BIN [BIN...]
#
# Needs the bench origin on the cloud profile, behind its shim on port 18090:
#   cd ../shared/bench && . ./bench.env && ORIGIN_DELAY_MS=40 ORIGIN_LINK_MBYTES=60 ORIGIN_CONN_MBYTES=4 ./origin.sh start
set -euo pipefail
ROUNDS=${1:?rounds}
BYTES=${2:?bytes the client reads}
shift 2
[ $# -gt 0 ] || { echo "give at least one streamcache binary" >&2; exit 64; }
PORT=18097
LOG=${ORIGIN_LOG:-/tmp/bench-state/origin/access.log}
[ -f "$LOG" ] || { echo "no origin log at $LOG: start the bench origin first" >&2; exit 66; }
for _ in $(seq "$ROUNDS"); do
  for BIN in "$@"; do
    STATE=$(mktemp -d /tmp/streamcache-leave.XXXXXX)
    timeout 120 "$BIN" serve --folder http://127.0.0.1:18090/media/ --url-token tok --port $PORT -H 'Authorization: Bearer testtoken' \
      --cache-dir "$STATE/cache" --control-token-file "$STATE/token" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
    offset=$(stat -c %s "$LOG")
    python3 - "$PORT" "$BYTES" <<'EOF'
import http.client, sys
port, wanted = int(sys.argv[1]), int(sys.argv[2])
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
connection.request("GET", "/tok/rand30.bin")
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
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$STATE"
    tail -c +$((offset + 1)) "$LOG" | awk -F'\t' -v bin="$BIN" '$4 ~ /\/rand30\.bin$/ { bytes += $5; n++ }
      END { printf "%s: %d requests, %.2f MB\n", bin, n, bytes / 1e6 }'
  done
done
