"""pybroker's PySpark connector: Spark's Kafka source and sink as a Python data source.

    df.write.format("pybroker").mode("append")
      .option("kafka.bootstrap.servers", "host:9092").option("topic", "t").save()
    spark.read.format("pybroker").option("kafka.bootstrap.servers", ...)
      .option("subscribe", "t").load()

Installed with `pip install 'pybroker[spark]'`; the top-level module `pyspark_pybroker`
lets Spark find the format without a register call. `register(spark)` does it by hand.
It speaks the Kafka protocol through pybroker.client (never the broker's own code), so
it works against pybroker and any Kafka-compatible broker. See source.py, writer.py,
reader.py and options.py.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMAT", "PyBrokerDataSource", "register"]

FORMAT = "pybroker"


def __getattr__(name: str) -> Any:
    # Lazily, so that spark_connector.options and friends import without pyspark.
    if name == "PyBrokerDataSource":
        from spark_connector.source import PyBrokerDataSource

        return PyBrokerDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark: Any) -> None:
    """Register the data source with a SparkSession (auto-registration makes this optional)."""
    from spark_connector.source import PyBrokerDataSource

    spark.dataSource.register(PyBrokerDataSource)
