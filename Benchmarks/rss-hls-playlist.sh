#!/usr/bin/env bash
# Memory of `streamcache serve` for a long HLS playlist: every segment a playlist names becomes a
# proxy stream (`/s/<id>/<name>`), which the server keeps while the playlist may still be played.
# RSS before and after serving a VOD playlist of N segments twice, and a check that the rewritten
# URL of its first and last segments give the origin's bytes. Release build.
#   bash Benchmarks/rss-hls-playlist.sh [SEGMENTS]      (default 50000)
# Needs nginx, curl and python3. Everything runs on 127.0.0.1 and is cleaned up on exit.
set -euo pipefail
segments=${1:-50000}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/Benchmarks/nginx-origin.sh"
start_origin 1
python3 - "$work/www/hls" "$segments" <<'PY'
import os, sys
directory, count = sys.argv[1], int(sys.argv[2])
os.makedirs(os.path.join(directory, "segments"), exist_ok=True)
lines = ["#EXTM3U", "#EXT-X-VERSION:3", "#EXT-X-TARGETDURATION:2", "#EXT-X-MEDIA-SEQUENCE:0", "#EXT-X-PLAYLIST-TYPE:VOD"]
for index in range(count):
    lines += ["#EXTINF:2.0,", f"segments/part-{index:06d}.ts"]
lines.append("#EXT-X-ENDLIST")
with open(os.path.join(directory, "index.m3u8"), "w") as playlist:
    playlist.write("\n".join(lines) + "\n")
for index in (0, count - 1):
    with open(os.path.join(directory, "segments", f"part-{index:06d}.ts"), "wb") as segment:
        segment.write(os.urandom(188 * 100))
PY

start_proxy "" hls
rss_mib() { awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$proxy_pid/status"; }
playlist_url="http://127.0.0.1:$proxy_port/hls/hls/index.m3u8"

echo "idle: $(rss_mib) MiB"
for round in first second; do
  curl -s --fail -o "$work/rewritten.m3u8" "$playlist_url"
  sleep 1
  echo "after the $round request of the $segments-segment playlist: $(rss_mib) MiB"
done
for index in 0 $((segments - 1)); do
  path=$(grep -v '^#' "$work/rewritten.m3u8" | sed -n "$((index + 1))p")
  expected=$(sha256sum < "$work/www/hls/segments/$(printf 'part-%06d.ts' "$index")" | cut -d' ' -f1)
  actual=$(curl -s --fail "http://127.0.0.1:$proxy_port$path" | sha256sum | cut -d' ' -f1)
  [ "$actual" = "$expected" ] && echo "segment $index through $path: bytes identical" || { echo "segment $index: WRONG BYTES"; exit 1; }
done
