"""What TLS and the token cost: the same cluster and workloads with plain TCP and with TLS + token.

    python bench/tls.py [--duration-s 5] [--warmup-s 1] [--reps 3]

Two `quorumlog cluster up --nodes 3 --flush sync` clusters in one run (one plain, one `--tls` with a token),
each measured with `quorumlog bench`: 64 writers of single 1 KiB appends (appends/s) and 4 writers of 1 MiB
append_batch calls (MB/s); the runs alternate plain / TLS `--reps` times (which goes first flips each time) and
the medians are compared. The page cache is emptied before each run (bench/results_file.py; --keep-page-cache
to skip): on this VM a cluster's MB/s otherwise depended on what ran before it.

Each run also records the CPU-seconds its nodes (/proc/PID/stat) and its generator (rusage) used, warm-up
included, and the batched workload's CPU-seconds per GB. With `openssl speed`'s AES-256-GCM rate per core the
summary gives the cipher's floor: what TLS would cost were the cipher its only work (a value crosses it six times:
client → leader → two followers, encrypted and decrypted), on a cluster as CPU-bound as this one.
Results: bench/results/tls-<date>.json. Target: TLS costs at most 20% of either figure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from results_file import (children_cpu_s, cluster_node_pids, empty_page_cache,  # noqa: E402  (bench/results_file.py)
                          process_cpu_s)

QUORUMLOG = os.path.join(os.path.dirname(sys.executable), "quorumlog")
TOKEN = "bench-token-0123456789abcdef"
WORKLOADS = {"single_64_writers": (64, 1), "batched_4_writers": (4, 1024)}
CIPHER_PASSES = 6  # per value byte: the client encrypts; the leader decrypts, encrypts twice; each follower decrypts


def _up(data_dir: str, port: int, tls: bool) -> None:
    argv = [QUORUMLOG, "cluster", "up", "--nodes", "3", "--data-dir", data_dir, "--flush", "sync",
            "--base-port", str(port), "--set", "data_segment_size=67108864"] + (["--tls"] if tls else [])
    subprocess.run(argv, check=True, timeout=120, stdout=subprocess.DEVNULL, env=_env(tls))


def _env(tls: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("QUORUMLOG_TOKEN", "QUORUMLOG_TLS_CA")}
    if tls:
        env["QUORUMLOG_TOKEN"] = TOKEN
    return env


def _aes_gcm_bytes_per_s() -> float | None:
    """AES-256-GCM on 16 KiB records, one core (`openssl speed`); None if openssl is not there."""
    try:
        out = subprocess.run(["openssl", "speed", "-evp", "aes-256-gcm", "-bytes", "16384", "-seconds", "2"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"^AES-256-GCM\s+([\d.]+)k", out, re.M | re.I)
    return float(m.group(1)) * 1000 if m else None


def _bench(data_dir: str, tls: bool, writers: int, batch: int, a) -> dict:
    pids = cluster_node_pids(data_dir).values()
    nodes, generator = sum(map(process_cpu_s, pids)), children_cpu_s()
    d = _bench_run(data_dir, tls, writers, batch, a)
    d["cpu_s"] = {"nodes": round(sum(map(process_cpu_s, pids)) - nodes, 2),
                  "generator": round(children_cpu_s() - generator, 2)}
    return d


def _bench_run(data_dir: str, tls: bool, writers: int, batch: int, a) -> dict:
    out = subprocess.run([QUORUMLOG, "bench", "--cluster", data_dir, "--writers", str(writers), "--batch", str(batch),
                          "--value-bytes", "1024", "--duration-s", str(a.duration_s), "--warmup-s", str(a.warmup_s),
                          "--json"], capture_output=True, text=True, timeout=a.duration_s + a.warmup_s + 120,
                         env=_env(tls))
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration-s", type=float, default=5.0)
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--keep-page-cache", action="store_true", help="do not empty the page cache before each run")
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="quorumlog-tls-bench-")
    dirs = {False: os.path.join(base, "plain"), True: os.path.join(base, "tls")}
    runs: dict = {name: {"plain": [], "tls": []} for name in WORKLOADS}
    try:
        _up(dirs[False], 27700, False)
        _up(dirs[True], 27710, True)
        for rep in range(a.reps):
            for name, (writers, batch) in WORKLOADS.items():
                # (the order flips each repetition: a drift of this shared machine within a repetition — its
                # page cache filling, say — would otherwise always fall on the same side)
                for tls in ((False, True) if rep % 2 == 0 else (True, False)):
                    page_cache = "kept" if a.keep_page_cache else empty_page_cache()
                    d = _bench(dirs[tls], tls, writers, batch, a)
                    # (CPU per GB: warm-up included, taken at the measured rate)
                    gb = d["mb_per_s"] * (a.duration_s + a.warmup_s) / 1000
                    runs[name]["tls" if tls else "plain"].append(
                        {"appends_per_s": d["appends_per_s"], "mb_per_s": d["mb_per_s"], "errors": d["errors"],
                         "p50_ms": d["latency_ms"]["p50"], "p99_ms": d["latency_ms"]["p99"], "cpu_s": d["cpu_s"],
                         "cpu_s_per_gb": round(sum(d["cpu_s"].values()) / gb, 2) if gb else None})
                    print(rep, name, "tls" if tls else "plain", runs[name]["tls" if tls else "plain"][-1],
                          flush=True)
    finally:
        for tls, d in dirs.items():
            subprocess.run([QUORUMLOG, "cluster", "down", "--data-dir", d], timeout=60, env=_env(tls),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(base, ignore_errors=True)
    summary = {}
    for name in WORKLOADS:
        key = "appends_per_s" if name.startswith("single") else "mb_per_s"
        plain = statistics.median(r[key] for r in runs[name]["plain"])
        tls = statistics.median(r[key] for r in runs[name]["tls"])
        summary[name] = {"metric": key, "plain": plain, "tls_and_token": tls, "ratio": round(tls / plain, 3),
                         "cost_pct": round(100 * (1 - tls / plain), 1), "within_20pct": tls >= 0.8 * plain}
        if key == "mb_per_s":
            per_gb = {side: statistics.median(r["cpu_s_per_gb"] for r in runs[name][side]) for side in ("plain", "tls")}
            summary[name]["cpu_s_per_gb"] = per_gb
            aes = _aes_gcm_bytes_per_s()
            if aes:
                cipher = CIPHER_PASSES * 1e9 / aes  # CPU-seconds per GB of values
                summary[name]["cipher"] = {
                    "aes_256_gcm_gb_per_s_per_core": round(aes / 1e9, 2), "cpu_s_per_gb": round(cipher, 2),
                    "floor_cost_pct": round(100 * (1 - per_gb["plain"] / (per_gb["plain"] + cipher)), 1),
                    "left_for_the_rest_at_20pct": round(per_gb["plain"] / 0.8 - per_gb["plain"] - cipher, 2),
                    "spent_on_the_rest": round(per_gb["tls"] - per_gb["plain"] - cipher, 2)}
    doc = {"bench": "TLS + token cost", "date_utc": dt.datetime.now(dt.timezone.utc)
           .strftime("%Y-%m-%dT%H:%MZ"), "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
           "setup": "quorumlog cluster up --nodes 3 --flush sync [--tls, QUORUMLOG_TOKEN]; quorumlog bench; "
                    f"{a.reps} alternating repetitions of {a.duration_s} s after {a.warmup_s} s warm-up, medians; "
                    f"page cache: {page_cache}",
           "command": "python bench/tls.py " + " ".join(sys.argv[1:]), "runs": runs, "summary": summary}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"tls-{dt.date.today().isoformat()}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
