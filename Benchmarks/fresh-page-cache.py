#!/usr/bin/env python3
"""How fast this machine reads a file it has just written, first pass against later passes.

Writes a file of SIZE MiB (64 KiB at a time, as a cache writes what arrives), reads it whole twice
with read(), and does so ROUNDS times, each time into a new file. Nothing of StreamCache runs: the
figures are the kernel's and the machine's. On the project's virtual machine the first pass over
pages taken from memory that had gone back to the host is several times slower than the second,
which is what a caching proxy's first warm read meets and an origin serving an old file does not
(see docs/benchmarks.md, *The loopback warm read, again below direct in this run*).

    python3 Benchmarks/fresh-page-cache.py [SIZE_MIB] [ROUNDS] [DIRECTORY]

Defaults: 200 MiB (the bench's rand200.bin), 3 rounds, /tmp. Removes its file at the end.
"""
import os
import sys
import time

size = int(sys.argv[1] if len(sys.argv) > 1 else 200) << 20
rounds = int(sys.argv[2] if len(sys.argv) > 2 else 3)
path = os.path.join(sys.argv[3] if len(sys.argv) > 3 else "/tmp", "fresh-page-cache-%d.bin" % os.getpid())
piece = os.urandom(64 << 10)


def write():
    descriptor = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    try:
        for offset in range(0, size, len(piece)):
            os.pwrite(descriptor, piece, offset)
    finally:
        os.close(descriptor)


def read_pass():
    """MB/s of one whole read of the file."""
    start = time.perf_counter()
    descriptor = os.open(path, os.O_RDONLY)
    buffer = memoryview(bytearray(4 << 20))
    got = 0
    try:
        for _ in range(size // len(buffer) + 2):  # bounded: the file's size in buffers, and its end
            count = os.readv(descriptor, [buffer])
            if not count:
                break
            got += count
    finally:
        os.close(descriptor)
    return got / (time.perf_counter() - start) / 1e6


try:
    for round_number in range(1, rounds + 1):
        write()
        print("round %d: first pass %.0f MB/s, second pass %.0f MB/s" % (round_number, read_pass(), read_pass()))
finally:
    if os.path.exists(path):
        os.remove(path)
