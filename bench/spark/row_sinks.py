"""Baselines for bench/spark/run.py: the same write done row by row with confluent-kafka.

    format("confluent-rows")   Spark's row DataSourceWriter (every value becomes a Row)
                               -> confluent_kafka.Producer.produce() per row
    format("confluent-arrow")  the Arrow writer, but still produce() per row: the best a
                               Python row path can do (SPARK.md: 0.46-0.59 M rows/s)

Both use librdkafka's murmur2_random partitioner (Java's placement, as the connector) and
the same acks / compression as the connector's run. Options: bootstrap, topic, acks,
compression. Importable by Spark's Python workers (bench/spark is put on PYTHONPATH).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceWriter,
    WriterCommitMessage,
)


class Done(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


def _producer(options: dict[str, str]) -> Any:
    from confluent_kafka import Producer

    return Producer({
        "bootstrap.servers": options["bootstrap"],
        "acks": options.get("acks", "all"),
        "compression.type": options.get("compression", "none"),
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "batch.size": 1000000,
        "queue.buffering.max.messages": 1000000,
        "enable.idempotence": options.get("acks", "all") == "all",
    })


def _produce_all(producer: Any, topic: str, pairs: Any) -> int:
    produce = producer.produce
    n = 0
    for key, value in pairs:
        while True:
            try:
                produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.05)
        n += 1
        if not n & 0xFFFF:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("confluent-kafka could not deliver every message")
    return n


class _RowWriter(DataSourceWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def write(self, iterator: Any) -> Done:
        p = _producer(self.options)
        return Done(_produce_all(p, self.options["topic"], ((r.key, r.value) for r in iterator)))


class _ArrowWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def write(self, iterator: Any) -> Done:
        p = _producer(self.options)

        def pairs() -> Any:
            for batch in iterator:
                keys = batch.column("key").to_pylist()
                values = batch.column("value").to_pylist()
                yield from zip(keys, values, strict=True)
        return Done(_produce_all(p, self.options["topic"], pairs()))


class ConfluentRows(DataSource):
    @classmethod
    def name(cls) -> str:
        return "confluent-rows"

    def writer(self, schema: Any, overwrite: bool) -> _RowWriter:
        return _RowWriter(dict(self.options))


class ConfluentArrow(DataSource):
    @classmethod
    def name(cls) -> str:
        return "confluent-arrow"

    def writer(self, schema: Any, overwrite: bool) -> _ArrowWriter:
        return _ArrowWriter(dict(self.options))


class _CountWriter(DataSourceArrowWriter):
    def write(self, iterator: Any) -> Done:
        return Done(sum(batch.num_rows for batch in iterator))


class ArrowCount(DataSource):
    """The ceiling: an Arrow writer that only counts (Spark's side of the cost alone)."""

    @classmethod
    def name(cls) -> str:
        return "arrow-count"

    def writer(self, schema: Any, overwrite: bool) -> _CountWriter:
        return _CountWriter()
