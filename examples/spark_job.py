"""A Spark job over quorumlog: messages per key, from a group's entries and/or a topic's messages.

    spark-submit --master spark://HOST:7077 --py-files quorumlog.zip examples/spark_job.py \
        --peers n0=10.0.0.1:7001,n1=10.0.0.2:7001,n2=10.0.0.3:7001 --group orders --topic t --output /data/counts

A group's entries are read as JSON objects and counted by their "key" field; a topic's messages by their
message key. The result (source, key, count) is printed and, with --output, written as parquet. The driver
and the executors need the `quorumlog` package (installed, or shipped with --py-files) and a route to the
nodes; with TLS and a token, set QUORUMLOG_TLS_CA and QUORUMLOG_TOKEN on both (spark.executorEnv.*).
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import quorumlog.spark


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peers", required=True, help="the nodes, n0=host:port,...")
    p.add_argument("--group", help="a group whose entries are JSON objects with a \"key\" field")
    p.add_argument("--topic", help="a topic: its messages are counted by message key")
    p.add_argument("--output", help="write the counts here as parquet (else only print them)")
    args = p.parse_args(argv)
    if not (args.group or args.topic):
        p.error("give --group, --topic or both")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    spark = SparkSession.builder.appName("quorumlog-counts").getOrCreate()
    quorumlog.spark.register(spark)  # format("quorumlog")

    def read(**options):
        return spark.read.format("quorumlog").option("peers", args.peers).options(**options).load()

    counts = []
    if args.group:
        entries = read(group=args.group)
        counts.append(entries.where(F.length("body") > 0)  # (a new leader's no-op entry has an empty body)
                      .select(F.get_json_object(F.col("body").cast("string"), "$.key").alias("key"))
                      .groupBy("key").count().withColumn("source", F.lit(f"group {args.group}")))
    if args.topic:
        messages = read(topic=args.topic)
        counts.append(messages.groupBy("key").count().withColumn("source", F.lit(f"topic {args.topic}")))
    result = counts[0] if len(counts) == 1 else counts[0].unionByName(counts[1])
    result = result.select("source", "key", "count").orderBy("source", "key").cache()  # (two actions below)
    result.show(truncate=False)
    if args.output:
        result.write.mode("overwrite").parquet(args.output)
    spark.stop()


if __name__ == "__main__":
    main()
