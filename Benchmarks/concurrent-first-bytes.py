#!/usr/bin/env python3
"""Time to first byte of many clients that open one file at once, through `streamcache serve` and
straight from the origin, as ../shared/bench's "16 clients" scenario does (Python threads, each
reading its whole answer, timed from the barrier to its first body bytes).

  python3 Benchmarks/concurrent-first-bytes.py [--clients 16] [--rounds 7] [--cold] [--file test.mp3]
                                               [--compare OLD_BINARY ...] [--each]

Needs the bench origin on 127.0.0.1:18080 (../shared/bench: ./origin.sh start) and a release
build (swift build -c release --product streamcache). Each binary gets one fresh proxy. Warm (the
default): the file is read once first, then every round reads it from the cache, so the rounds
measure how the server shares its event loop between clients. --cold starts a fresh proxy for
every round instead (the bench's scenario: the first client's request downloads the file while
the others join it). Rounds take turns between the binaries and the origin, so each comparison
shares the machine's state of the moment. Prints the median of each round's median, and the rounds;
with --each, every round's first bytes too, client by client in the order they came (a client's
first bytes come with its response head, so the first of them tells when the server answered).
"""
import argparse, http.client, os, shutil, statistics, subprocess, threading, time
from benchsupport import release_binary, wait_port

ap = argparse.ArgumentParser()
ap.add_argument("--clients", type=int, default=16)
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--cold", action="store_true")
ap.add_argument("--file", default="test.mp3")
ap.add_argument("--origin", default="http://127.0.0.1:18080/media/")
ap.add_argument("--compare", nargs="*", default=[])
ap.add_argument("--each", action="store_true")
args = ap.parse_args()
binary = release_binary()
headers = {"Authorization": "Bearer testtoken"}


def first_bytes_of_all(port, path):
    """Median time to first body bytes of `clients` threads released at once (ms)."""
    times = [None] * args.clients
    barrier = threading.Barrier(args.clients + 1, timeout=30)

    def client(index):
        barrier.wait()
        start = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read1(65536)
        times[index] = (time.perf_counter() - start) * 1000
        while response.read(1 << 20):
            pass
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    for thread in threads:
        thread.join(60)
    if None in times:
        raise SystemExit("a client got no answer")
    spread[port].append(sorted(times))
    return statistics.median(times)


class Proxy:
    def __init__(self, executable, port):
        self.executable, self.port = executable, port
        self.state = f"/tmp/streamcache-concurrent-{port}"
        self.process = None

    def start(self):
        shutil.rmtree(self.state, ignore_errors=True)
        os.makedirs(self.state)
        self.process = subprocess.Popen(
            [self.executable, "serve", "--port", str(self.port), "--cache-dir", f"{self.state}/cache", "--control-token-file",
             f"{self.state}/token", "--folder", args.origin, "-H", "Authorization: Bearer testtoken", "--url-token", "benchtok"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
        time.sleep(0.3)

    def stop(self):
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(self.state, ignore_errors=True)


proxies = {path: Proxy(path, 18100 + i) for i, path in enumerate([binary, *args.compare])}
results = {name: [] for name in [*proxies, "direct"]}
spread = {port: [] for port in [*(proxy.port for proxy in proxies.values()), 18080]}
path = "/benchtok/" + args.file
try:
    if not args.cold:
        for proxy in proxies.values():
            proxy.start()
            first_bytes_of_all(proxy.port, path)  # fills the cache
    for _ in range(args.rounds):
        for name, proxy in proxies.items():
            if args.cold:
                proxy.start()
            results[name].append(first_bytes_of_all(proxy.port, path))
            if args.cold:
                proxy.stop()
            time.sleep(0.2)
        results["direct"].append(first_bytes_of_all(18080, "/media/" + args.file))
        time.sleep(0.2)
finally:
    for proxy in proxies.values():
        if proxy.process and proxy.process.poll() is None:
            proxy.stop()
for name, values in results.items():
    print(f"{name}: median {statistics.median(values):.1f} ms  rounds {[round(v, 1) for v in values]}")
    if args.each:
        port = proxies[name].port if name in proxies else 18080
        for times in spread[port][-len(values):]:
            print("  " + " ".join(f"{t:.1f}" for t in times))
