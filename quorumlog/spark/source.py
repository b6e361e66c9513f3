"""format("quorumlog"): the DataSource Spark instantiates, and `register(spark)`."""

from __future__ import annotations

import logging

from pyspark.sql.datasource import DataSource

from .arrow import spark_schema
from .options import OptionError, SourceOptions

log = logging.getLogger(__name__)

FORMAT = "quorumlog"


class QuorumLogDataSource(DataSource):
    """Reads committed entries as (index, term, timestamp, body); writes a `body` column as entries."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self):
        if self._opts().topic is not None:
            from .topic import topic_spark_schema

            return topic_spark_schema()
        return spark_schema()

    def _opts(self) -> SourceOptions:
        return SourceOptions.parse(self.options)

    def reader(self, schema):
        opts = self._opts()
        if opts.topic is not None:
            from .topic import TopicBatchReader

            return TopicBatchReader(opts)
        if opts.ledger_stream is not None:
            from .ledger_stream import LedgerStreamBatchReader

            return LedgerStreamBatchReader(opts)
        from .batch import QuorumLogBatchReader

        return QuorumLogBatchReader(opts)

    def streamReader(self, schema):
        opts = self._opts()
        if opts.topic is not None:
            from .topic import TopicStreamReader

            return TopicStreamReader(opts)
        if opts.ledger_stream is not None:
            from .ledger_stream import LedgerStreamStreamReader

            return LedgerStreamStreamReader(opts)
        from .stream import QuorumLogStreamReader

        return QuorumLogStreamReader(opts)

    def writer(self, schema, overwrite: bool):
        _check_write(schema, overwrite)
        opts = self._opts()
        if opts.topic is not None:
            from .topic_write import TopicWriter

            return TopicWriter(opts)
        from .write import QuorumLogWriter

        return QuorumLogWriter(_group_only(opts, "a write"))

    def streamWriter(self, schema, overwrite: bool):
        _check_write(schema, overwrite)
        opts = self._opts()
        if opts.topic is not None:
            from .topic_write import TopicStreamWriter

            return TopicStreamWriter(opts)
        from .write import QuorumLogStreamWriter

        return QuorumLogStreamWriter(_group_only(opts, "a streaming write"))


def _group_only(opts: SourceOptions, what: str) -> SourceOptions:
    if opts.ledger_stream is not None:
        raise OptionError(f"option ledgerStream: {what} of a ledger stream is not supported yet (reads are; "
                          f"write with quorumlog.LedgerClient.open_stream_writer)")
    return opts


def _check_write(schema, overwrite: bool) -> None:
    from pyspark.sql.types import BinaryType, StringType

    if overwrite:
        raise OptionError("a quorumlog log is append-only: use mode('append')")
    fields = {f.name: f.dataType for f in schema.fields}
    if not isinstance(fields.get("body"), (BinaryType, StringType)):
        raise OptionError(f"writing to quorumlog needs a `body` column of binary or string type; got "
                          f"{schema.simpleString()}")


def register(spark) -> None:
    """Make spark.read/readStream/write/writeStream .format("quorumlog") available in this session."""
    spark.dataSource.register(QuorumLogDataSource)
