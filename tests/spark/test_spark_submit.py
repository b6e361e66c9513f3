"""examples/spark_job.py submitted to a standalone Spark cluster (a master and one worker started with pyspark's
own sbin/spark-daemon.sh), reading a 3-node quorumlog cluster: what runs past one machine, on one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections import Counter
from pathlib import Path

import pytest

import quorumlog
from quorumlog.local_ports import free_ports
from quorumlog.spark.local import LocalCluster, _log4j2_file, wait_until

from .helpers import kill_tree

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(600)]
# Four JVMs and their Python workers: most of its time is their start-up, 4-6 min beside a busy suite on 2 cores.
JOB_TIMEOUT_S = 420

REPO = Path(__file__).resolve().parents[2]
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    pyspark = pytest.importorskip("pyspark")
    return Path(pyspark.__file__).parent  # the pip package is a whole Spark distribution (bin/, sbin/, jars/)


def package_zip(dest: Path) -> Path:
    """The quorumlog package as --py-files ships it to the executors (pure Python: a zip cannot hold the
    compiled codecs, and the package runs without them)."""
    with zipfile.ZipFile(dest, "w") as z:
        for f in sorted((REPO / "quorumlog").rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".so":
                z.write(f, f.relative_to(REPO))
    return dest


class StandaloneSpark:
    """A master and one worker, as sbin/start-master.sh and start-worker.sh start them (spark-daemon.sh; the pip
    package ships that script but not those two wrappers), on 127.0.0.1, free ports, small memory."""

    def __init__(self, home: Path, work: Path) -> None:
        self.home = home
        self.work = work
        self.port, self.ui_port, self.worker_port = free_ports(3)
        self.env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_LOG_DIR": str(work / "logs"), "SPARK_PID_DIR": str(work / "pids"),
                    "SPARK_WORKER_DIR": str(work / "worker"), "SPARK_IDENT_STRING": f"ql{os.getpid()}",
                    "SPARK_DAEMON_MEMORY": "256m", "PYSPARK_PYTHON": sys.executable,
                    "SPARK_DAEMON_JAVA_OPTS": f"-Dlog4j2.configurationFile=file:{_log4j2_file()}"}

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _daemon(self, action: str, cls: str, *args: str) -> None:
        subprocess.run(["bash", str(self.home / "sbin" / "spark-daemon.sh"), action, cls, "1", *args],
                       env=self.env, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        self._daemon("start", MASTER, "--host", "127.0.0.1", "--port", str(self.port), "--webui-port",
                     str(self.ui_port))
        self._daemon("start", WORKER, "--host", "127.0.0.1", "--port", str(self.worker_port), "--webui-port", "0",
                     "--cores", "2", "--memory", "1g", self.url)  # (it retries until the master listens)

    def wait_ready(self) -> None:
        wait_until(self._worker_alive, 120, interval_s=0.5, what="the worker registered with the master")

    def _worker_alive(self) -> bool:
        try:  # the master's web UI answers with its state as JSON (its logs say only errors here)
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                return json.load(r).get("aliveworkers", 0) >= 1
        except OSError:
            return False

    def logs(self, cls: str) -> str:
        return "".join(p.read_text(errors="replace") for p in (self.work / "logs").glob(f"*{cls}*.out"))

    def stop(self) -> None:
        for cls in (WORKER, MASTER):
            pid_file = next((self.work / "pids").glob(f"*{cls}*.pid"), None)
            try:
                self._daemon("stop", cls)
            except subprocess.SubprocessError:
                pass
            if pid_file is not None and pid_file.exists():  # the stop script gave up, or failed: by pid
                try:
                    pid = int(pid_file.read_text())
                    if cls.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():  # (still that daemon)
                        os.kill(pid, signal.SIGKILL)
                except (OSError, ValueError):
                    pass


def test_spark_submit_runs_the_example_job_on_a_standalone_cluster(tmp_path):
    home = spark_home()
    spark = StandaloneSpark(home, tmp_path / "spark")
    cluster = None
    t0 = time.monotonic()
    try:
        spark.start()  # the JVMs start while the cluster comes up and is written to
        cluster = LocalCluster.up(tmp_path / "ql")
        keys = [f"k{i % 7}" for i in range(500)]
        with quorumlog.connect(cluster.peers) as c:
            c.append_batch([json.dumps({"key": k, "n": i}).encode() for i, k in enumerate(keys)])
        cli = [sys.executable, "-m", "quorumlog.cli"]
        subprocess.run([*cli, "topic", "create", "t", "--queues", "2", "--peers", cluster.peers], check=True,
                       capture_output=True, timeout=60)
        sent = Counter()
        for key, n in (("a", 3), ("b", 5)):
            subprocess.run([*cli, "produce", "--topic", "t", "--key", key, "--peers", cluster.peers,
                            *(f"{key}{i}" for i in range(n))], check=True, capture_output=True, timeout=60)
            sent[key] = n
        t_data = time.monotonic()
        spark.wait_ready()
        t_ready = time.monotonic()
        out = tmp_path / "counts"
        argv = [str(home / "bin" / "spark-submit"), "--master", spark.url, "--executor-memory", "512m",
                "--driver-memory", "512m", "--conf", "spark.ui.enabled=false",
                "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.sql.shuffle.partitions=2",
                "--driver-java-options", f"-Dlog4j2.configurationFile=file:{_log4j2_file()}",
                "--py-files", str(package_zip(tmp_path / "quorumlog.zip")), str(REPO / "examples" / "spark_job.py"),
                "--peers", cluster.peers, "--group", cluster.group, "--topic", "t", "--output", str(out)]
        with open(tmp_path / "job.out", "w") as job_out, open(tmp_path / "job.err", "w") as job_err:
            job = subprocess.Popen(argv, env={**spark.env, "PYSPARK_DRIVER_PYTHON": sys.executable},
                                   stdout=job_out, stderr=job_err, text=True)
            try:
                code = job.wait(JOB_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                code = "timed out"
            finally:
                if job.poll() is None:
                    kill_tree(job.pid)  # spark-submit's JVM and the Python driver under it
                    job.wait(10)
        t_job = time.monotonic()
        print(f"cluster up and written: {t_data - t0:.1f} s; Spark ready {t_ready - t_data:.1f} s later; "
              f"spark-submit: {t_job - t_ready:.1f} s")  # (where the wall time goes: -s, or a failure)
        job_stdout = (tmp_path / "job.out").read_text()
        assert code == 0, f"spark-submit: {code}\n{job_stdout[-3000:]}\n{(tmp_path / 'job.err').read_text()[-5000:]}"
        import pyarrow.parquet as pq

        rows = pq.read_table(out).to_pylist()
        got = {(r["source"], r["key"]): r["count"] for r in rows}
        want = {**{(f"group {cluster.group}", k): n for k, n in Counter(keys).items()},
                **{("topic t", k): n for k, n in sent.items()}}
        assert got == want
        assert "group default" in job_stdout  # (the job prints its table too)
    except BaseException:
        print(spark.logs(MASTER)[-3000:], spark.logs(WORKER)[-3000:])
        raise
    finally:
        spark.stop()
        if cluster is not None:
            cluster.down()
