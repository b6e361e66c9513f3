"""The PySpark data source: `register(spark)` then `spark.read.format("quorumlog")` (docs/interfaces.md "Spark").

Imports of pyspark stay inside the submodules that need them, so `quorumlog.spark.arrow` works without it.
"""

from __future__ import annotations


def register(spark) -> None:
    """Register format("quorumlog") with `spark` (a SparkSession)."""
    from .source import register as _register

    _register(spark)


__all__ = ["register"]
