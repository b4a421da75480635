#!/usr/bin/env bash
# 16 cold requests for rand30.bin at once from one `curl -Z` (one thread, no interpreter lock
# between the clients): the median and range of their times to first byte, through a fresh
# `streamcache serve` per round, and from the bench's nginx directly. The bench's conc16 scenario
# uses 16 Python threads, whose own queueing decides much of that figure.
#
#   bash Benchmarks/concurrent-first-bytes-curl.sh ROUNDS BIN
#
# Needs the bench origin on loopback (see serve-cold-warm-cpu.sh).
set -euo pipefail
ROUNDS=${1:?rounds}
BIN=${2:?streamcache binary}
PORT=18099
median() { sort -n | awk '{a[NR] = $1} END {printf "median %.1f ms [%.1f–%.1f]\n", a[int((NR + 1) / 2)] * 1000, a[1] * 1000, a[NR] * 1000}'; }
sixteen() { local url=$1; shift; local args=(); for _ in $(seq 16); do args+=("$url" -o /dev/null); done
  curl -s -Z --parallel-max 16 --parallel-immediate "$@" -w '%{time_starttransfer}\n' "${args[@]}" 2>/dev/null; }
for _ in $(seq "$ROUNDS"); do
  echo "direct: $(sixteen http://127.0.0.1:18080/media/rand30.bin -H 'Authorization: Bearer testtoken' | median)"
  STATE=$(mktemp -d /tmp/streamcache-c16.XXXXXX)
  "$BIN" serve --folder http://127.0.0.1:18080/media/ --url-token tok --port $PORT -H 'Authorization: Bearer testtoken' \
    --cache-dir "$STATE/cache" --control-token-file "$STATE/token" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
  echo "streamcache: $(sixteen "http://127.0.0.1:$PORT/tok/rand30.bin" | median)"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$STATE"
done
