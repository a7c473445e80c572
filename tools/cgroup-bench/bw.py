#!/usr/bin/env python3
"""O_DIRECT read bandwidth of a file, read the way staging-pread reads
experts: CHUNK-byte preads at random aligned offsets by WORKERS threads.

usage: bw.py FILE [WORKERS] [CHUNK_BYTES] [SECONDS]
prints GB/s (1e9 bytes per second)
"""
import mmap
import os
import random
import sys
import threading
import time

path = sys.argv[1]
workers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
chunk = int(sys.argv[3]) if len(sys.argv) > 3 else 12 << 20
seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 4.0
chunk = (chunk + 4095) // 4096 * 4096
size = os.stat(path).st_size
total = [0] * workers


def run(i):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, chunk)  # page-aligned, as O_DIRECT needs
    rng = random.Random(i)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        off = rng.randrange(0, (size - chunk) // 4096) * 4096
        total[i] += os.preadv(fd, [buf], off)
    os.close(fd)


start = time.monotonic()
ts = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(round(sum(total) / (time.monotonic() - start) / 1e9, 3))
