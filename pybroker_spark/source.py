"""The data source Spark sees: `format("pybroker")` for read, write, readStream, writeStream.

Every method here runs on the driver (in Spark's planner worker) and only parses options,
checks the input schema and reaches the broker once, so that bad input fails the job
before any task starts; the work happens in reader.py / writer.py on the executors.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from pybroker_spark import FORMAT  # "kafka" is Spark's own: registering it fails
from pybroker_spark.options import OptionError, parse_read_options, parse_write_options

__all__ = ["PyBrokerDataSource"]

_READ_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                "timestamp timestamp, timestampType int")
_HEADERS = ", headers array<struct<key: string, value: binary>>"


class PyBrokerDataSource(DataSource):
    """Spark's Kafka source and sink, spoken over the Kafka protocol by pybroker's client."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return _READ_SCHEMA + (_HEADERS if include else "")

    def reader(self, schema: StructType):  # type: ignore[no-untyped-def]
        from pybroker_spark.reader import PyBrokerReader

        return PyBrokerReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType):  # type: ignore[no-untyped-def]  # noqa: N802
        from pybroker_spark.reader import PyBrokerStreamReader

        return PyBrokerStreamReader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):  # type: ignore[no-untyped-def]
        from pybroker_spark.writer import PyBrokerWriter

        return PyBrokerWriter(*self._write_setup(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool):  # type: ignore[no-untyped-def]  # noqa: N802
        from pybroker_spark.writer import PyBrokerStreamWriter

        return PyBrokerStreamWriter(*self._write_setup(schema, overwrite))

    def _write_setup(self, schema: StructType, overwrite: bool):  # type: ignore[no-untyped-def]
        from pybroker_spark.writer import check_broker, validate_input

        if overwrite:
            raise OptionError("Save mode Overwrite not allowed for Kafka. Allowed save modes are "
                              "Append (a topic is appended to, never replaced).")
        opts = parse_write_options(self.options)
        layout = validate_input(schema, opts)
        check_broker(opts)
        return opts, layout
