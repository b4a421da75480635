#!/usr/bin/env python3
"""How fast this machine's kernel copies file bytes into a reader's buffer, by the distance from
the bytes' place in the page cache to their place in the buffer, modulo 4 KiB.

Reads a file of SIZE MiB (written first, 64 KiB at a time, as a cache writes what arrives) with
`preadv` into one anonymous mapping at chosen offsets, so that each destination lies a chosen
number of bytes past its source's offset within a page. Nothing of StreamCache runs: the figures
are the kernel's copy (`rep movsb` where the CPU has FSRM) and the CPU's. On the project's AMD EPYC
machine a distance of 1 to 31 bytes runs at a quarter of the speed of any other: the copy's
stores land just ahead of its loads in the low 12 address bits. glibc places a large `malloc`
16 bytes past a page boundary, so a reader with such a buffer that reads a body from its first
byte, at the start of a cache page, meets it on every byte (docs/benchmarks.md, *A copy 16 bytes
ahead of its source*). It also prints where this Python's large `bytearray` starts.

    python3 Benchmarks/copy-distance.py [SIZE_MIB] [DIRECTORY]

Defaults: 200 MiB (the bench's rand200.bin), /tmp. Removes its file at the end.
"""
import ctypes
import mmap
import os
import sys
import time

size = int(sys.argv[1] if len(sys.argv) > 1 else 200) << 20
path = os.path.join(sys.argv[2] if len(sys.argv) > 2 else "/tmp", "copy-distance-%d.bin" % os.getpid())
piece = os.urandom(64 << 10)
chunk = 1 << 20
DISTANCES = [0, 1, 8, 16, 24, 31, 32, 48, 63, 64, 80, 256, 2048, 4000, 4096, 4112]


def write():
    descriptor = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    try:
        for offset in range(0, size, len(piece)):
            os.pwrite(descriptor, piece, offset)
    finally:
        os.close(descriptor)


def rate(descriptor, buffer, distance):
    """MB/s of reading the whole file, each 1 MiB from a page-aligned offset into `buffer` at `distance`."""
    target = buffer[distance:distance + chunk]
    start = time.perf_counter()
    got = 0
    for offset in range(0, size, chunk):  # bounded: the file's size in chunks
        got += os.preadv(descriptor, [target], offset)
    return got / (time.perf_counter() - start) / 1e6


write()
try:
    mapping = mmap.mmap(-1, chunk + 8192)  # page-aligned, so an offset into it is the distance
    buffer = memoryview(mapping)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        rate(descriptor, buffer, 0)  # the file's pages and the mapping's, touched once
        for distance in DISTANCES:
            best = max(rate(descriptor, buffer, distance) for _ in range(3))
            print(f"distance {distance:5d} bytes (mod 4096: {distance % 4096:4d}): {best:7.0f} MB/s", flush=True)
    finally:
        os.close(descriptor)
    large = bytearray(4 << 20)
    address = ctypes.addressof(ctypes.c_char.from_buffer(large))
    print(f"a new 4 MiB bytearray starts {address % 4096} bytes past a page boundary")
finally:
    os.unlink(path)
