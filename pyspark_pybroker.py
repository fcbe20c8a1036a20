"""Spark's auto-registration hook for pybroker's connector.

Spark imports every top-level module named `pyspark_<name>` it finds on the Python path
and registers its `DefaultSource` under `DefaultSource.name()`, here "pybroker", so
`spark.read.format("pybroker")` works in a plain session without a register call.
"""

from pybroker_spark.source import PyBrokerDataSource as DefaultSource

__all__ = ["DefaultSource"]
