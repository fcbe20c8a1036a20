"""Fault injection for the Spark suites, importable by Spark's Python workers.

- `fail_at(value, fail_ids, always)`: the body of a Python UDF placed upstream of a write;
  it raises on the given row ids, on the first attempt of the task only (or on every
  attempt), so a task dies mid-partition while the writer is running.
- `FaultyDataSource` ("pybrokerfaulty"): the connector, except that its streaming writer's
  driver-side commit of micro-batch `failCommitOfBatch` raises *after* committing, once
  (a marker file records that it did): what a driver crash between the Kafka commit and
  Spark's commit log looks like. The restarted query must replay that batch.
"""

from __future__ import annotations

import os
from typing import Any

from pybroker_spark.source import PyBrokerDataSource
from pybroker_spark.writer import PyBrokerStreamWriter


class InjectedFailure(RuntimeError):
    pass


def fail_at(value: int, fail_ids: frozenset[int], always: bool) -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if value in fail_ids and (always or ctx is None or ctx.attemptNumber() == 0):
        raise InjectedFailure(f"injected failure at row {value}")
    return value


class _FaultyStreamWriter(PyBrokerStreamWriter):
    def __init__(self, inner: PyBrokerStreamWriter, batch: int, marker: str) -> None:
        super().__init__(inner.opts, inner.layout)
        self.fail_batch = batch
        self.marker = marker

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        super().commit(messages, batchId)
        if batchId == self.fail_batch and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(str(batchId))
            raise InjectedFailure(f"driver lost after committing micro-batch {batchId}")


class FaultyDataSource(PyBrokerDataSource):
    @classmethod
    def name(cls) -> str:
        return "pybrokerfaulty"

    def streamWriter(self, schema: Any, overwrite: bool) -> _FaultyStreamWriter:  # noqa: N802
        inner = super().streamWriter(schema, overwrite)
        return _FaultyStreamWriter(inner, int(self.options["failCommitOfBatch"]),
                                   self.options["faultMarker"])
