#!/usr/bin/env bash
# A player in real time against one fresh `streamcache serve --folder`: it reads rand200.bin (200 MB)
# from the start at a video's bitrate for a while, as AVPlayer or mpv do once their buffer is full,
# then stops. Prints what the origin sent meanwhile, in how many requests, and the player's longest
# wait for its next bytes (a stall, once it plays at its pace).
#
#   bash Benchmarks/playback-window.sh [BIN] [PROFILE]
#     BIN:     a release `streamcache` binary (default, or "": this checkout's release build, built first).
#     PROFILE: cloud (default: +40 ms per request, 4 MB/s per connection, 60 MB/s link), wan (+40 ms
#              per request, one shared 10 MB/s link) or loopback, as ../shared/bench/run_all.sh sets them up.
#   Env: RATE (bytes per second the player takes, default 1000000: 8 Mbit/s), SECONDS_PLAYED (default
#        20), BENCH_DIR (default ../shared/bench), SERVE_ARGS, KEEP_LOG (see serve-on-bench-origin.sh).
#        Starts the bench's origin for the profile (stopping one that runs with other settings) and
#        stops it on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/serve-on-bench-origin.sh
FILE=rand200.bin
PORT=18095
serve_on_bench_origin "${1:-}" "${2:-cloud}" $PORT playback
python3 - "http://127.0.0.1:$PORT/benchtok/$FILE" "${RATE:-1000000}" "${SECONDS_PLAYED:-20}" <<'EOF'
import http.client, sys, time, urllib.parse
url, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
u = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
conn.request("GET", u.path)
response = conn.getresponse()
began = time.monotonic()
taken, longest, chunk = 0, 0.0, 64 * 1024
while time.monotonic() - began < seconds:
    asked = time.monotonic()
    data = response.read(chunk)
    if not data:
        break
    if taken >= 2 * rate:  # after the player's first two seconds
        longest = max(longest, time.monotonic() - asked)
    taken += len(data)
    due = began + taken / rate
    if due > time.monotonic():
        time.sleep(due - time.monotonic())
conn.close()
print(f"played {taken / 1e6:.1f} MB in {time.monotonic() - began:.1f} s at {rate / 1e6:.2f} MB/s; "
      f"longest wait after the first 2 s: {longest * 1000:.0f} ms")
EOF
sleep 1.5
kill $PID; wait $PID 2>/dev/null || true
awk -F'\t' -v f="/$FILE" 'index($4, f) {n++; bytes += $5} END {printf "origin sent %.1f MB in %d requests\n", bytes / 1e6, n}' "$ORIGIN_LOG"
