#!/usr/bin/env bash
# Side-by-side benchmark of `streamcache serve` against the direct origin, rclone's VFS cache and
# nginx's slice cache, with the shared harness in ../shared/bench (see its README).
#
#   bash Benchmarks/bench-proxy.sh [PROFILE] [PEERS]
#     PROFILE: loopback (default), wan, cloud
#     PEERS:   default "direct streamcache rclone nginx-slice"
#   Env: RESULTS_DIR (default /tmp/streamcache-bench/PROFILE), REPEATS (default 3), BENCH_DIR,
#        STREAMCACHE_BIN (a release binary to measure instead of building this checkout's).
#
# Builds the release binary first. Results: $RESULTS_DIR/summary.md and one file per peer.
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${1:-loopback}
PEERS=${2:-"direct streamcache rclone nginx-slice"}
BENCH_DIR=${BENCH_DIR:-"$(cd ../shared/bench && pwd)"}
export RESULTS_DIR=${RESULTS_DIR:-/tmp/streamcache-bench/$PROFILE}
export REPEATS=${REPEATS:-3}
mkdir -p "$RESULTS_DIR"

if [ -n "${STREAMCACHE_BIN:-}" ]; then
  BIN=$STREAMCACHE_BIN  # a binary built elsewhere (A/B runs of two commits)
else
  swift build -c release --static-swift-stdlib --product streamcache
  BIN="$(swift build -c release --show-bin-path)/streamcache"
fi
STATE=/tmp/streamcache-bench/peer
PORT=18083

# The harness knows "custom" as the one extra peer; ours is named streamcache.
PEERS=${PEERS/streamcache/custom}
export PEERS
export CUSTOM_NAME=streamcache
export CUSTOM_URL_TEMPLATE="http://127.0.0.1:$PORT/benchtok/{file}"
export CUSTOM_START_CMD=". ./bench.env; rm -rf $STATE; mkdir -p $STATE;
  nohup timeout \$MAX_LIFETIME '$BIN' serve --port $PORT --cache-dir $STATE/cache --control-token-file $STATE/token \
    --folder \"\$(origin_base)/media/\" -H \"Authorization: Bearer \$ORIGIN_TOKEN\" --url-token benchtok >$STATE/serve.log 2>&1 &
  echo \$! > $STATE/pid; wait_port $PORT"
export CUSTOM_STOP_CMD=". ./bench.env; kill_pidfile $STATE/pid"
export CUSTOM_PID_FILE=$STATE/pid

cd "$BENCH_DIR"
./run_all.sh "$PROFILE"
echo "results: $RESULTS_DIR/summary.md"
