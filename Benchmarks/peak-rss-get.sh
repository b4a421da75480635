#!/usr/bin/env bash
# Peak RSS of `streamcache get` streaming a large file from nginx (Bearer auth) through an empty
# cache to /dev/null, then again from the warm cache. Release build. Usage:
#   bash Benchmarks/peak-rss-get.sh [SIZE_MIB]      (default 1024)
# Needs nginx and python3. Everything runs on 127.0.0.1 and is cleaned up on exit.
set -euo pipefail
size_mib=${1:-1024}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/streamcache-rss.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() { [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

swift build -c release --product streamcache --package-path "$root" >/dev/null
bin="$(swift build -c release --package-path "$root" --show-bin-path)/streamcache"

mkdir -p "$work/www" "$work/logs"
head -c $((size_mib * 1024 * 1024)) /dev/urandom > "$work/www/big.bin"
cat > "$work/nginx.conf" <<CONF
$( [ "$(id -u)" = 0 ] && echo 'user root;' )
pid $work/nginx.pid;
error_log $work/logs/error.log warn;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  server {
    listen 127.0.0.1:$port;
    root $work/www;
    location / { if (\$http_authorization != "Bearer bench") { return 401; } }
  }
}
CONF
nginx -c "$work/nginx.conf" -p "$work"
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done

measure() {
  # Each run is measured in its own python process, so ru_maxrss is that run's alone.
  python3 - "$bin" "$@" <<'PY'
import resource, subprocess, sys, time
start = time.monotonic()
subprocess.run(sys.argv[1:], check=True)
elapsed = time.monotonic() - start
peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"{peak_mib:.1f} MiB peak RSS, {elapsed:.2f} s")
PY
}
url="http://127.0.0.1:$port/big.bin"
echo "cold get of $size_mib MiB: $(measure get "$url" -H 'Authorization: Bearer bench' -o /dev/null --quiet --cache-dir "$work/cache")"
echo "warm get of $size_mib MiB: $(measure get "$url" -H 'Authorization: Bearer bench' -o /dev/null --quiet --cache-dir "$work/cache")"
sha_origin=$(sha256sum < "$work/www/big.bin" | cut -d' ' -f1)
sha_cache=$("$bin" get "$url" -H 'Authorization: Bearer bench' --quiet --cache-dir "$work/cache" | sha256sum | cut -d' ' -f1)
[ "$sha_origin" = "$sha_cache" ] && echo "bytes identical (sha256 $sha_origin)" || { echo "MISMATCH"; exit 1; }
