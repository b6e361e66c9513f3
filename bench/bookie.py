"""Bookie benchmark: the journal's group commit against the disk's ceiling, in one run, with ratios.

    python bench/bookie.py [--dir D] [--reps N] [--out F]

Raw disk (the ceiling), as bench/store.py measures it:
  - serial: write 1 KiB + fdatasync, one at a time (what one add at a time can at best reach);
  - sequential: 512 KiB chunks (the journal's largest group) + fdatasync, into a new growing file.
Bookie (quorumlog/bookie/storage.py, flush mode: every add fsynced by the journal before its ack):
  - one writer, one add in flight (1 KiB): adds/s against the serial ceiling;
  - a window of 64 and of 1,024 adds in flight (1 KiB): adds/s and MB/s against the sequential ceiling —
    group commit turns many adds into one fdatasync.
Every measurement is repeated, raw and bookie interleaved; the JSON keeps median, min and max.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import deque

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from quorumlog.bookie import BookieConfig, BookieStorage  # noqa: E402

KIB, MIB = 1024, 1024 * 1024


def raw_serial(workdir: str, ops: int, size: int) -> float:
    path = os.path.join(workdir, "raw-serial")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(size)
    t0 = time.perf_counter()
    for i in range(ops):
        os.pwrite(fd, block, i * size)
        os.fdatasync(fd)
    elapsed = time.perf_counter() - t0
    os.close(fd)
    os.unlink(path)
    return ops / elapsed


def raw_sequential(workdir: str, total: int, chunk: int) -> float:
    path = os.path.join(workdir, "raw-seq")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    data = os.urandom(chunk)
    t0 = time.perf_counter()
    off = 0
    while off < total:
        off += os.pwrite(fd, data, off)
        os.fdatasync(fd)
    elapsed = time.perf_counter() - t0
    os.close(fd)
    os.unlink(path)
    return off / MIB / elapsed


def bookie_adds(workdir: str, adds: int, window: int, size: int) -> dict:
    path = os.path.join(workdir, "bookie")
    s = BookieStorage(path, BookieConfig())
    body = os.urandom(size)
    in_flight: deque = deque()
    t0 = time.perf_counter()
    for e in range(adds):
        in_flight.append(s.add_entry(1, e, body, lac=e - 1))
        if len(in_flight) >= window:
            in_flight.popleft().result(30)
    while in_flight:
        in_flight.popleft().result(30)
    elapsed = time.perf_counter() - t0
    fsyncs = s.journal.fsyncs
    s.close()
    shutil.rmtree(path)
    return {"adds_per_s": adds / elapsed, "mb_per_s": adds * size / MIB / elapsed, "fsyncs": fsyncs,
            "adds_per_fsync": adds / max(fsyncs, 1)}


def med(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 1), "min": round(min(xs), 1), "max": round(max(xs), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="quorumlog-bookie-bench-", dir=args.dir)
    runs: dict[str, list] = {}
    try:
        for _ in range(args.reps):
            runs.setdefault("raw_serial_1k_ops_per_s", []).append(raw_serial(workdir, 1000, KIB))
            runs.setdefault("bookie_window1_adds_per_s", []).append(bookie_adds(workdir, 1000, 1, KIB)["adds_per_s"])
            runs.setdefault("raw_seq_512k_mb_per_s", []).append(raw_sequential(workdir, 128 * MIB, 512 * KIB))
            for window in (64, 1024):
                r = bookie_adds(workdir, 40_000, window, KIB)
                runs.setdefault(f"bookie_window{window}_adds_per_s", []).append(r["adds_per_s"])
                runs.setdefault(f"bookie_window{window}_mb_per_s", []).append(r["mb_per_s"])
                runs.setdefault(f"bookie_window{window}_adds_per_fsync", []).append(r["adds_per_fsync"])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {k: med(v) for k, v in runs.items()}
    m = {k: v["median"] for k, v in summary.items()}
    ratios = {
        "window1_vs_raw_serial": round(m["bookie_window1_adds_per_s"] / m["raw_serial_1k_ops_per_s"], 2),
        "window1024_mb_vs_raw_seq": round(m["bookie_window1024_mb_per_s"] / m["raw_seq_512k_mb_per_s"], 2),
    }
    doc = {"date": dt.date.today().isoformat(), "flush": "every add fdatasync'ed by the journal before its ack",
           "body_bytes": KIB, "reps": args.reps, "load": os.getloadavg(), "results": summary, "ratios": ratios}
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"bookie-{doc['date']}.json")
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    for k, v in summary.items():
        print(f"{k:34} {v['median']:>12,.1f}  (min {v['min']:,.1f}, max {v['max']:,.1f})")
    print(f"ratios {ratios} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
