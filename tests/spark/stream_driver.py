"""A streaming query in its own driver process, so a test can kill -9 it (and its JVM) mid-run.

    python -m tests.spark.stream_driver PEERS CHECKPOINT OUT START END MAX_ROWS

Reads [START, END) of the log with Trigger.AvailableNow in micro-batches of MAX_ROWS into a parquet file
sink at OUT (exactly once through its _spark_metadata log) and prints one line per finished micro-batch.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    peers, checkpoint, out, start, end, max_rows = argv
    from quorumlog.spark.local import spark_session

    spark = spark_session("quorumlog-stream-driver", master="local[2]")
    q = (spark.readStream.format("quorumlog").option("peers", peers)
         .option("startingIndex", start).option("endingIndex", end).option("maxRecordsPerTrigger", max_rows).load()
         .selectExpr("index", "body")
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    seen = 0
    while q.isActive:
        progress = q.recentProgress
        for p in progress[seen:]:
            print(f"{time.strftime('%H:%M:%S')} batch {p['batchId']} rows {p['numInputRows']}", flush=True)
        seen = len(progress)
        time.sleep(0.2)
    q.awaitTermination()
    for p in q.recentProgress[seen:]:
        print(f"batch {p['batchId']} rows {p['numInputRows']}", flush=True)
    print("done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
