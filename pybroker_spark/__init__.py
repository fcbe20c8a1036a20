"""pybroker's PySpark connector: Spark's Kafka source and sink as a Python data source.

    df.write.format("pybroker").mode("append")
      .option("kafka.bootstrap.servers", "host:9092").option("topic", "t").save()
    spark.read.format("pybroker").option("kafka.bootstrap.servers", ...)
      .option("subscribe", "t").load()

Installed with `pip install 'pybroker[spark]'`; the top-level module `pyspark_pybroker`
lets Spark find the format without a register call. `register(spark)` does it by hand.

Importing this package before the SparkSession starts sets PYSPARK_PYTHON to this interpreter
(sys.executable) when the user has not set it: Spark starts its Python workers, including the
one that finds `pyspark_pybroker`, with PYSPARK_PYTHON or else `python3` from PATH, which for
`venv/bin/python job.py` without an activated venv is a Python without this package (Spark then
fails with DATA_SOURCE_NOT_FOUND). Spark reads the variable when the session's JVM and
SparkContext start, so a later import changes nothing and says so in one warning.
It speaks the Kafka protocol through pybroker.client (never the broker's own code), so
it works against pybroker and any Kafka-compatible broker. See source.py, writer.py,
reader.py and options.py.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

__all__ = ["FORMAT", "PyBrokerDataSource", "register"]

FORMAT = "pybroker"


def _use_this_python_for_workers() -> None:
    """PYSPARK_PYTHON := sys.executable unless set (see the module docstring for why)."""
    if os.environ.get("PYSPARK_PYTHON") or not sys.executable:
        return
    os.environ["PYSPARK_PYTHON"] = sys.executable
    context = getattr(sys.modules.get("pyspark"), "SparkContext", None)
    active = getattr(context, "_active_spark_context", None) if context is not None else None
    if active is not None and getattr(active, "pythonExec", sys.executable) != sys.executable:
        warnings.warn(
            f"pybroker_spark: imported after the SparkSession started, whose Python workers run "
            f"{active.pythonExec!r}; import pybroker_spark before creating the session, or set "
            f"PYSPARK_PYTHON={sys.executable}", RuntimeWarning, stacklevel=3)


_use_this_python_for_workers()


def __getattr__(name: str) -> Any:
    # Lazily, so that pybroker_spark.options and friends import without pyspark.
    if name == "PyBrokerDataSource":
        from pybroker_spark.source import PyBrokerDataSource

        return PyBrokerDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark: Any) -> None:
    """Register the data source with a SparkSession (auto-registration makes this optional)."""
    from pybroker_spark.source import PyBrokerDataSource

    spark.dataSource.register(PyBrokerDataSource)
