"""One SparkSession per test process and one 3-node cluster (started with `quorumlog cluster up`)."""

from __future__ import annotations

import pytest

from quorumlog.spark.local import LocalCluster, spark_session


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    # local[2,3]: two threads, and a failed task is retried (plain local[N] never retries a task).
    session = spark_session("quorumlog-tests", master="local[2,3]",
                            conf={"spark.sql.execution.arrow.maxRecordsPerBatch": "2000"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    c = LocalCluster.up(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield c
    finally:
        c.down()
