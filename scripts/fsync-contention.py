#!/usr/bin/env python3
"""Model of the SQLite store's two syncing threads, for docs/benchmarks.md item 21.

One thread writes 12 KiB to a 64 MiB "WAL" file and fdatasyncs it about
every millisecond (the sync thread at ~1 000 tasks/s); another writes 30
random 4 KiB pages plus one appended page to a "database" file and fsyncs
it every 25 ms (the checkpointer). With `lock`, both syncs take one lock,
so they never overlap. Prints the WAL sync latencies and how many took
over 10 ms.

Usage: scripts/fsync-contention.py free|lock SECONDS [DIR]
"""
import os
import random
import sys
import threading
import time

mode, duration = sys.argv[1], int(sys.argv[2])
directory = sys.argv[3] if len(sys.argv) > 3 else "."
wal = os.open(os.path.join(directory, "model-wal.bin"), os.O_RDWR | os.O_CREAT)
os.ftruncate(wal, 64 << 20)
os.fsync(wal)
db = os.open(os.path.join(directory, "model-db.bin"), os.O_RDWR | os.O_CREAT)
os.ftruncate(db, 16 << 20)
os.fsync(db)
lock = threading.Lock()
stop = time.time() + duration
wal_lat, db_lat = [], []


def synced(sync, fd, into):
    started = time.perf_counter()
    if mode == "lock":
        with lock:
            sync(fd)
    else:
        sync(fd)
    into.append(time.perf_counter() - started)


def wal_loop():
    offset, buf = 0, os.urandom(12288)
    while time.time() < stop:
        os.pwrite(wal, buf, offset)
        offset = (offset + len(buf)) % (64 << 20)
        synced(os.fdatasync, wal, wal_lat)
        time.sleep(0.0008)


def db_loop():
    buf, size = os.urandom(4096), 16 << 20
    while time.time() < stop:
        time.sleep(0.025)
        for _ in range(30):
            os.pwrite(db, buf, random.randrange(0, size // 4096) * 4096)
        os.pwrite(db, buf, size)
        size += 4096
        synced(os.fsync, db, db_lat)


threads = [threading.Thread(target=wal_loop), threading.Thread(target=db_loop)]
for t in threads:
    t.start()
for t in threads:
    t.join()
wal_lat.sort()
db_lat.sort()
ms = lambda x: x * 1e3
print(
    f"{mode}: {len(wal_lat)} WAL syncs, p50 {ms(wal_lat[len(wal_lat) // 2]):.2f} "
    f"p99 {ms(wal_lat[int(len(wal_lat) * 0.99)]):.2f} max {ms(wal_lat[-1]):.1f} ms, "
    f"over 10 ms: {sum(1 for x in wal_lat if x > 0.010)}; "
    f"db fsync p50 {ms(db_lat[len(db_lat) // 2]):.2f} max {ms(db_lat[-1]):.1f} ms"
)
for name in ("model-wal.bin", "model-db.bin"):
    os.remove(os.path.join(directory, name))
