#!/usr/bin/env python3
"""A cold full read, then a warm one, through a fresh `streamcache serve` each time.

  python3 Benchmarks/cold-then-warm.py [--repeats 8] [--pause 0] [--later 0] [--binary PATH] [--rclone]
                                      [--file rand30.bin] [--then PD...]

Needs the bench origin (../shared/bench: ./origin.sh start) and a release build (by default
`swift build -c release --static-swift-stdlib --product streamcache`'s binary). Each repeat starts
the proxy on an empty cache below /tmp, reads /media/rand30.bin (or --file) through it twice with
the bench's client pattern (one connection per read, 1 MiB reads), waits --pause seconds between the two reads,
and with --later N also reads it N more times after a one-second pause. The same loop reads the
origin directly ("direct") for comparison, and with --rclone the same pair through a fresh rclone VFS
cache (../shared/bench/peers.sh) after each proxy. Prints MB/s of every read and the medians.

--then SEQUENCE replaces the warm read: right after the cold one, one read per letter, P through the
proxy and D straight from the origin, reported by position ("then 1 D", "then 2 P", ...). It tells
what comes from the read's position (the first read after a cold one) from what comes from the
server: `--file rand200.bin --then DDDPP` and `--then PPPDD` side by side.
"""
import argparse, http.client, os, shutil, statistics, subprocess, time

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--repeats", type=int, default=8)
ap.add_argument("--pause", type=float, default=0.0)
ap.add_argument("--later", type=int, default=0)
ap.add_argument("--binary")
ap.add_argument("--file", default="rand30.bin", help="the bench media file to read (rand200.bin is the bench's loopback file)")
ap.add_argument("--then", default="", help="reads right after the cold one: P through the proxy, D from the origin (replaces the warm read)")
ap.add_argument("--rclone", action="store_true",
                help="also take the pair through a fresh rclone VFS cache each repeat (../shared/bench/peers.sh)")
args = ap.parse_args()
if set(args.then) - set("PD"):
    ap.error("--then takes the letters P (proxy) and D (direct) only")
binary = args.binary or subprocess.run(["swift", "build", "-c", "release", "--static-swift-stdlib", "--show-bin-path"],
                                       cwd=os.path.dirname(HERE), capture_output=True, text=True, check=True).stdout.strip() + "/streamcache"
PORT, STATE = 18097, "/tmp/streamcache-cold-then-warm"


def read(port, path, headers):
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    buffer = memoryview(bytearray(1 << 20))
    received = 0
    while True:
        count = response.readinto(buffer)
        if not count:
            break
        received += count
    connection.close()
    size = int(response.getheader("Content-Length"))
    assert received == size, f"{received} of {size} bytes"
    return size / (time.perf_counter() - start) / 1e6


results = {"direct cold": [], "direct warm": [], "proxy cold": [], "proxy warm": [], "proxy later": [], "rclone cold": [], "rclone warm": []}
BENCH = os.path.join(os.path.dirname(HERE), "..", "shared", "bench")
for _ in range(args.repeats):
    origin = {"Authorization": "Bearer testtoken"}
    results["direct cold"].append(read(18080, f"/media/{args.file}", origin))
    results["direct warm"].append(read(18080, f"/media/{args.file}", origin))
    shutil.rmtree(STATE, ignore_errors=True)
    os.makedirs(STATE)
    proxy = subprocess.Popen([binary, "serve", "--port", str(PORT), "--cache-dir", f"{STATE}/cache", "--control-token-file",
                              f"{STATE}/token", "--folder", "http://127.0.0.1:18080/media/", "-H", "Authorization: Bearer testtoken",
                              "--url-token", "t"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                probe = http.client.HTTPConnection("127.0.0.1", PORT, timeout=1)
                probe.request("GET", "/")
                probe.getresponse().read()
                probe.close()
                break
            except OSError:
                time.sleep(0.05)
        results["proxy cold"].append(read(PORT, f"/t/{args.file}", {}))
        time.sleep(args.pause)
        for position, reader in enumerate(args.then, start=1):
            speed = read(PORT, f"/t/{args.file}", {}) if reader == "P" else read(18080, f"/media/{args.file}", origin)
            results.setdefault(f"then {position} {reader}", []).append(speed)
        if not args.then:
            results["proxy warm"].append(read(PORT, f"/t/{args.file}", {}))
        if args.later:
            time.sleep(1)
            results["proxy later"] += [read(PORT, f"/t/{args.file}", {}) for _ in range(args.later)]
    finally:
        proxy.terminate()
        proxy.wait()
    if args.rclone:
        # A fresh rclone VFS cache (peers.sh starts it on an empty one), right after the proxy.
        subprocess.run(["bash", "peers.sh", "start", "rclone"], cwd=BENCH, check=True, capture_output=True)
        try:
            results["rclone cold"].append(read(18081, f"/{args.file}", {}))
            time.sleep(args.pause)
            results["rclone warm"].append(read(18081, f"/{args.file}", {}))
        finally:
            subprocess.run(["bash", "peers.sh", "stop", "rclone"], cwd=BENCH, capture_output=True)
for name, values in results.items():
    if values:
        print(f"{name:12} median {statistics.median(values):6.0f} MB/s  {[round(v) for v in values]}")
