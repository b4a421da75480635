# Sourced (not run) by the scripts that measure one fresh `streamcache serve --folder` against the
# origin of ../shared/bench: seek-pattern-requests.sh, playback-window.sh, album-prefetch.sh and others.
#
#   serve_on_bench_origin BIN PROFILE PORT NAME
#     BIN:     a release `streamcache` binary, or "": this checkout's release build, built first.
#     PROFILE: loopback (no shim), wan (+40 ms per request, one shared 10 MB/s link) or cloud (+40 ms
#              per request, 4 MB/s per connection, 60 MB/s link), as ../shared/bench/run_all.sh sets them up;
#              or slowcloud (ours: cloud with each connection capped at 0.4 MB/s, a throttled service).
#     PORT:    the proxy's port. NAME: its state directory is /tmp/streamcache-NAME.XXXXXX.
#   Env: BENCH_DIR (default ../shared/bench), SERVE_ARGS (more `serve` options), KEEP_LOG (a path to
#        copy the proxy's log to on exit).
#
# Call it from the project's root. It leaves the shell in BENCH_DIR with bench.env loaded, the
# bench's origin (re)started for the profile with an empty access log ($ORIGIN_LOG), the proxy
# listening on PORT (pid in PID, state in STATE, serving the media folder at
# http://127.0.0.1:PORT/benchtok/), and an exit trap that stops both and removes STATE.
serve_on_bench_origin() {
  local bin=${1:-} profile=$2 port=$3 name=$4
  if [ -n "$bin" ]; then
    BIN=$(realpath "$bin")
  else
    swift build -c release --static-swift-stdlib --product streamcache >/dev/null
    BIN="$(swift build -c release --show-bin-path)/streamcache"
  fi
  case $profile in
    loopback) export ORIGIN_DELAY_MS=0 ORIGIN_LINK_MBYTES=0 ORIGIN_CONN_MBYTES=0 ;;
    wan) export ORIGIN_DELAY_MS=40 ORIGIN_LINK_MBYTES=10 ORIGIN_CONN_MBYTES=0 ;;
    cloud) export ORIGIN_DELAY_MS=40 ORIGIN_LINK_MBYTES=60 ORIGIN_CONN_MBYTES=4 ;;
    slowcloud) export ORIGIN_DELAY_MS=40 ORIGIN_LINK_MBYTES=60 ORIGIN_CONN_MBYTES=0.4 ;;
    *) echo "unknown profile $profile (loopback, wan, cloud)" >&2; exit 2 ;;
  esac
  export ORIGIN_RATE=0
  BENCH_DIR=${BENCH_DIR:-"$(cd ../shared/bench && pwd)"}
  cd "$BENCH_DIR"
  . ./bench.env
  ./gen_media.sh >/dev/null
  ./origin.sh stop >/dev/null 2>&1 || true
  ./origin.sh start >/dev/null
  STATE=$(mktemp -d "/tmp/streamcache-$name.XXXXXX")
  # SERVE_ARGS is split into words on purpose: it holds options.
  # shellcheck disable=SC2086
  "$BIN" serve --port "$port" --cache-dir "$STATE/cache" --control-token-file "$STATE/token" \
    --folder "$(origin_base)/media/" -H "Authorization: Bearer $ORIGIN_TOKEN" --url-token benchtok ${SERVE_ARGS:-} >"$STATE/serve.log" 2>&1 &
  PID=$!
  # Each step is excused: errexit also holds in the trap, and a step that fails would skip the rest.
  trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; ./origin.sh stop >/dev/null 2>&1 || true; [ -z "${KEEP_LOG:-}" ] || cp "$STATE/serve.log" "$KEEP_LOG"; rm -rf "$STATE"' EXIT
  wait_port "$port"
  sleep 0.3
  : > "$ORIGIN_LOG"
}
