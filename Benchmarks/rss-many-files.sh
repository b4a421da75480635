#!/usr/bin/env bash
# Memory of a long-running `streamcache serve` that plays many distinct files: RSS and open
# descriptors after every 500 files of 20 KB read through a served folder (one curl process per
# 500, keep-alive), then a second pass over the first 500, which must make no origin request.
# Release build.
#   bash Benchmarks/rss-many-files.sh [FILES]      (default 6000)
# Needs nginx, curl and python3. Everything runs on 127.0.0.1 and is cleaned up on exit.
set -euo pipefail
files=${1:-6000}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/Benchmarks/nginx-origin.sh"
start_origin 1
python3 - "$work/www/small" "$files" <<'PY'
import os, sys
directory, count = sys.argv[1], int(sys.argv[2])
os.makedirs(directory, exist_ok=True)
for index in range(count):
    with open(os.path.join(directory, f"f{index:05d}.bin"), "wb") as file:
        file.write(os.urandom(20_000))
PY

start_proxy small/ many

rss_mib() { awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$proxy_pid/status"; }
descriptors() { ls "/proc/$proxy_pid/fd" | wc -l; }
origin_requests() { grep -c '/small/' "$work/logs/access.log" || true; }

# Reads files [first, last) through the proxy with one curl process, keep-alive.
read_files() {
  : > "$work/curl.cfg"
  for index in $(seq "$1" $(($2 - 1))); do
    printf 'url = "http://127.0.0.1:%d/many/f%05d.bin"\noutput = "/dev/null"\n' "$proxy_port" "$index" >> "$work/curl.cfg"
  done
  curl -s --fail -K "$work/curl.cfg"
}

echo "files read   RSS (MiB)   open descriptors"
printf '%10d   %9s   %16d\n' 0 "$(rss_mib)" "$(descriptors)"
for start in $(seq 0 500 $((files - 1))); do
  end=$((start + 500 < files ? start + 500 : files))
  read_files "$start" "$end"
  sleep 1
  printf '%10d   %9s   %16d\n' "$end" "$(rss_mib)" "$(descriptors)"
done
before=$(origin_requests)
read_files 0 $((files < 500 ? files : 500))
echo "second pass over the first $((files < 500 ? files : 500)) files: $(( $(origin_requests) - before )) origin requests"
