"""Store benchmark: the raw disk and the FileStore measured in one run, side by side, with ratios.

    python bench/store.py [--dir D] [--quick] [--reps N]

Raw disk (the ceiling):
  - sequential: write the same total bytes as the store's 4096 x 1 KiB workload, in chunks of one batch's
    size, fdatasync after each chunk;
  - serial 4 KiB: write 4 KiB + fdatasync, one at a time.
  Sequential runs on a fresh growing file, on a fallocated one and on a zero-filled (already written) one.
  The target's ceiling is the better of the first two: writing that many *new* bytes, which is what a log
  does. The zero-filled file is an overwrite of written blocks (no extent conversion in the journal at each
  fdatasync); no append-only log on fresh space can reach it without recycling old segment files, so the store
  is also given as a fraction of it (`*_vs_overwrite`), for information. Serial 4 KiB runs on a growing and a
  zero-filled file; its ratio is taken against the better of the two.
Store: append_batch of 100 B and 1 KiB bodies at batch sizes 1, 64, 4096, flush() after every batch, on
  segments of 64 MiB so rollovers and the background zero-fill of the next segment fall inside the timing.
  Also (informational) 4096 x 1 KiB pipelined as the runtime drives it: flush() on a worker thread while the
  next batches are encoded; `_warm`: into one segment zero-filled before the timing, the footing
  raw_seq_prefilled has (what the store itself costs, without paying for its preallocation); `_sparse`:
  preallocate=False.
Codec: the header line and the JSON say whether the compiled record codec ran ("C (sse4.2)") or pure Python
  (QUORUMLOG_PURE_PYTHON=1, or the extension not built): run both back to back for a before/after.
CPU: append_batch of 4096-entry batches with flush off; the appending thread's CPU time (thread_time, so the
  allocator thread's zero-fill is not counted) per entry.

The machine is shared: every measurement is repeated (`--reps`), raw and store interleaved, and the JSON
records the median, min and max of each, the spread, and the load average before and after.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from quorumlog.store import FileStore, StoreConfig  # noqa: E402
from quorumlog.format import log_entry  # noqa: E402
from quorumlog.store.files import ZERO, create_segment_file  # noqa: E402
from quorumlog.store.segments import segment_name  # noqa: E402
from quorumlog.format.log_entry import HEADER_SIZE  # noqa: E402

MIB = 1024 * 1024
BENCH_SEGMENT_BYTES = 64 * MIB
TARGET_SEQ_RATIO = 0.60
TARGET_SERIAL_RATIO = 0.80
TARGET_CPU_US = 2.0


# -- raw disk --------------------------------------------------------------------------------------------
def _zero_fill(fd: int, size: int) -> None:
    z = bytes(MIB)
    off = 0
    while off < size:
        off += os.pwrite(fd, z[: min(MIB, size - off)], off)
    os.fsync(fd)


def raw_sequential(workdir: str, total_bytes: int, chunk_bytes: int, space: str) -> dict:
    """space: "grow" (a new file), "fallocated" (blocks reserved, unwritten) or "prefilled" (zero-filled)."""
    path = os.path.join(workdir, "raw-seq")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if space == "prefilled":
            _zero_fill(fd, total_bytes + chunk_bytes)
        elif space == "fallocated":
            os.posix_fallocate(fd, 0, total_bytes + chunk_bytes)
            os.fsync(fd)
        else:
            assert space == "grow", space
        chunk = os.urandom(chunk_bytes)
        t0 = time.perf_counter()
        off = 0
        while off < total_bytes:
            off += os.pwrite(fd, chunk, off)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return {"mb_per_s": off / MIB / elapsed, "seconds": elapsed}


def raw_serial(workdir: str, ops: int, prefilled: bool) -> dict:
    path = os.path.join(workdir, "raw-serial")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if prefilled:
            _zero_fill(fd, ops * 4096)
        block = os.urandom(4096)
        t0 = time.perf_counter()
        for i in range(ops):
            os.pwrite(fd, block, i * 4096)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return {"ops_per_s": ops / elapsed, "seconds": elapsed}


# -- store -----------------------------------------------------------------------------------------------
def bench_config(preallocate: bool = True) -> StoreConfig:
    return StoreConfig(data_segment_size_bytes=BENCH_SEGMENT_BYTES, preallocate=preallocate, disk_full_ratio=0.99)


def store_flushed(workdir: str, body_bytes: int, batch: int, batches: int, preallocate: bool = True,
                  warm: bool = False) -> dict:
    """warm: the data written lands in one segment zero-filled before the timing starts, as raw_seq_prefilled's
    file is (no rollover, no fallocated first segment, no background zero-fill of the next one): the store's
    own cost on the same footing as the raw ceiling. Informational; the target uses the cold run."""
    path = os.path.join(workdir, f"store-{body_bytes}-{batch}")
    shutil.rmtree(path, ignore_errors=True)
    config = bench_config(preallocate)
    if warm:
        seg_bytes = 2 * batch * batches * (body_bytes + HEADER_SIZE) + MIB
        config = StoreConfig(data_segment_size_bytes=seg_bytes, preallocate=True, disk_full_ratio=0.99)
        os.makedirs(os.path.join(path, "data"))
        create_segment_file(os.path.join(path, "data", segment_name(0)), seg_bytes, ZERO)
    store = FileStore(path, config)
    bodies = [os.urandom(body_bytes) for _ in range(batch)]
    try:
        t0 = time.perf_counter()
        for b in range(batches):
            store.append_batch(1, bodies, b)
            store.flush()
        elapsed = time.perf_counter() - t0
        assert store.durable_index == batch * batches - 1
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    entries = batch * batches
    stored = entries * (body_bytes + HEADER_SIZE)
    return {"entries_per_s": entries / elapsed, "batches_per_s": batches / elapsed,
            "mb_per_s": stored / MIB / elapsed, "seconds": elapsed}


def store_pipelined(workdir: str, body_bytes: int, batch: int, batches: int) -> dict:
    """How the node runtime drives the store: flush() loops on a worker thread (group commit) while the
    appending thread encodes the next batches; timed until the last entry is durable."""
    path = os.path.join(workdir, f"store-pipe-{body_bytes}-{batch}")
    shutil.rmtree(path, ignore_errors=True)
    store = FileStore(path, bench_config())
    bodies = [os.urandom(body_bytes) for _ in range(batch)]
    last = batch * batches - 1
    flushes = []
    wrote = threading.Event()

    def flusher() -> None:  # the runtime's committer: wait for writes, fsync everything written meanwhile
        while True:
            wrote.wait()
            wrote.clear()
            flushes.append(1)
            if store.flush() >= last:
                return

    try:
        t0 = time.perf_counter()
        t = threading.Thread(target=flusher)
        t.start()
        for b in range(batches):
            store.append_batch(1, bodies, b)
            wrote.set()
        t.join()
        elapsed = time.perf_counter() - t0
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    stored = batch * batches * (body_bytes + HEADER_SIZE)
    return {"mb_per_s": stored / MIB / elapsed, "entries_per_s": batch * batches / elapsed,
            "flushes": len(flushes)}


def store_cpu(workdir: str, body_bytes: int, batch: int, batches: int) -> dict:
    path = os.path.join(workdir, f"store-cpu-{body_bytes}")
    shutil.rmtree(path, ignore_errors=True)
    store = FileStore(path, StoreConfig(disk_full_ratio=0.99))  # default 1 GiB segments: no rollover inside
    bodies = [os.urandom(body_bytes) for _ in range(batch)]
    try:
        store.append_batch(1, bodies, 0)  # warm
        r0 = resource.getrusage(resource.RUSAGE_THREAD)
        c0, t0 = time.thread_time(), time.perf_counter()
        for b in range(batches):
            store.append_batch(1, bodies, b)
        cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_THREAD)
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    entries = batch * batches
    # user = our encoding in Python; sys = the kernel copying into the page cache (grows with memory pressure
    # from other tenants, which is why both are reported).
    return {"cpu_us_per_entry": cpu / entries * 1e6, "wall_us_per_entry": wall / entries * 1e6,
            "user_us_per_entry": (r1.ru_utime - r0.ru_utime) / entries * 1e6,
            "sys_us_per_entry": (r1.ru_stime - r0.ru_stime) / entries * 1e6}


def store_read(workdir: str, body_bytes: int, total_bytes: int) -> dict:
    """read() in 1 MiB pushes over a log (zero-copy mmap views, every record CRC-checked) against os.pread
    of the same byte ranges (a copy, nothing checked): what serving a follower or a Spark scan costs."""
    path = os.path.join(workdir, f"store-read-{body_bytes}")
    shutil.rmtree(path, ignore_errors=True)
    store = FileStore(path, StoreConfig(disk_full_ratio=0.99))
    bodies = [os.urandom(body_bytes) for _ in range(1024)]
    try:
        while store.bytes_between(0, store.end_index) < total_bytes if store.end_index >= 0 else True:
            store.append_batch(1, bodies, 0)
        store.flush()
        ranges = []
        t0 = time.perf_counter()
        start, n_bytes = 0, 0
        while start <= store.end_index:
            r = store.read(start, MIB)
            n_bytes += r.size_bytes
            ranges.append((r.first_index, r.size_bytes))
            start = r.last_index + 1
        read_s = time.perf_counter() - t0
        seg = store._data[0]
        t0 = time.perf_counter()
        for first, size in ranges:
            pos = store._unit(first)[0]
            os.pread(seg.writable_fd(), size, pos - seg.start)
        pread_s = time.perf_counter() - t0
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    return {"read_mb_per_s": n_bytes / MIB / read_s, "pread_mb_per_s": n_bytes / MIB / pread_s}


# -- running and reporting -------------------------------------------------------------------------------
def summarize(samples: list[dict], key: str) -> dict:
    values = [s[key] for s in samples]
    med = statistics.median(values)
    return {"median": med, "min": min(values), "max": max(values),
            "spread": (max(values) - min(values)) / med if med else 0.0, "samples": values}


def fs_type(path: str) -> str:
    try:
        out = subprocess.run(["df", "-T", path], capture_output=True, text=True, timeout=10).stdout.splitlines()
        return out[1].split()[1]
    except Exception:  # informational only
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None, help="where to write (a real disk, not tmpfs); default: system temp")
    ap.add_argument("--quick", action="store_true", help="smaller workloads, 3 repetitions")
    ap.add_argument("--reps", type=int, default=None, help="repetitions of every measurement")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/store-<date>.json)")
    args = ap.parse_args()

    reps = args.reps or (3 if args.quick else 7)
    seq_total = (48 if args.quick else 128) * MIB
    serial_ops = 300 if args.quick else 1000
    flushed_batches = {1: serial_ops, 64: 200 if args.quick else 600}
    cpu_batches = 40 if args.quick else 100
    workdir = tempfile.mkdtemp(prefix="quorumlog-bench-", dir=args.dir)
    load_before = os.getloadavg()
    started = time.time()
    print(f"bench/store.py: dir={workdir} fs={fs_type(workdir)} reps={reps} quick={args.quick} "
          f"load={load_before[0]:.2f},{load_before[1]:.2f},{load_before[2]:.2f} cpus={os.cpu_count()} "
          f"codec={log_entry.compiled_codec() or 'pure Python'}", flush=True)

    big_batch_bytes = 4096 * (1024 + HEADER_SIZE)
    runs: dict[str, list[dict]] = {}

    def record(name: str, result: dict) -> None:
        runs.setdefault(name, []).append(result)

    try:
        for rep in range(reps):
            # Interleaved: a raw run, then the store workloads it is compared with, then the other raw runs.
            for space in ("grow", "fallocated", "prefilled"):
                record(f"raw_seq_{space}", raw_sequential(workdir, seq_total, big_batch_bytes, space))
            for body in (1024, 100):
                batches = seq_total // (4096 * (body + HEADER_SIZE))
                record(f"store_{body}B_x4096", store_flushed(workdir, body, 4096, max(batches, 4)))
            record("store_1024B_x4096_pipelined",
                   store_pipelined(workdir, 1024, 4096, max(seq_total // big_batch_bytes, 4)))
            record("store_1024B_x4096_warm",
                   store_flushed(workdir, 1024, 4096, max(seq_total // big_batch_bytes, 4), warm=True))
            record("store_1024B_x4096_sparse",
                   store_flushed(workdir, 1024, 4096, max(seq_total // big_batch_bytes, 4), preallocate=False))
            record("raw_serial_grow", raw_serial(workdir, serial_ops, prefilled=False))
            record("raw_serial_prefilled", raw_serial(workdir, serial_ops, prefilled=True))
            for body in (100, 1024):
                for batch in (1, 64):
                    record(f"store_{body}B_x{batch}", store_flushed(workdir, body, batch, flushed_batches[batch]))
            for body in (100, 1024):
                record(f"cpu_{body}B_x4096", store_cpu(workdir, body, 4096, cpu_batches))
                record(f"read_{body}B", store_read(workdir, body, (16 if args.quick else 64) * MIB))
            print(f"  rep {rep + 1}/{reps} done, load={os.getloadavg()[0]:.2f}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    load_after = os.getloadavg()
    s = {name: {k: summarize(v, k) for k in v[0] if k != "seconds"} for name, v in runs.items()}
    seq_ceiling = max(s["raw_seq_grow"]["mb_per_s"]["median"], s["raw_seq_fallocated"]["mb_per_s"]["median"])
    serial_ceiling = max(s["raw_serial_grow"]["ops_per_s"]["median"], s["raw_serial_prefilled"]["ops_per_s"]["median"])

    def paired(store_name: str, key: str, raw_names: tuple[str, ...], raw_key: str) -> dict:
        """Store vs raw within each repetition (they ran back to back), then the median over repetitions:
        drift in the machine's load hits both sides of a pair alike."""
        ratios = [st[key] / max(runs[name][r][raw_key] for name in raw_names)
                  for r, st in enumerate(runs[store_name])]
        return summarize([{"ratio": x} for x in ratios], "ratio")

    seq_raw = ("raw_seq_grow", "raw_seq_fallocated")
    serial_raw = ("raw_serial_grow", "raw_serial_prefilled")
    ratios = {
        "store_1024B_x4096": paired("store_1024B_x4096", "mb_per_s", seq_raw, "mb_per_s"),
        "store_100B_x4096": paired("store_100B_x4096", "mb_per_s", seq_raw, "mb_per_s"),
        "store_1024B_x4096_warm": paired("store_1024B_x4096_warm", "mb_per_s", seq_raw, "mb_per_s"),
        "store_1024B_x4096_sparse": paired("store_1024B_x4096_sparse", "mb_per_s", seq_raw, "mb_per_s"),
        "store_1024B_x4096_pipelined": paired("store_1024B_x4096_pipelined", "mb_per_s", seq_raw, "mb_per_s"),
        "store_1024B_x4096_vs_overwrite": paired("store_1024B_x4096", "mb_per_s", ("raw_seq_prefilled",), "mb_per_s"),
        "store_1024B_x4096_warm_vs_overwrite": paired("store_1024B_x4096_warm", "mb_per_s", ("raw_seq_prefilled",),
                                                      "mb_per_s"),
        "store_100B_x1": paired("store_100B_x1", "batches_per_s", serial_raw, "ops_per_s"),
        "store_1024B_x1": paired("store_1024B_x1", "batches_per_s", serial_raw, "ops_per_s"),
        "store_100B_x64": paired("store_100B_x64", "batches_per_s", serial_raw, "ops_per_s"),
        "store_1024B_x64": paired("store_1024B_x64", "batches_per_s", serial_raw, "ops_per_s"),
    }

    rows = []
    for name in ("raw_seq_grow", "raw_seq_fallocated", "raw_seq_prefilled"):
        rows.append((name, f"{s[name]['mb_per_s']['median']:.1f} MB/s", "", s[name]["mb_per_s"]["spread"]))
    for name in ("store_1024B_x4096", "store_100B_x4096", "store_1024B_x4096_warm", "store_1024B_x4096_sparse",
                 "store_1024B_x4096_pipelined"):
        v = s[name]["mb_per_s"]
        rows.append((name, f"{v['median']:.1f} MB/s ({s[name]['entries_per_s']['median']:.0f} e/s)",
                     f"{ratios[name]['median']:.0%} of raw seq", v["spread"]))
    for name in ("store_1024B_x4096", "store_1024B_x4096_warm"):
        rows.append((f"{name} vs overwrite", "(same runs as above)",
                     f"{ratios[name + '_vs_overwrite']['median']:.0%} of prefilled", 0.0))
    for name in ("raw_serial_grow", "raw_serial_prefilled"):
        rows.append((name, f"{s[name]['ops_per_s']['median']:.0f} op/s", "", s[name]["ops_per_s"]["spread"]))
    for name in ("store_100B_x1", "store_1024B_x1", "store_100B_x64", "store_1024B_x64"):
        v = s[name]["batches_per_s"]
        rows.append((name, f"{v['median']:.0f} batch/s ({s[name]['entries_per_s']['median']:.0f} e/s, "
                     f"{s[name]['mb_per_s']['median']:.1f} MB/s)", f"{ratios[name]['median']:.0%} of raw serial",
                     v["spread"]))
    for name in ("cpu_100B_x4096", "cpu_1024B_x4096"):
        v = s[name]["cpu_us_per_entry"]
        rows.append((name, f"{v['median']:.2f} us/entry CPU (user {s[name]['user_us_per_entry']['median']:.2f}"
                     f" + sys {s[name]['sys_us_per_entry']['median']:.2f})",
                     f"wall {s[name]['wall_us_per_entry']['median']:.2f} us", v["spread"]))
    for name in ("read_100B", "read_1024B"):
        v = s[name]["read_mb_per_s"]
        rows.append((name, f"{v['median']:.0f} MB/s read() mmap+CRC",
                     f"pread copy {s[name]['pread_mb_per_s']['median']:.0f} MB/s", v["spread"]))
    width = max(len(r[0]) for r in rows)
    print()
    print(f"{'workload':{width}}  {'median':44}  {'ratio (paired, median)':22}  spread(max-min)/median")
    for name, val, ratio, spread in rows:
        print(f"{name:{width}}  {val:44}  {ratio:22}  {spread:.0%}")

    targets = {
        "seq_4096x1KiB_vs_raw_seq": {
            "ratio": ratios["store_1024B_x4096"]["median"], "target": TARGET_SEQ_RATIO,
            "ratio_of_medians": s["store_1024B_x4096"]["mb_per_s"]["median"] / seq_ceiling,
            "ceiling": "new space: max(raw_seq_grow, raw_seq_fallocated)",
            "ratio_vs_overwrite_ceiling": ratios["store_1024B_x4096_vs_overwrite"]["median"]},
        "single_entry_100B_vs_raw_serial": {
            "ratio": ratios["store_100B_x1"]["median"], "target": TARGET_SERIAL_RATIO,
            "ratio_of_medians": s["store_100B_x1"]["batches_per_s"]["median"] / serial_ceiling},
        "single_entry_1KiB_vs_raw_serial": {
            "ratio": ratios["store_1024B_x1"]["median"], "target": TARGET_SERIAL_RATIO,
            "ratio_of_medians": s["store_1024B_x1"]["batches_per_s"]["median"] / serial_ceiling},
        "cpu_us_per_entry_100B": {"value": s["cpu_100B_x4096"]["cpu_us_per_entry"]["median"], "target": TARGET_CPU_US},
        "cpu_us_per_entry_1KiB": {"value": s["cpu_1024B_x4096"]["cpu_us_per_entry"]["median"], "target": TARGET_CPU_US},
    }
    for t in targets.values():
        t["met"] = t["ratio"] >= t["target"] if "ratio" in t else t["value"] <= t["target"]
    print()
    for name, t in targets.items():
        got = f"{t['ratio']:.0%}" if "ratio" in t else f"{t['value']:.2f} us"
        want = f">= {t['target']:.0%}" if "ratio" in t else f"<= {t['target']} us"
        print(f"target {name:34} {got:>9}  ({want})  {'MET' if t['met'] else 'NOT MET'}")
    spreads = [m["spread"] for w in s.values() for m in w.values()]
    noise = {"load_before": load_before, "load_after": load_after, "max_spread": max(spreads),
             "median_spread": statistics.median(spreads)}
    print(f"\nnoise: load {load_before[0]:.1f} -> {load_after[0]:.1f} on {os.cpu_count()} cpus; spread of repeated "
          f"runs median {noise['median_spread']:.0%}, max {noise['max_spread']:.0%}")

    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"store-{dt.date.today().isoformat()}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    doc = {
        "bench": "store", "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "started_utc": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(),
        "seconds": time.time() - started, "quick": args.quick, "reps": reps,
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                    "fs": fs_type(tempfile.gettempdir() if args.dir is None else args.dir)},
        "flush_mode": "fdatasync per batch (durable)",
        # "C (sse4.2)" / "C (table)": the compiled record codec; "pure Python": missing or QUORUMLOG_PURE_PYTHON=1
        "codec": log_entry.compiled_codec() or "pure Python",
        "workload": {"seq_total_bytes": seq_total, "serial_ops": serial_ops, "segment_bytes": BENCH_SEGMENT_BYTES,
                     "flushed_batches": flushed_batches, "cpu_batches": cpu_batches},
        "results": s, "paired_ratios": ratios, "targets": targets, "noise": noise,
    }
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
