#!/usr/bin/env python3
"""Time to the first two bytes of a fresh `streamcache serve`, started two ways.

  python3 Benchmarks/first-request-ttfb.py [--repeats 9] [--settle 0.05] [--compare OLD_BINARY ...]

Needs the bench origin (../shared/bench: ./origin.sh start) and a release build
(swift build -c release --product streamcache). Each repeat starts the proxy on an empty cache,
waits until its port opens, times `GET /benchtok/rand200.bin` with `Range: bytes=0-1` from this
(long-lived) process, then stops it. "orphan" starts the proxy as ../shared/bench does (a `bash &`
job whose shell exits); "child" keeps it a child of a live shell; "exec" starts the binary
directly from this process. "direct" times the same request
to the origin. Prints medians and all values in ms.

--settle waits that many seconds between the port opening and the request (the harness waits a
few milliseconds; this VM wakes an idle thread more slowly the longer it slept). --compare times
other builds (for example one copied aside before a change) against this one, started the "exec"
way and taken in turns, so each comparison shares the machine's state of the moment.
"""
import argparse, http.client, os, statistics, subprocess, time
from benchsupport import release_binary, wait_port

ap = argparse.ArgumentParser()
ap.add_argument("--repeats", type=int, default=9)
ap.add_argument("--origin", default="http://127.0.0.1:18080/media/")
ap.add_argument("--settle", type=float, default=0.0)
ap.add_argument("--compare", nargs="*", default=[])
args = ap.parse_args()
binary = release_binary()
state = "/tmp/streamcache-first-request"
port = 18097


def timed_get(host_port, path, headers):
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", host_port, timeout=10)
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 206, response.status
    return (time.perf_counter() - t0) * 1000


serve = (f"rm -rf {state}; mkdir -p {state}; '{binary}' serve --port {port} --cache-dir {state}/cache "
         f"--control-token-file {state}/token --folder '{args.origin}' -H 'Authorization: Bearer testtoken' "
         f"--url-token benchtok >/dev/null 2>&1")
modes = ["exec:" + path for path in [binary, *args.compare]] if args.compare else ["orphan", "child", "exec"]
results = {mode: [] for mode in modes}
results["direct"] = []
for _ in range(args.repeats):
    for mode in modes:
        if mode == "orphan":
            subprocess.run(["bash", "-c", f"{serve} & echo $! > {state}.pid"], check=True)
            shell = None
        elif mode == "child":
            shell = subprocess.Popen(["bash", "-c", serve])
        else:
            subprocess.run(["bash", "-c", f"rm -rf {state}; mkdir -p {state}"])
            executable = binary if mode == "exec" else mode.removeprefix("exec:")
            shell = subprocess.Popen([executable, "serve", "--port", str(port), "--cache-dir", f"{state}/cache", "--control-token-file",
                                      f"{state}/token", "--folder", args.origin, "-H", "Authorization: Bearer testtoken",
                                      "--url-token", "benchtok"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port)
        time.sleep(args.settle)
        results[mode].append(timed_get(port, "/benchtok/rand200.bin", {"Range": "bytes=0-1"}))
        if shell is None:
            subprocess.run(["bash", "-c", f"kill $(cat {state}.pid)"])
        else:
            shell.terminate()
            shell.wait()
        subprocess.run(["bash", "-c", f"pkill -f 'serve --port {port}' || true"])
        time.sleep(0.3)
    results["direct"].append(timed_get(18080, "/media/rand200.bin", {"Range": "bytes=0-1", "Authorization": "Bearer testtoken"}))
for mode, values in results.items():
    print(f"{mode:7s} median {statistics.median(values):.2f} ms  {[round(v, 1) for v in values]}")
