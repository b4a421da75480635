#!/usr/bin/env bash
# A service that serves one client a few downloads at once and refuses one more with 429 (nginx's
# `limit_conn`), behind ../shared/bench's latency shim as on its `cloud` profile (+40 ms per request,
# each connection capped at 4 MB/s, so that nginx counts a request until its last bytes are nearly
# through, as a service's own throttle does): two files read whole, one after the other,
# directly and through a fresh `streamcache serve --folder` per binary and round. Prints for each
# read its HTTP status, seconds and MB/s, the bytes the origin sent (200 and 206) / the file's size, and how
# many requests it refused, and the most answers it had under way at once. The binaries take
# turns, round by round.
#
#   bash Benchmarks/limited-service.sh BIN [BIN...]
#     BIN: a release `streamcache` binary (swift build -c release --static-swift-stdlib --product streamcache).
#   Env: CONNECTIONS (requests served at once, default 2), RATE (MB/s per connection, default 4),
#        BUSY_FOR=SECONDS: a service busy for a moment. Only the first of FILES is read under the
#        limit; after that many seconds the others are read from the same host without one
#        (nginx's /free/ location), through the same `serve`: how many connections the proxy
#        uses once the service takes more again.
#        FILES (of the bench's media, default "rand30.bin test.mp3"),
#        ROUNDS (default 3), BENCH_DIR (default ../shared/bench, whose gen_media.sh makes the files),
#        SHOW_LOG=1 (print the origin's log lines of each read: range, status, body bytes),
#        SERVE_ARGS (more arguments for `serve`, e.g. -vv), KEEP_LOG=DIR (keep each serve's log there).
#        RESTART=1: each file through a `serve` of its own on the round's cache directory, started
#        after the one before stopped (a command-line tool run once per file, an app started
#        again): what a new process keeps of the limit the one before learned.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "give at least one streamcache binary" >&2; exit 64; }
BENCH_DIR=${BENCH_DIR:-"$(cd ../shared/bench && pwd)"}
MEDIA=$(cd "$BENCH_DIR" && . ./bench.env && ./gen_media.sh >/dev/null && echo "$BENCH_MEDIA")
FILES=${FILES:-"rand30.bin test.mp3"}
NGINX_PORT=18091
ORIGIN_PORT=18090
PROXY_PORT=18092
WORK=$(mktemp -d /tmp/streamcache-limited.XXXXXX)
user=""
[ "$(id -u)" = 0 ] && user="user root;"
cat >"$WORK/nginx.conf" <<EOF
$user
daemon off;
master_process off;
error_log $WORK/error.log warn;
pid $WORK/nginx.pid;
events { worker_connections 256; }
http {
    log_format limited '\$uri\t\$http_range\t\$status\t\$body_bytes_sent\t\$msec\t\$request_time';
    access_log $WORK/access.log limited;
    client_body_temp_path $WORK/body;
    proxy_temp_path $WORK/proxy;
    fastcgi_temp_path $WORK/fastcgi;
    uwsgi_temp_path $WORK/uwsgi;
    scgi_temp_path $WORK/scgi;
    sendfile on;
    keepalive_requests 100000;
    limit_conn_zone \$binary_remote_addr zone=client:1m;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $MEDIA;
        location / { limit_conn client ${CONNECTIONS:-2}; limit_conn_status 429; }
        location /free/ { alias $MEDIA/; }
    }
}
EOF
nginx -c "$WORK/nginx.conf" -p "$WORK" -e "$WORK/error.log" &
NGINX=$!
python3 "$BENCH_DIR/latency_shim.py" --listen $ORIGIN_PORT --target $NGINX_PORT --delay-ms 40 --per-conn-mbytes "${RATE:-4}" \
  --max-seconds 3600 &
SHIM=$!
SERVE=""
trap 'kill $SERVE $SHIM $NGINX 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$ORIGIN_PORT/" && break; sleep 0.05; done

# One read of FILE from URL: status, time, and what the origin logged for the file meanwhile.
read_once() {
  local label=$1 url=$2 file=$3 size
  size=$(stat -c %s "$MEDIA/${file#free/}")
  : >"$WORK/access.log"
  result=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' "$url")
  # nginx logs a request once its body is sent.
  sleep 0.5
  awk -F'\t' -v f="/$file" -v size="$size" -v label="$label" -v result="$result" '
    $1 == f && ($3 == 200 || $3 == 206) { bytes += $4; n++; end[n] = $5; start[n] = $5 - $6 }
    $1 == f && $3 == 429 { refused++ }
    END {
      split(result, r, " ")
      # The most answers under way at once: at the start of each, those begun and not ended.
      most = 0
      for (i = 1; i <= n; i++) {
        c = 0
        for (j = 1; j <= n; j++) if (start[j] <= start[i] && end[j] > start[i]) c++
        if (c > most) most = c
      }
      printf "%-28s %-18s HTTP %s  %6.2f s  %5.2f MB/s  origin bytes / size %.3f  refused %d  at once %d\n",
        label, f, r[1], r[2], size / r[2] / 1e6, bytes / size, refused, most
    }' "$WORK/access.log"
  if [ -n "${SHOW_LOG:-}" ]; then awk -F'\t' -v f="/$file" '$1 == f {print "    " $2, $3, $4}' "$WORK/access.log"; fi
}

for round in $(seq "${ROUNDS:-3}"); do
  for file in $FILES; do read_once "direct (one connection)" "http://127.0.0.1:$ORIGIN_PORT/$file" "$file"; done
  for BIN in "$@"; do
    cache="$WORK/cache-$round-$(basename "$BIN")"
    start_serve() {
      "$BIN" serve --folder "http://127.0.0.1:$ORIGIN_PORT/" --url-token tok --port $PROXY_PORT --cache-dir "$cache" ${SERVE_ARGS:-} \
        --control-token-file "$WORK/token" >>"$WORK/serve.log" 2>&1 &
      SERVE=$!
      for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PROXY_PORT/" && break; sleep 0.05; done
    }
    stop_serve() {
      kill $SERVE
      wait $SERVE 2>/dev/null || true
      SERVE=""
    }
    : >"$WORK/serve.log"
    start_serve
    first=1
    for file in $FILES; do
      if [ -n "${BUSY_FOR:-}" ] && [ $first = 0 ]; then sleep "$BUSY_FOR"; file=free/$file; fi
      if [ -n "${RESTART:-}" ] && [ $first = 0 ]; then stop_serve; start_serve; fi
      first=0
      read_once "$(basename "$BIN")" "http://127.0.0.1:$PROXY_PORT/tok/$file" "$file"
    done
    stop_serve
    if [ -n "${KEEP_LOG:-}" ]; then cp "$WORK/serve.log" "$KEEP_LOG/serve-$round-$(basename "$BIN").log"; fi
  done
done
