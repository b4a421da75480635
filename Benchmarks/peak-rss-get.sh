#!/usr/bin/env bash
# Peak RSS of `streamcache get` streaming a large file from nginx (Bearer auth) through an empty
# cache to /dev/null, then again from the warm cache. Release build. Usage:
#   bash Benchmarks/peak-rss-get.sh [SIZE_MIB]      (default 1024)
# Needs nginx, curl and python3. Everything runs on 127.0.0.1 and is cleaned up on exit.
set -euo pipefail
size_mib=${1:-1024}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/Benchmarks/nginx-origin.sh"
start_origin $((size_mib * 1024 * 1024))

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
