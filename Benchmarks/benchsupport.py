"""Helpers the Python benchmarks of this folder share."""
import os, socket, subprocess, time


def release_binary():
    """This checkout's release `streamcache` (swift build -c release --product streamcache first)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run(["swift", "build", "-c", "release", "--show-bin-path"], cwd=root,
                          capture_output=True, text=True, check=True).stdout.strip() + "/streamcache"


def wait_port(port, limit=15.0):
    """Bounded wait until something listens on 127.0.0.1:port."""
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listened on port {port} within {limit} s")
