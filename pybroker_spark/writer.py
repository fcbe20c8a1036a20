"""Spark -> Kafka: the Arrow writer (batch and streaming), at-least-once or exactly-once.

Data path of one Spark task (`write`): Spark hands pyarrow RecordBatches
(spark.sql.execution.arrow.maxRecordsPerBatch rows each); per batch the compiled codec
places every row (partition column, else murmur2 of the key as Java's producer does,
else the topic's sticky partition) and encodes one records section per partition;
pybroker.client.section_producer compresses, stamps and sends them from its sender thread. No
Python code runs per row.

Delivery guarantees
-------------------
at-least-once (default, what Spark's own Kafka sink gives): every task has an idempotent
producer, so the producer's own retries never duplicate; a retried *task* sends its
rows again (a new producer id), so a task failure can leave duplicates.

exactly-once (`deliveryGuarantee=exactly-once`): a two-phase commit with the driver.

    task (attempt k of partition p)            driver
    InitProducerId(txn id of p)  -- fences attempt k-1 and aborts its transaction
    produce everything, transactional
    flush; do NOT commit
    return (txn id, producer id, epoch)  -->   commit(messages): EndTxn(COMMIT) for each
                                               abort(messages):  EndTxn(ABORT) for each
                                               listed task, InitProducerId for the others

The transactional id is `<transactionalIdPrefix>-<job id>-<p>` (batch; job id drawn on
the driver, so stable across p's retries, distinct per job) or
`<prefix>-<query id>-<p>` (streaming; the query id survives restarts from the
checkpoint). Tasks never commit because Spark can treat an attempt as failed after its
write() returned (../shared/SPARK.md: the input iterator of a failed attempt may just
end): only the attempts Spark lists in commit() become visible, through the driver.

Streaming replays: a micro-batch whose commit did not reach Spark's commit log is run
again after a restart. Each exactly-once streaming task therefore also commits, inside
its transaction, an offset of consumer group `<prefix>-<query id>-<p>` holding the batch
id; a replayed task that finds its batch id already committed writes nothing (the
offset and the rows commit atomically, so "committed" is never half true). This assumes
a replayed batch is split into the same Spark partitions, as Spark's own file sink does.

Driver-side failure window: the driver's EndTxns are one per task, not one atomic step;
a driver that dies between them leaves some tasks' rows committed (streaming replays
skip those; a batch job has no replay). The transactions of a job that is never
committed are aborted by the coordinator after transaction.timeout.ms (15 min default
here, the broker's maximum): size it above the job's duration.
"""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from pybroker._native import arrow_records
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.connection import BrokerConnectionError
from pybroker.client.section_producer import Producer, Section, topic_metadata
from pybroker.client.transactions import end_txn, fetch_stable_offsets, init_producer_id
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors, KafkaError
from pybroker_spark import arrow_columns
from pybroker_spark.options import OptionError, WriteOptions, client_security

__all__ = ["CommitMessage", "InputLayout", "PyBrokerStreamWriter", "PyBrokerWriter", "check_broker",
           "validate_input"]

log = logging.getLogger("pybroker_spark")

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass
class CommitMessage(WriterCommitMessage):
    """What one task attempt reports to the driver (pickled)."""

    partition_id: int
    attempt: int
    records: int
    transactional_id: str | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    open_transaction: bool = False  # a transaction with data awaits the driver's EndTxn
    skipped_replay: bool = False  # a replayed streaming batch this task had committed


# ---- the input schema -------------------------------------------------------------------

@dataclass(frozen=True)
class InputLayout:
    """Which of Spark's Kafka sink columns the input has."""

    key: bool
    topic: bool
    partition: bool
    headers: bool
    timestamp: bool


def _is(dt: DataType, *types: type) -> bool:
    return isinstance(dt, types)


def _headers_type_ok(dt: DataType) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = dt.elementType.fields
    return (len(fields) == 2 and fields[0].name == "key" and isinstance(fields[0].dataType, StringType)
            and fields[1].name == "value" and isinstance(fields[1].dataType, BinaryType))


def _unsupported(name: str, dt: DataType, wanted: str) -> OptionError:
    return OptionError(f"{name} attribute unsupported type {dt.simpleString()}. {name} must be a(n) {wanted}")


def validate_input(schema: StructType, opts: WriteOptions) -> InputLayout:
    """Spark's KafkaWriter.validateQuery, with its messages."""
    cols = {f.name: f.dataType for f in schema.fields}
    if opts.topic is None:
        if "topic" not in cols:
            raise OptionError("topic option required when no 'topic' attribute is present. Use the "
                              "topic option for setting a topic.")
        if not _is(cols["topic"], StringType):
            raise _unsupported("topic", cols["topic"], "string")
    if "value" not in cols:
        raise OptionError("Required attribute 'value' not found")
    if not _is(cols["value"], StringType, BinaryType):
        raise _unsupported("value", cols["value"], "string or binary")
    if "key" in cols and not _is(cols["key"], StringType, BinaryType):
        raise _unsupported("key", cols["key"], "string or binary")
    if "headers" in cols and not _headers_type_ok(cols["headers"]):
        raise _unsupported("headers", cols["headers"], "array<struct<key:string,value:binary>>")
    if "partition" in cols and not _is(cols["partition"], IntegerType):
        raise _unsupported("partition", cols["partition"], "int")
    if "timestamp" in cols and not _is(cols["timestamp"], TimestampType):
        raise _unsupported("timestamp", cols["timestamp"], "timestamp")
    return InputLayout(key="key" in cols, topic=opts.topic is None, partition="partition" in cols,
                       headers="headers" in cols and opts.include_headers,
                       timestamp="timestamp" in cols)


def check_broker(opts: WriteOptions) -> None:
    """Reach the cluster from the driver before any task runs: an unreachable broker, a
    topic that cannot exist, or a broker without transactions fail the job here."""
    admin = AdminClient(opts.bootstrap_servers, client_id=opts.producer.client_id,
                        request_timeout_s=min(opts.producer.request_timeout_s, 30.0), retries=2,
                        security=client_security(opts))
    try:
        try:
            conn = admin._any()
        except BrokerConnectionError as exc:
            raise OptionError(f"cannot reach the Kafka cluster at kafka.bootstrap.servers="
                              f"{opts.bootstrap_servers}: {exc}") from None
        if opts.exactly_once:
            for key in (ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.END_TXN):
                if not conn.supports(key):
                    raise OptionError(f"deliveryGuarantee=exactly-once: the broker at {conn.address} "
                                      f"does not support transactions ({ApiKey(key).name})")
        if opts.topic is not None:
            resp = topic_metadata(admin, [opts.topic], allow_auto_create=True)
            t = next((t for t in resp.topics if t.name == opts.topic), None)
            err = Errors.for_code(t.error_code) if t is not None else Errors.UNKNOWN_TOPIC_OR_PARTITION
            if err in (Errors.INVALID_TOPIC_EXCEPTION, Errors.TOPIC_AUTHORIZATION_FAILED):
                raise OptionError(f"cannot write to topic '{opts.topic}': {err.name}")
            if err == Errors.UNKNOWN_TOPIC_OR_PARTITION and t is not None and not t.partitions:
                # Retriable while the broker creates it; only a broker that will not create it
                # keeps answering this. One more look after a short wait tells them apart.
                time.sleep(0.5)
                resp = topic_metadata(admin, [opts.topic], allow_auto_create=True)
                t = next((t for t in resp.topics if t.name == opts.topic), None)
                if t is None or Errors.for_code(t.error_code) == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                    raise OptionError(f"topic '{opts.topic}' does not exist and the broker did not "
                                      "create it (auto.create.topics.enable=false?)")
    except KafkaError as exc:
        raise OptionError(f"cannot prepare the write to {opts.bootstrap_servers}: {exc}") from None
    finally:
        admin.close()


# ---- the task ---------------------------------------------------------------------------

def _task_context() -> tuple[int, int, Any]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:  # called outside Spark (unit tests)
        return 0, 0, None
    return ctx.partitionId(), ctx.attemptNumber(), ctx


class _TaskWriter:
    """One task's write: Arrow batches in, sections to the producer."""

    def __init__(self, opts: WriteOptions, layout: InputLayout, producer: Producer) -> None:
        self.opts = opts
        self.layout = layout
        self.producer = producer
        self.records = 0
        self.first_topic: str | None = opts.topic
        self._sticky = random.randrange(1 << 30)
        self._batches = 0

    def write_batch(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        layout, opts = self.layout, self.opts
        value = arrow_columns.binary_column(batch.column("value"))
        key = arrow_columns.binary_column(batch.column("key")) if layout.key else None
        partition = arrow_columns.int32_column(batch.column("partition")) if layout.partition else None
        if layout.timestamp:
            ts, divisor = arrow_columns.timestamp_column(batch.column("timestamp"))
        else:
            ts, divisor = None, 1
        headers = arrow_columns.headers_column(batch.column("headers")) if layout.headers else None
        if opts.topic is not None:
            topics = [opts.topic]
            topic_index = None
        else:
            column = batch.column("topic")
            if column.null_count:
                raise ValueError("null topic present in the data. Use the topic option for setting a topic.")
            encoded = column.dictionary_encode()
            topics = encoded.dictionary.to_pylist()
            indices = encoded.indices
            if indices.type != pa.int32():
                indices = indices.cast(pa.int32())
            topic_index = memoryview(indices.buffers()[1])[4 * indices.offset:4 * (indices.offset + n)]
        if self.first_topic is None:
            self.first_topic = topics[0]
        counts = [self.producer.partitions_for(t) for t in topics]
        # Keyless rows of one Arrow batch (~a Kafka batch of data) share a partition, the
        # next batch moves on: Kafka's sticky partitioner at batch granularity.
        sticky = [(self._sticky + self._batches) % c for c in counts]
        self._batches += 1
        dest = arrow_records.assign_partitions(n, key, partition, topic_index, counts, sticky)
        sections = arrow_records.encode_grouped(n, dest, sum(counts), key, value, ts, divisor,
                                                int(time.time() * 1000), headers, opts.max_section_bytes)
        names: list[tuple[str, int]] = [(t, p) for t, c in zip(topics, counts, strict=True) for p in range(c)]
        self.producer.send([Section(names[d][0], names[d][1], records, count, base_ts, max_ts)
                            for d, records, count, base_ts, max_ts in sections])
        self.records += n


def _make_producer(opts: WriteOptions, transactional_id: str | None) -> Producer:
    config = opts.producer
    if transactional_id is not None:
        from dataclasses import replace

        config = replace(config, transactional_id=transactional_id)
    return Producer(opts.bootstrap_servers, config, security=client_security(opts))


def _write(opts: WriteOptions, layout: InputLayout, iterator: Any, transactional_id: str | None,
           batch_id: int | None = None) -> CommitMessage:
    partition_id, attempt, _ = _task_context()
    producer = _make_producer(opts, transactional_id)
    try:
        pid = producer.begin()
        if transactional_id is not None and batch_id is not None:
            done = _committed_batch(producer, transactional_id, opts)
            if done is not None and done >= batch_id:
                for _ in iterator:  # replayed micro-batch already committed: write nothing
                    pass
                log.info("pybroker connector: batch %s of %s already committed; skipping",
                         batch_id, transactional_id)
                return CommitMessage(partition_id, attempt, 0, transactional_id, pid.producer_id,
                                     pid.producer_epoch, open_transaction=False, skipped_replay=True)
        task = _TaskWriter(opts, layout, producer)
        for batch in iterator:
            task.write_batch(batch)
        producer.flush()
        open_txn = False
        if transactional_id is not None:
            if batch_id is not None and task.first_topic is not None and task.records:
                # Progress record, atomic with the rows (see the module docstring).
                producer.send_offsets_to_transaction(
                    transactional_id, {TopicPartition(task.first_topic, 0): (batch_id, f'{{"batchId": {batch_id}}}')})
            open_txn = bool(producer.transaction_state and producer.transaction_state.partitions)
        return CommitMessage(partition_id, attempt, task.records, transactional_id, pid.producer_id,
                             pid.producer_epoch, open_transaction=open_txn)
    finally:
        producer.close()


def _committed_batch(producer: Producer, group_id: str, opts: WriteOptions) -> int | None:
    offsets = fetch_stable_offsets(producer._admin, group_id, deadline_s=opts.producer.max_block_s)
    return max((off for off, _ in offsets.values()), default=None)


# ---- driver side ------------------------------------------------------------------------

def _end_all(opts: WriteOptions, messages: list[Any], commit: bool, txn_id_of: Any) -> None:
    """EndTxn for every listed task; on abort also fence the ids of unlisted (failed) tasks."""
    admin = AdminClient(opts.bootstrap_servers, client_id=opts.producer.client_id,
                        request_timeout_s=opts.producer.request_timeout_s, security=client_security(opts))
    failures: list[str] = []
    try:
        for index, m in enumerate(messages):
            if isinstance(m, CommitMessage):
                if not m.open_transaction or m.transactional_id is None:
                    continue
                try:
                    end_txn(admin, m.transactional_id, m.producer_id, m.producer_epoch, commit,
                            deadline_s=opts.producer.max_block_s)
                except (KafkaError, BrokerConnectionError) as exc:
                    if commit:
                        raise
                    failures.append(f"{m.transactional_id}: {exc}")
            elif not commit:
                # No message: the task failed. Its transaction (if it opened one) is aborted
                # by fencing the id -- InitProducerId ends an ongoing transaction.
                txn_id = txn_id_of(index)
                if txn_id is None:
                    continue
                try:
                    init_producer_id(admin, txn_id, opts.producer.transaction_timeout_ms,
                                     deadline_s=opts.producer.max_block_s)
                except (KafkaError, BrokerConnectionError) as exc:
                    failures.append(f"{txn_id}: {exc}")
    finally:
        admin.close()
    if failures:
        log.warning("pybroker connector: could not abort every transaction (the coordinator aborts "
                    "them after transaction.timeout.ms): %s", "; ".join(failures))


class PyBrokerWriter(DataSourceArrowWriter):
    """The batch writer (`df.write.format("pybroker")`). Built on the driver, pickled to tasks."""

    def __init__(self, opts: WriteOptions, layout: InputLayout) -> None:
        self.opts = opts
        self.layout = layout
        # Drawn once per job on the driver: every attempt of partition p shares its id.
        self.job_id = uuid.uuid4().hex[:16]

    def transactional_id(self, partition_id: int) -> str | None:
        if not self.opts.exactly_once:
            return None
        return f"{self.opts.transactional_id_prefix}-{self.job_id}-{partition_id}"

    def write(self, iterator: Any) -> CommitMessage:
        partition_id, _, _ = _task_context()
        return _write(self.opts, self.layout, iterator, self.transactional_id(partition_id))

    def commit(self, messages: list[Any]) -> None:
        if self.opts.exactly_once:
            _end_all(self.opts, messages, True, self.transactional_id)

    def abort(self, messages: list[Any]) -> None:
        if self.opts.exactly_once:
            _end_all(self.opts, messages, False, self.transactional_id)


class PyBrokerStreamWriter(DataSourceStreamArrowWriter):
    """The streaming writer (`writeStream.format("pybroker")`); see the module docstring."""

    def __init__(self, opts: WriteOptions, layout: InputLayout) -> None:
        self.opts = opts
        self.layout = layout
        self.fallback_query_id = uuid.uuid4().hex[:16]

    def _query_id(self, ctx: Any) -> str:
        qid = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        return qid or os.environ.get("PYBROKER_SPARK_QUERY_ID") or self.fallback_query_id

    def write(self, iterator: Any) -> CommitMessage:
        partition_id, _, ctx = _task_context()
        if not self.opts.exactly_once:
            return _write(self.opts, self.layout, iterator, None)
        batch_raw = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if batch_raw is None:
            raise RuntimeError("exactly-once streaming write: Spark did not pass the micro-batch id")
        txn_id = f"{self.opts.transactional_id_prefix}-{self._query_id(ctx)}-{partition_id}"
        return _write(self.opts, self.layout, iterator, txn_id, int(batch_raw))

    def _txn_ids(self, messages: list[Any]) -> Any:
        known = {m.partition_id: m.transactional_id for m in messages if isinstance(m, CommitMessage)}
        prefix = next((t.rsplit("-", 1)[0] for t in known.values() if t), None)

        def txn_id_of(index: int) -> str | None:
            return known.get(index) or (f"{prefix}-{index}" if prefix else None)
        return txn_id_of

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        if self.opts.exactly_once:
            _end_all(self.opts, messages, True, self._txn_ids(messages))

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 - Spark's name
        # Tasks of this batch that left no message are fenced when their id can be named;
        # otherwise the batch's replay (same ids) or the transaction timeout aborts them.
        if self.opts.exactly_once:
            _end_all(self.opts, messages, False, self._txn_ids(messages))
