#!/usr/bin/env python3
"""The release `streamcache serve` under stress, every byte checked: clients ask for random ranges
(bounded, open-ended, suffix, several at once, whole) of the bench's media and of a file that the origin replaces
with a new version now and then, read all of the answer or leave in the middle (a player that
seeks away), while the proxy is killed (`SIGKILL`) or stopped (`SIGTERM`) and started again over
the same cache, with a cache limit smaller than the files so that eviction runs all along.

  python3 Benchmarks/proxy-stress.py [--seconds 180] [--seed 1] [--clients 6] [--no-restarts]
                                     [--origin http://127.0.0.1:18080/media/] [--binary PATH] [--verbose]
                                     [--revalidate-after TIME] [--prefetch-rate BYTES_PER_SECOND]

Needs the bench origin (../shared/bench: ./origin.sh start, any profile; its `cloud` profile is on
http://127.0.0.1:18090/media/) and a release build (swift build -c release --product streamcache).
A read passes when its Content-Range is what RFC 9110 asks of the version that answers (the
changing file's ETag tells which) and every byte it got equals that version's (a multipart answer:
every part's range and bytes, all of one version); a read cut short
counts as an error unless the proxy was restarted or the file replaced meanwhile. At the
end the proxy is killed once more and every file is read whole through the restarted proxy: each
must be one version of the file, whole. With --prefetch-rate, a prefetcher asks the control API to
prefetch the files beside the readers, at that rate, a quarter of it or none, changes the rate of
some while they run and stops others; now and then it stops a start before sending it, naming it
(`?requestID=`), and that start must be refused. --revalidate-after is passed to `serve`; with 0, the final
read of the changing file must be its newest version. "older version" counts the reads of it
that were answered with a version older than the newest one published before they were sent
(with --revalidate-after 0, those the proxy served after a version question got no answer within
its `revalidationTimeout`, which it logs; --verbose names each such read).
Prints one line of counts; exits 1 on any wrong byte, unexplained error or failed final read.
"""
import argparse, os, random, signal, socket, subprocess, sys, threading, time
from benchsupport import release_binary, wait_port

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=180)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--clients", type=int, default=6)
ap.add_argument("--no-restarts", action="store_true")
ap.add_argument("--origin", default="http://127.0.0.1:18080/media/")
ap.add_argument("--media", default=os.environ.get("BENCH_MEDIA", "/tmp/bench-media"))
ap.add_argument("--binary", default=None)
ap.add_argument("--port", type=int, default=18096)
ap.add_argument("--cache-limit", default="120MB")
ap.add_argument("--verbose", action="store_true", help="the proxy logs every request and download (serve.log)")
ap.add_argument("--revalidate-after", default=None, help="passed to serve: how long the origin's word on a version holds")
ap.add_argument("--prefetch-rate", type=int, default=None,
                help="bytes per second: a prefetcher asks the control API to prefetch the files now and then at this rate or none, "
                     "asks again with another, and stops some (the readers' bytes are checked as ever)")
args = ap.parse_args()
binary = args.binary or release_binary()
state = "/tmp/streamcache-stress"
changing = "stress-changing.bin"
files = ["rand30.bin", "test.mp3", "test_moovend.m4a", "rand200.bin"]
versions = {name: [open(os.path.join(args.media, name), "rb").read()] for name in files}
versions[changing] = []
changing_tags = []  # nginx's ETag of each version of the changing file: "mtime-length" in hex
lock = threading.Lock()
counts = {"prefetches": 0, "rate changes": 0, "prefetches stopped": 0, "overtaken starts refused": 0, "prefetch calls failed": 0, "complete": 0, "left early": 0, "multipart": 0, "older version": 0, "cut by a restart": 0, "cut by a new version": 0,
          "bytes": 0, "wrong": 0, "restarts": 0, "new versions": 0, "errors": {}}
epoch = {"restarts": 0, "restarting": False, "versions": 0}
proxy = None


def publish_version(rng):
    """Replaces the changing file at the origin (a new length and modification time each time, so
    that nginx's validators change) and remembers its bytes."""
    with lock:
        number = len(versions[changing])
        data = rng.randbytes(rng.randrange(2_000_000, 6_000_000))
        versions[changing].append(data)
        epoch["versions"] += 1
    path = os.path.join(args.media, changing)
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    stamp = 1_700_000_000 + number * 10
    os.utime(path + ".tmp", (stamp, stamp))
    with lock:
        changing_tags.append(f'"{stamp:x}-{len(data):x}"')
    os.replace(path + ".tmp", path)


def start_proxy():
    global proxy
    log = open(state + "/serve.log", "ab")
    proxy = subprocess.Popen([binary, "serve", "--port", str(args.port), "--cache-dir", state + "/cache",
                              "--control-token-file", state + "/token", "--folder", args.origin,
                              "-H", "Authorization: Bearer testtoken", "--url-token", "tok",
                              "--max-cache-size", args.cache_limit] + (["-v"] if args.verbose else [])
                             + (["--revalidate-after", args.revalidate_after] if args.revalidate_after else []),
                             stdout=log, stderr=log)
    wait_port(args.port)


def count(key, amount=1):
    with lock:
        counts[key] += amount


def count_error(text):
    print(f"{time.strftime('%H:%M:%S')} error: {text}", flush=True)
    with lock:
        counts["errors"][text] = counts["errors"].get(text, 0) + 1


class Interrupted(Exception):
    """The read was cut by a restart or a new version: expected, not an error."""
    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def pick_range(rng, size):
    """A Range header (or None for the whole file), drawn on a file of `size` bytes."""
    roll = rng.random()
    if roll < 0.35:
        start = rng.randrange(size)
        return f"bytes={start}-{start + rng.choice([0, 1, 4095, 65535, 262143, 1 << 20, 5 << 20])}"
    if roll < 0.75:
        return f"bytes={rng.randrange(size)}-"
    if roll < 0.85:
        return f"bytes=-{rng.randrange(1, min(size, 4 << 20))}"
    if roll < 0.93:
        # Two or three ranges with room between them, in order: a multipart answer.
        starts = sorted(rng.sample(range(size), rng.choice([2, 3])))
        spans = []
        for index, start in enumerate(starts):
            room = (starts[index + 1] if index + 1 < len(starts) else size + (5 << 20)) - start - 2
            if room >= 0:
                spans.append(f"{start}-{start + min(room, rng.choice([0, 4095, 65535, 1 << 20]))}")
        return "bytes=" + ",".join(spans)
    return None


def expected_parts(header, total):
    """The parts RFC 9110 says a several-range `header` selects in a file of `total` bytes:
    unsatisfiable ranges dropped, the rest cut to the end, overlapping or touching ones merged."""
    parts = []
    for spec in header[len("bytes="):].split(","):
        first, last = (int(x) for x in spec.split("-"))
        if first < total:
            last = min(last, total - 1)
            if parts and first <= parts[-1][1] + 1:
                parts[-1] = (parts[-1][0], max(parts[-1][1], last))
            else:
                parts.append((first, last))
    return parts


def check_multipart(name, header, head, body, data, served):
    """Checks a multipart/byteranges body against the version that answered; True when right."""
    boundary = header_value(head, "Content-Type").split("boundary=", 1)[1].encode()
    pieces = body.split(b"\r\n--" + boundary)
    if pieces[0] != b"" or pieces[-1] != b"--\r\n":
        print(f"WRONG MULTIPART FRAMING: {name} {header}", flush=True)
        return False
    claimed = []
    for piece in pieces[1:-1]:
        part_head, part_body = piece.split(b"\r\n\r\n", 1)
        content_range = header_value(b"x" + part_head, "Content-Range")
        span, length = content_range[len("bytes "):].split("/")
        first, last = (int(x) for x in span.split("-"))
        claimed.append((first, last))
        if int(length) != len(data) or part_body != data[first:last + 1]:
            print(f"WRONG MULTIPART BYTES: {name} {header} part {content_range} (version {served + 1})", flush=True)
            return False
    if claimed != expected_parts(header, len(data)):
        print(f"WRONG MULTIPART PARTS: {name} {header}: {claimed}", flush=True)
        return False
    return True


def expected_span(header, total):
    """The first and last byte RFC 9110 says `header` selects in a file of `total` bytes."""
    if header is None:
        return 0, total - 1
    first, last = header[len("bytes="):].split("-")
    if not first:
        return max(0, total - int(last)), total - 1
    return int(first), min(total - 1, int(last)) if last else total - 1


def header_value(head, name):
    prefix = name.lower().encode() + b":"
    return next((line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")[1:]
                 if line.lower().startswith(prefix)), None)


def read_once(rng):
    name = rng.choice(files + [changing])
    with lock:
        newest = versions[name][-1]
        restarts, version_count = epoch["restarts"], epoch["versions"]
        published = len(changing_tags)  # versions on disk (or about to be) before the request
    # Drawn on the newest version's length: an older one, cached whole, may answer instead.
    header = pick_range(rng, len(newest))
    leave_early = rng.random() < 0.5
    served = 0  # which version of the file answers (the changing file's ETag tells)

    def interruption():
        with lock:
            if epoch["restarts"] != restarts or epoch["restarting"]:
                return "cut by a restart"
            # The proxy learns of a new version when it next asks the origin, which may be in the
            # middle of a read it began from an older version's cached bytes.
            if name == changing and (epoch["versions"] != version_count or served != len(changing_tags) - 1):
                return "cut by a new version"
            return None

    sock = None
    keep = wanted = 0

    def receive(got, count):
        """Reads the body on until `got` holds `count` bytes."""
        while len(got) < count:
            chunk = sock.recv(min(1 << 20, count - len(got)))
            if not chunk:
                raise OSError(f"{name} {header} (version {served + 1}) closed after {len(got)} of {count} bytes")
            got += chunk
        return got

    try:
        sock = socket.create_connection(("127.0.0.1", args.port), timeout=30)
        request = f"GET /tok/{name} HTTP/1.1\r\nHost: 127.0.0.1:{args.port}\r\n" + (f"Range: {header}\r\n" if header else "") + "\r\n"
        sock.sendall(request.encode())
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("closed before the head")
            received += chunk
        head, body = received.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        if name == changing:
            tag = header_value(head, "ETag")
            with lock:
                if tag not in changing_tags:
                    raise OSError(f"an ETag of no version: {tag}")
                served = changing_tags.index(tag)
                if served < published - 1:
                    counts["older version"] += 1
                    if args.verbose:
                        print(f"{time.strftime('%H:%M:%S')} older version: {name} {header} answered with version {served + 1}"
                              f" of {published} published before it was sent", flush=True)
        with lock:
            data = versions[name][served]
        if header and "," in header:
            parts = expected_parts(header, len(data))
            if status == 416 and not parts and name == changing:
                raise Interrupted("cut by a new version")  # drawn on a longer version than the one cached
            if len(parts) == 1:
                header = f"bytes={parts[0][0]}-{parts[0][1]}"  # one range left: a plain 206
            elif status == 206 and parts:
                keep = wanted = int(header_value(head, "Content-Length"))
                got = receive(bytearray(body), wanted)
                if check_multipart(name, header, head, bytes(got), data, served):
                    count("bytes", len(got))
                    count("complete")
                    count("multipart")
                else:
                    count("wrong")
                return
        if status == 416 and name == changing and header and expected_span(header, len(data))[0] >= len(data):
            raise Interrupted("cut by a new version")  # drawn on a longer version than the one cached
        if status != (206 if header else 200):
            # The proxy's error answers are short plain text: say what it said.
            raise OSError(f"status {status} for {name} {header}: {body[:160].decode(errors='replace')}")
        first, last = expected_span(header, len(data))
        if header:
            claimed = header_value(head, "Content-Range")
            if claimed != f"bytes {first}-{last}/{len(data)}":
                count("wrong")
                print(f"WRONG Content-Range: {name} {header}: {claimed}, expected bytes {first}-{last}/{len(data)}", flush=True)
                return
        wanted = last - first + 1
        keep = rng.randrange(0, wanted + 1) if leave_early else wanted
        got = receive(bytearray(body), keep)
        del got[keep:]
    except OSError as error:
        reason = interruption()
        if reason:
            raise Interrupted(reason) from error
        raise
    finally:
        if sock is not None:
            if keep < wanted:  # leave as a player does: reset, not a polite close
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()
    if got != data[first:first + keep]:
        count("wrong")
        print(f"WRONG BYTES: {name} {header} (version {served + 1}, {keep} bytes kept)", flush=True)
    count("bytes", len(got))
    count("complete" if keep == wanted else "left early")


def client(index, deadline):
    rng = random.Random(args.seed * 1000 + index)
    while time.time() < deadline:
        try:
            read_once(rng)
        except Interrupted as interrupted:
            count(interrupted.reason)
        except Exception as error:  # noqa: BLE001 (every other failure is reported)
            count_error(f"{type(error).__name__}: {error}"[:120])
        time.sleep(rng.choice([0, 0, 0.01, 0.1]))


def disturber(deadline):
    """Restarts the proxy and publishes new versions of the changing file at random moments."""
    rng = random.Random(args.seed)
    while time.time() < deadline - 10:
        time.sleep(rng.uniform(4, 10))
        if rng.random() < 0.5:
            publish_version(rng)
            count("new versions")
        elif not args.no_restarts:
            with lock:
                epoch["restarting"] = True
            proxy.send_signal(signal.SIGKILL if rng.random() < 0.7 else signal.SIGTERM)
            proxy.wait()
            start_proxy()
            with lock:
                epoch["restarts"] += 1
                epoch["restarting"] = False
            count("restarts")


def prefetcher(deadline):
    """Prefetches the files through the control API beside the readers, at a rate of their own or
    none, changes a running prefetch's rate by asking again, and stops some: the engine's pacing
    under random reads, restarts and eviction. Now and then a stop names a start that has not come
    yet (`?requestID=`, as Ctrl-C on `streamcache prefetch` may send it), and that start must be
    refused with 409: one that is taken is an error. Its other failures (a proxy restarting) are
    counted apart, not as errors: what matters is that every byte the readers get stays right."""
    import json, urllib.error, urllib.request, uuid
    rng = random.Random(args.seed + 7)

    def call(method, path, body=None):
        token = open(state + "/token").read().strip()
        request = urllib.request.Request(f"http://127.0.0.1:{args.port}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read() or b"{}")

    while time.time() < deadline - 5:
        time.sleep(rng.uniform(0.5, 3))
        name = rng.choice(files + [changing])
        try:
            registered = call("POST", "/api/resources", {"url": args.origin + name, "headers": {"Authorization": "Bearer testtoken"}})
            api = f"/api/resources/{registered['id']}/prefetch"
            request_id = str(uuid.UUID(int=rng.getrandbits(128)))
            if rng.random() < 0.15:
                restarts = epoch["restarts"]
                call("DELETE", f"{api}?requestID={request_id}")
                try:
                    call("POST", api, {"requestID": request_id})
                    # A restart between the two forgets the stop (the server keeps it in memory).
                    if epoch["restarts"] == restarts and not epoch["restarting"]:
                        count_error("a start that a stop named before it came was taken")
                except urllib.error.HTTPError as refusal:
                    if refusal.code == 409:
                        count("overtaken starts refused")
                    else:
                        raise
                continue
            rate = rng.choice([None, args.prefetch_rate, args.prefetch_rate // 4])
            call("POST", api, {"requestID": request_id} if rate is None else {"rate": rate, "requestID": request_id})
            count("prefetches")
            time.sleep(rng.uniform(0.2, 2))
            if rng.random() < 0.5:
                call("POST", api, {"rate": args.prefetch_rate * 4})
                count("rate changes")
            elif rng.random() < 0.5:
                call("DELETE", f"{api}?requestID={request_id}" if rng.random() < 0.5 else api)
                count("prefetches stopped")
        except Exception:  # noqa: BLE001 (a proxy restarting; a purge racing a read)
            count("prefetch calls failed")


def main():
    subprocess.run(["rm", "-rf", state], check=True)
    os.makedirs(state)
    publish_version(random.Random(args.seed))
    start_proxy()
    deadline = time.time() + args.seconds
    threads = [threading.Thread(target=client, args=(i, deadline), daemon=True) for i in range(args.clients)]
    threads.append(threading.Thread(target=disturber, args=(deadline,), daemon=True))
    if args.prefetch_rate:
        threads.append(threading.Thread(target=prefetcher, args=(deadline,), daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(args.seconds + 120)
    proxy.send_signal(signal.SIGKILL)
    proxy.wait()
    start_proxy()
    final_ok = True
    for name in files + [changing]:
        whole = subprocess.run(["curl", "-sf", f"http://127.0.0.1:{args.port}/tok/{name}"],
                               capture_output=True, timeout=300).stdout
        # A file cached whole is served without asking the origin (offline replay) unless
        # --revalidate-after is given, so the changing file may come back as any version it had;
        # it must be one of them, all of it.
        matches = [number for number, data in enumerate(versions[name]) if whole == data]
        final_ok = final_ok and bool(matches)
        if args.revalidate_after in ("0", "0s") and name == changing:
            # Asking the origin before cached bytes are served: the newest, whatever was cached.
            final_ok = final_ok and matches[-1:] == [len(versions[name]) - 1]
        verdict = f"identical to version {matches[-1] + 1} of {len(versions[name])}" if matches else f"DIFFERENT ({len(whole)} bytes)"
        print(f"final whole read of {name}: {verdict}", flush=True)
    proxy.terminate()
    proxy.wait()
    os.remove(os.path.join(args.media, changing))
    print(counts, flush=True)
    sys.exit(0 if final_ok and counts["wrong"] == 0 and not counts["errors"] else 1)


main()
