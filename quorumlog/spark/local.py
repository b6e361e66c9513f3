"""A local Spark session and a local 3-node cluster, as the demo, the benchmark and the tests start them.

The session is quiet and offline (no UI, no fixed ports, no downloads) and its Python workers run this
interpreter, which imports the installed quorumlog. The cluster is started and stopped through the CLI
(`quorumlog cluster up/down`), exactly as a user would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..local_ports import free_base_port
from ..transport.tls import TLS_CA_ENV

# Small segments: a node reserves a whole segment ahead of use, and 1 GiB ones cost disk.
CLUSTER_SETTINGS = ("data_segment_size=67108864", "index_segment_size=8388608")
CLUSTER_UP_TIMEOUT_S = 60

# Spark's JVM logs errors only (its default profile prints INFO/WARN chatter on every start).
LOG4J2_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _log4j2_file() -> str:
    import tempfile

    path = Path(tempfile.gettempdir()) / "quorumlog-spark-log4j2.properties"
    if not path.exists() or path.read_text() != LOG4J2_PROPERTIES:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(LOG4J2_PROPERTIES)
        os.replace(tmp, path)
    return str(path)


def spark_env() -> None:
    """Environment every Spark process needs: workers on this venv's interpreter, loopback only."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def spark_session(app_name: str = "quorumlog", master: str | None = None, conf: dict[str, str] | None = None):
    """A SparkSession (master from `master`, else $SPARK_MASTER, else local[2]) with format("quorumlog")."""
    spark_env()
    from pyspark.sql import SparkSession

    from . import register

    builder = (SparkSession.builder.appName(app_name)
               .master(master or os.environ.get("SPARK_MASTER", "local[2]"))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_log4j2_file()}"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


@dataclass
class LocalCluster:
    """A cluster started with `quorumlog cluster up` in data_dir (its cluster.json says the rest)."""

    data_dir: Path
    doc: dict

    @property
    def peers(self) -> str:
        return self.doc["peers"]

    @property
    def group(self) -> str:
        return self.doc.get("group", "default")

    def node(self, node_id: str) -> dict:
        return next(n for n in self.doc["nodes"] if n["id"] == node_id)

    def pid(self, node_id: str) -> int:
        return int(self.node(node_id)["pid"])

    def kill(self, node_id: str, sig: int = signal.SIGKILL) -> None:
        os.kill(self.pid(node_id), sig)

    @classmethod
    def up(cls, data_dir: str | Path, nodes: int = 3, settings: tuple[str, ...] = CLUSTER_SETTINGS, *,
           tls: bool = False, http: bool = False, doors: tuple[str, ...] = ()) -> "LocalCluster":
        """tls: `cluster up --tls` (this process's clients then verify the nodes with its CA); http: an HTTP
        port per node (/, /status, /metrics); doors: front doors on every node ("rocketmq", "kafka"), their
        ports in cluster.json (`door_endpoints`). A token, if any, comes from QUORUMLOG_TOKEN."""
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        blocks = 1 + bool(http) + len(doors)
        base = free_base_port(blocks * nodes)
        argv = [sys.executable, "-m", "quorumlog.cli", "cluster", "up", "--nodes", str(nodes), "--data-dir",
                str(data_dir), "--base-port", str(base), "--json"]
        if tls:
            argv.append("--tls")
        if http:
            argv += ["--http-base-port", str(base + nodes)]
        for i, kind in enumerate(doors):
            argv += [f"--{kind}-base-port", str(base + (1 + bool(http) + i) * nodes)]
        for kv in settings:
            argv += ["--set", kv]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=CLUSTER_UP_TIMEOUT_S + 30)
        if res.returncode != 0:
            raise RuntimeError(f"cluster up failed ({res.returncode}): {res.stderr[-2000:]}")
        doc = json.loads((data_dir / "cluster.json").read_text())
        if doc.get("tls_ca"):
            os.environ[TLS_CA_ENV] = doc["tls_ca"]  # (Spark's workers, started after this, inherit it)
        return cls(data_dir, doc)

    def door_endpoints(self, kind: str) -> str:
        """"host:port,..." of every node's `kind` front door ("rocketmq", "kafka")."""
        from ..doors import door_endpoints
        return door_endpoints(self.doc, kind)

    def down(self) -> None:
        subprocess.run([sys.executable, "-m", "quorumlog.cli", "cluster", "down", "--data-dir", str(self.data_dir)],
                       capture_output=True, text=True, timeout=60)
        # Whatever cluster down could not stop (a SIGSTOPped node ignores SIGTERM until continued).
        for n in self.doc.get("nodes", []):
            _kill_if_ours(int(n["pid"]), n["data_dir"])


def _kill_if_ours(pid: int, data_dir: str) -> None:
    """SIGKILL pid only if it still is that node (its command line names its data dir): pids get reused."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if data_dir.encode() not in cmdline:
        return
    try:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def wait_until(predicate, timeout_s: float, interval_s: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s} s")
        time.sleep(interval_s)
