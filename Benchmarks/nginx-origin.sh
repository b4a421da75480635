# Sourced by the peak-RSS benchmarks: a loopback nginx origin that requires
# `Authorization: Bearer bench` and serves $work/www, plus the release `streamcache` binary
# (or $STREAMCACHE_BIN).
# Needs: $root (the package). Makes $work, a scratch directory removed on exit with everything
# started in it.
# Sets: $bin, $port; start_origin SIZE_BYTES writes $work/www/big.bin and starts nginx;
# stop_origin stops it; start_proxy FOLDER TOKEN starts `streamcache serve` on $proxy_port
# ($proxy_pid) in front of the origin's FOLDER; clean_up stops both and removes $work.
work=$(mktemp -d /tmp/streamcache-bench.XXXXXX)
trap 'clean_up 2>/dev/null || rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# STREAMCACHE_BIN measures another build (an earlier commit's) instead of building this one.
if [ -n "${STREAMCACHE_BIN:-}" ]; then
  bin=$STREAMCACHE_BIN
else
  swift build -c release --static-swift-stdlib --product streamcache --package-path "$root" >/dev/null
  bin="$(swift build -c release --package-path "$root" --show-bin-path)/streamcache"
fi
port=$(free_port)

start_origin() {
  mkdir -p "$work/www" "$work/logs"
  head -c "$1" /dev/urandom > "$work/www/big.bin"
  cat > "$work/nginx.conf" <<CONF
$( [ "$(id -u)" = 0 ] && echo 'user root;' )
pid $work/nginx.pid;
error_log $work/logs/error.log warn;
events { worker_connections 256; }
http {
  access_log $work/logs/access.log;
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
}

stop_origin() { [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true; }

proxy_pid=""

# `streamcache serve` with an empty cache in $work, serving the origin's folder $1 (a path ending
# in / or empty) below the URL token $2; returns once it answers.
start_proxy() {
  proxy_port=$(free_port)
  "$bin" serve --port "$proxy_port" --cache-dir "$work/cache" --control-token-file "$work/token" \
    --folder "http://127.0.0.1:$port/$1" -H 'Authorization: Bearer bench' --url-token "$2" >"$work/serve.out" 2>"$work/serve.err" &
  proxy_pid=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$proxy_port/" && break; sleep 0.05; done
}

clean_up() {
  [ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null || true
  stop_origin
  rm -rf "$work"
}
