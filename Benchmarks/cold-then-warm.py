#!/usr/bin/env python3
"""A cold full read, then a warm one, through a fresh `streamcache serve` each time.

  python3 Benchmarks/cold-then-warm.py [--repeats 8] [--pause 0] [--later 0] [--binary PATH] [--rclone]

Needs the bench origin (../shared/bench: ./origin.sh start) and a release build (by default
`swift build -c release --static-swift-stdlib --product streamcache`'s binary). Each repeat starts
the proxy on an empty cache below /tmp, reads /media/rand30.bin through it twice with the bench's
client pattern (one connection per read, 1 MiB reads), waits --pause seconds between the two reads,
and with --later N also reads it N more times after a one-second pause. The same loop reads the
origin directly ("direct") for comparison, and with --rclone the same pair through a fresh rclone VFS
cache (../shared/bench/peers.sh) after each proxy. Prints MB/s of every read and the medians.
"""
import argparse, http.client, os, shutil, statistics, subprocess, time

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--repeats", type=int, default=8)
ap.add_argument("--pause", type=float, default=0.0)
ap.add_argument("--later", type=int, default=0)
ap.add_argument("--binary")
ap.add_argument("--rclone", action="store_true",
                help="also take the pair through a fresh rclone VFS cache each repeat (../shared/bench/peers.sh)")
args = ap.parse_args()
binary = args.binary or subprocess.run(["swift", "build", "-c", "release", "--static-swift-stdlib", "--show-bin-path"],
                                       cwd=os.path.dirname(HERE), capture_output=True, text=True, check=True).stdout.strip() + "/streamcache"
SIZE, PORT, STATE = 31457280, 18097, "/tmp/streamcache-cold-then-warm"


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
    assert received == SIZE, f"{received} bytes"
    return SIZE / (time.perf_counter() - start) / 1e6


results = {"direct cold": [], "direct warm": [], "proxy cold": [], "proxy warm": [], "proxy later": [], "rclone cold": [], "rclone warm": []}
BENCH = os.path.join(os.path.dirname(HERE), "..", "shared", "bench")
for _ in range(args.repeats):
    origin = {"Authorization": "Bearer testtoken"}
    results["direct cold"].append(read(18080, "/media/rand30.bin", origin))
    results["direct warm"].append(read(18080, "/media/rand30.bin", origin))
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
        results["proxy cold"].append(read(PORT, "/t/rand30.bin", {}))
        time.sleep(args.pause)
        results["proxy warm"].append(read(PORT, "/t/rand30.bin", {}))
        if args.later:
            time.sleep(1)
            results["proxy later"] += [read(PORT, "/t/rand30.bin", {}) for _ in range(args.later)]
    finally:
        proxy.terminate()
        proxy.wait()
    if args.rclone:
        # A fresh rclone VFS cache (peers.sh starts it on an empty one), right after the proxy.
        subprocess.run(["bash", "peers.sh", "start", "rclone"], cwd=BENCH, check=True, capture_output=True)
        try:
            results["rclone cold"].append(read(18081, "/rand30.bin", {}))
            time.sleep(args.pause)
            results["rclone warm"].append(read(18081, "/rand30.bin", {}))
        finally:
            subprocess.run(["bash", "peers.sh", "stop", "rclone"], cwd=BENCH, capture_output=True)
for name, values in results.items():
    if values:
        print(f"{name:12} median {statistics.median(values):6.0f} MB/s  {[round(v) for v in values]}")
