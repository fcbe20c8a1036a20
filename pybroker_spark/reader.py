"""Kafka -> Spark: batch reads and micro-batch streams, yielding Arrow batches.

Driver: `partitions()` resolves offsets (pybroker_spark.offsets) into OffsetRange slices.
Executor: `read(range)` fetches the slice from the partition's leader
(pybroker.client.fetcher), decompresses each record batch and hands its records section
to the compiled RecordColumns, which decodes it straight into Arrow buffers; every
ROWS_PER_BATCH rows become one pyarrow RecordBatch of Spark's Kafka source schema. No
Python code runs per record.

Under read_committed the fetcher drops aborted transactions and control batches; offsets
they occupy are simply absent, as in Spark's source. failOnDataLoss: a slice whose start
was deleted (below the log start offset, or OFFSET_OUT_OF_RANGE) or whose records never
arrive within kafkaConsumer.pollTimeoutMs fails the task when true (the default), and is
skipped with a warning when false.

Streaming (`PyBrokerStreamReader`): offsets are Spark's Kafka source offsets,
{"topic": {"partition": next offset}}; Spark checkpoints them, so a restarted query
resumes at the last committed end, with no gap and no repeat. Admission control:
maxOffsetsPerTrigger splits a backlog across partitions in proportion to their lag
(Spark's rateLimit); minOffsetsPerTrigger holds a trigger back until that many offsets
are there or maxTriggerDelay has passed; Trigger.AvailableNow fixes the end offsets when
the query starts and drains to them in as many batches as the limits make.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from pybroker._native import arrow_records
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.fetcher import AbortedTransactions, PartitionFetcher, committed_batches
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.records import records_section
from pybroker_spark import arrow_columns
from pybroker_spark.offsets import (
    OffsetRange,
    OffsetReader,
    from_json_offsets,
    split_ranges,
    to_json_offsets,
)
from pybroker_spark.options import OptionError, ReadOptions, client_security

__all__ = ["PyBrokerReader", "PyBrokerStreamReader", "read_range"]

log = logging.getLogger("pybroker_spark")

ROWS_PER_BATCH = 65536
BYTES_PER_BATCH = 32 << 20


class DataLossError(RuntimeError):
    pass


def _data_loss(opts: ReadOptions, message: str) -> None:
    if opts.fail_on_data_loss:
        raise DataLossError(
            f"{message}. Some data may have been lost because they are not available in Kafka any "
            "more; either the data was aged out by Kafka or the topic may have been deleted before "
            "all the data in the topic was processed. If you don't want your query to fail on such "
            "cases, set the source option \"failOnDataLoss\" to \"false\".")
    log.warning("pybroker connector: %s; continuing (failOnDataLoss=false)", message)


def read_range(opts: ReadOptions, r: OffsetRange) -> Iterator[Any]:
    """Arrow RecordBatches of the records in [r.from_offset, r.until_offset) of one partition."""
    tp = TopicPartition(r.topic, r.partition)
    admin = AdminClient(opts.bootstrap_servers, client_id=opts.client_id,
                        request_timeout_s=opts.request_timeout_s, security=client_security(opts))
    fetcher = PartitionFetcher(admin, tp, isolation_level=opts.isolation_level,
                               max_bytes=opts.fetch_max_bytes, partition_max_bytes=opts.partition_max_bytes,
                               max_wait_ms=opts.fetch_max_wait_ms,
                               retry_deadline_s=opts.poll_timeout_ms / 1000)
    cols = arrow_records.RecordColumns(opts.include_headers)
    tracker = AbortedTransactions() if opts.isolation_level else None
    offset, until = r.from_offset, r.until_offset
    stalled_since: float | None = None
    try:
        while offset < until:
            try:
                data = fetcher.fetch(offset)
            except KafkaError as exc:
                if exc.code != Errors.OFFSET_OUT_OF_RANGE:
                    raise
                start = min(fetcher_log_start(admin, tp), until)
                _data_loss(opts, f"Cannot fetch offset {offset} of {tp} (OFFSET_OUT_OF_RANGE); the "
                                 f"earliest available offset is {start}")
                if start <= offset:
                    break
                offset = start
                continue
            moved = False
            for header, batch in committed_batches(data, tracker):
                if header.next_offset <= offset:
                    continue
                if header.base_offset >= until:
                    offset = until
                    moved = True
                    break
                if batch is not None:
                    section = records_section(batch, header)
                    cols.append(section, 0, len(section), header.records_count, header.base_offset,
                                header.base_timestamp, header.timestamp_type == 1, header.max_timestamp,
                                offset, until)
                offset = header.next_offset
                moved = True
                if cols.rows >= ROWS_PER_BATCH or cols.data_bytes >= BYTES_PER_BATCH:
                    yield arrow_columns.record_batch(cols.finish(), r.topic, r.partition, opts.include_headers)
            if moved:
                stalled_since = None
                continue
            if data.log_start_offset > offset:
                _data_loss(opts, f"Offsets [{offset}, {data.log_start_offset}) of {tp} were deleted")
                offset = min(data.log_start_offset, until)
                continue
            visible = data.last_stable_offset if opts.isolation_level and data.last_stable_offset >= 0 \
                else data.high_watermark
            # Nothing visible at `offset` yet (an open transaction under read_committed, a
            # follower catching up, a truncated log): wait up to the poll timeout.
            now = time.monotonic()
            stalled_since = stalled_since or now
            if now - stalled_since > opts.poll_timeout_ms / 1000:
                _data_loss(opts, f"Cannot fetch records in [{offset}, {until}) of {tp} within "
                                 f"kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms}: the partition "
                                 f"holds offsets up to {visible}")
                break
        if cols.rows:
            yield arrow_columns.record_batch(cols.finish(), r.topic, r.partition, opts.include_headers)
    finally:
        admin.close()


def fetcher_log_start(admin: AdminClient, tp: TopicPartition) -> int:
    return admin.log_start_offsets([tp])[tp]


class PyBrokerReader(DataSourceReader):
    """`spark.read.format("pybroker")`."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[OffsetRange]:
        opts = self.opts
        reader = OffsetReader(opts)
        try:
            parts = reader.partitions()
            assert opts.ending is not None
            start = reader.resolve(opts.starting, parts, starting=True)
            end = reader.resolve(opts.ending, parts, starting=False)
            earliest = reader.earliest(parts)
        finally:
            reader.close()
        ranges = []
        for tp in parts:
            begin, until = start[tp], end[tp]
            if begin < earliest[tp]:
                _data_loss(opts, f"startingOffsets for {tp} is {begin}, below the earliest available "
                                 f"offset {earliest[tp]}")
                begin = earliest[tp]
            if until < begin:
                raise OptionError(f"Beginning offset {begin} is after the ending offset {until} for "
                                  f"topic {tp.topic} partition {tp.partition}. You either provided "
                                  "an invalid fromOffset, or the Kafka topic has been damaged")
            ranges.append(OffsetRange(tp.topic, tp.partition, begin, until))
        return split_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)

    def read(self, partition: OffsetRange) -> Iterator[Any]:
        if not isinstance(partition, OffsetRange):
            # partitions() found nothing to read; Spark still runs one task with its default
            # InputPartition(None)
            return iter(())
        return read_range(self.opts, partition)


class PyBrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("pybroker")`; see the module docstring."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._reader: OffsetReader | None = None
        self._available_now: dict[TopicPartition, int] | None = None
        self._last_trigger = time.monotonic()

    @property
    def reader(self) -> OffsetReader:
        if self._reader is None:
            self._reader = OffsetReader(self.opts)
        return self._reader

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's names
        parts = self.reader.partitions()
        return to_json_offsets(self.reader.resolve(self.opts.starting, parts, starting=True))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._available_now = self._latest()

    def _latest(self) -> dict[TopicPartition, int]:
        return self.reader.latest(self.reader.partitions())

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        return to_json_offsets(self._latest())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        begin = from_json_offsets(start)
        latest = self._available_now if self._available_now is not None else self._latest()
        new = [tp for tp in latest if tp not in begin]
        if new:  # partitions that appeared since `start` are read from their beginning
            begin.update(self.reader.earliest(new))
        gone = [tp for tp in begin if tp not in latest]
        for tp in gone:
            _data_loss(self.opts, f"{tp} is gone (topic deleted or partitions reassigned)")
        end = {tp: max(off, begin.get(tp, off)) for tp, off in latest.items()}
        if isinstance(limit, ReadAllAvailable):
            self._last_trigger = time.monotonic()
            return to_json_offsets(end)
        total = sum(max(0, end[tp] - begin[tp]) for tp in end)
        minimum = self.opts.min_offsets_per_trigger
        if (minimum is not None and self._available_now is None and total < minimum
                and (time.monotonic() - self._last_trigger) * 1000 < self.opts.max_trigger_delay_ms):
            return start  # not enough new data yet: skip this trigger
        maximum = self.opts.max_offsets_per_trigger
        if maximum is not None and total > maximum:
            end = _rate_limit(maximum, begin, end)
        self._last_trigger = time.monotonic()
        return to_json_offsets(end)

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        begin = from_json_offsets(start)
        until = from_json_offsets(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self.reader.earliest(new))
        earliest = self.reader.earliest(list(until))
        ranges = []
        for tp, stop in until.items():
            b = begin[tp]
            if b < earliest[tp]:
                _data_loss(self.opts, f"Offsets [{b}, {earliest[tp]}) of {tp} were deleted before "
                                      "they were read")
                b = min(earliest[tp], stop)
            if stop < b:
                _data_loss(self.opts, f"{tp}'s offset went back from {b} to {stop}")
                continue
            ranges.append(OffsetRange(tp.topic, tp.partition, b, stop))
        return split_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)

    def read(self, partition: OffsetRange) -> Iterator[Any]:
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        pass  # Spark's checkpoint is the record of progress; nothing is committed to Kafka

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _rate_limit(limit: int, begin: dict[TopicPartition, int], end: dict[TopicPartition, int]
                ) -> dict[TopicPartition, int]:
    """Spark's KafkaMicroBatchStream.rateLimit: each partition gets its share of `limit`
    in proportion to its backlog (at least one offset when it has any)."""
    sizes = {tp: end[tp] - begin[tp] for tp in end if end[tp] - begin[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return end
    out = {}
    for tp, stop in end.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = stop
            continue
        prorate = limit * (size / total)
        step = int(prorate) if prorate >= 1 else 1
        out[tp] = min(stop, begin[tp] + step)
    return out
