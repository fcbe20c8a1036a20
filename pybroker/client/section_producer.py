"""A produce client for ready-made records sections (the Spark connector's sender).

Kafka's KafkaProducer takes one record at a time and batches them in its accumulator;
this client starts where that accumulator ends: callers hand it whole records sections
per partition (built in compiled code, pybroker._native.arrow_records), and it does what
Kafka's Sender does with a finished batch:

    main thread                          sender thread (one per Producer)
    -----------                          --------------------------------
    partitions_for(topic)                for each queued item, in order:
    send(items) -> bounded queue   ->      AddPartitionsToTxn for new partitions (txn)
    flush() / close()                      compress (pybroker.records.compression), stamp
                                           producer id / epoch / sequence, CRC
                                           (pybroker._native.records.build_batch)
                                           Produce to each leader, one request at a time,
                                           at most one batch per partition per request

Delivery: acks=all by default. Retriable answers (NOT_LEADER_OR_FOLLOWER, lost
connections, ...) refresh metadata and resend the *same* batch bytes until
`delivery_timeout_s`; with idempotence (the default) the broker drops a resent batch it
already has (DUPLICATE_SEQUENCE_NUMBER counts as delivered), so a retry never duplicates.
Any other error is fatal: it is kept, later sends are dropped, and the next `send`,
`flush` or `close` raises KafkaError with the broker's code and message.

Transactions: with a transactional id, `begin()` runs InitProducerId (fencing and
aborting earlier epochs) and every batch is transactional. This client never ends the
transaction itself unless asked (`commit` / `abort`): the Spark driver ends it with
transactions.end_txn, using `transaction_state`.

Ordering: one sender thread and one request in flight keep each partition's batches in
send order, retries included. Concurrency: the public methods belong to one thread; the
sender has its own connections (AdminClient is not thread-safe).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pybroker._native import records as _records
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.connection import BrokerConnectionError
from pybroker.client.transactions import (
    ProducerIdAndEpoch,
    TransactionState,
    add_offsets_to_txn,
    add_partitions_to_txn,
    end_txn,
    init_producer_id,
    txn_offset_commit,
)
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.client_security import PLAINTEXT, ClientSecurity
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import MetadataRequest, ProduceRequest
from pybroker.records import compression as _codecs

__all__ = ["Producer", "ProducerConfig", "Section"]

log = logging.getLogger("pybroker.client.producer")

TRANSACTIONAL_FLAG = 0x10
NO_SEQUENCE = -1


@dataclass(frozen=True)
class Section:
    """One encoded records section for one partition (see arrow_records.encode_grouped)."""

    topic: str
    partition: int
    records: bytes
    count: int
    base_timestamp: int
    max_timestamp: int


@dataclass
class ProducerConfig:
    """The producer properties this client honours, under Kafka's names where they exist."""

    acks: int = -1                      # acks: -1 (all) or 1
    compression: int = _codecs.NONE     # compression.type, as a codec id
    compression_level: int | None = None
    enable_idempotence: bool = True     # enable.idempotence
    transactional_id: str | None = None  # transactional.id
    transaction_timeout_ms: int = 60000  # transaction.timeout.ms
    request_timeout_s: float = 30.0     # request.timeout.ms
    delivery_timeout_s: float = 120.0   # delivery.timeout.ms
    max_block_s: float = 60.0           # max.block.ms (metadata waits)
    retry_backoff_s: float = 0.1        # retry.backoff.ms
    max_request_bytes: int = 1048576    # max.request.size
    client_id: str = "pybroker-producer"  # client.id
    queue_items: int = 4                # sends buffered ahead of the sender thread
    extra: dict[str, str] = field(default_factory=dict)


class _Fatal(Exception):
    pass


def topic_metadata(admin: AdminClient, topics: list[str], allow_auto_create: bool) -> Any:
    """A Metadata answer for `topics`, asking the broker to create missing ones if allowed
    (a producer's allow.auto.create.topics)."""
    conn = admin._any()
    version = conn.version_for(ApiKey.METADATA, min_version=1)
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics])
    if version >= 4:
        req.allow_auto_topic_creation = allow_auto_create
    return conn.send(req, version)


class Producer:
    """Sends records sections; see the module docstring."""

    def __init__(self, bootstrap_servers: str, config: ProducerConfig | None = None,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.config = config or ProducerConfig()
        if self.config.acks not in (-1, 1):
            raise ValueError(f"acks={self.config.acks} is not supported (use 1 or all)")
        if self.config.transactional_id is not None and not self.config.enable_idempotence:
            raise ValueError("a transactional producer must be idempotent "
                             "(enable.idempotence cannot be false with a transactional.id)")
        if self.config.enable_idempotence and self.config.acks != -1:
            raise ValueError("Must set acks to all in order to use the idempotent producer")
        self.bootstrap_servers = bootstrap_servers
        timeout = self.config.request_timeout_s
        self._admin = AdminClient(bootstrap_servers, client_id=self.config.client_id,
                                  request_timeout_s=timeout, security=security)
        self._sender_admin = AdminClient(bootstrap_servers, client_id=self.config.client_id,
                                         request_timeout_s=timeout, security=security)
        self._partitions: dict[str, int] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._sequences: dict[TopicPartition, int] = {}
        self._pid = ProducerIdAndEpoch(-1, -1)
        self.transaction_state: TransactionState | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, self.config.queue_items))
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.records_sent = 0
        self.batches_sent = 0
        self.bytes_sent = 0

    # -- lifecycle --------------------------------------------------------------------

    def begin(self) -> ProducerIdAndEpoch:
        """Get the producer id (idempotent or transactional) and start the sender thread."""
        cfg = self.config
        if cfg.enable_idempotence:
            self._pid = init_producer_id(self._admin, cfg.transactional_id, cfg.transaction_timeout_ms,
                                         deadline_s=cfg.max_block_s)
        if cfg.transactional_id is not None:
            self.transaction_state = TransactionState(cfg.transactional_id, self._pid.producer_id,
                                                      self._pid.producer_epoch, set())
        self._thread = threading.Thread(target=self._run, name="pybroker-producer-sender", daemon=True)
        self._thread.start()
        return self._pid

    @property
    def producer_id_and_epoch(self) -> ProducerIdAndEpoch:
        return self._pid

    def close(self) -> None:
        """Stop the sender (after what is queued) and close connections; raises a delivery error."""
        try:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join()
                self._thread = None
        finally:
            self._admin.close()
            self._sender_admin.close()
        self._raise_if_failed()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - the original failure is the one to report
                pass

    # -- metadata ---------------------------------------------------------------------

    def partitions_for(self, topic: str) -> int:
        """The topic's partition count, waiting up to max.block.ms for it to exist (the
        broker may create it on this request, as for any producer)."""
        count = self._partitions.get(topic)
        if count is not None:
            return count
        deadline = time.monotonic() + self.config.max_block_s
        delay = 0.05
        last = Errors.UNKNOWN_TOPIC_OR_PARTITION
        while True:
            try:
                resp = topic_metadata(self._admin, [topic], allow_auto_create=True)
                t = next((t for t in resp.topics if t.name == topic), None)
                if t is not None:
                    last = Errors.for_code(t.error_code)
                    if last == Errors.NONE and t.partitions:
                        self._partitions[topic] = len(t.partitions)
                        return len(t.partitions)
                    if last != Errors.NONE and not last.retriable:
                        raise KafkaError(last, f"topic '{topic}'")
            except BrokerConnectionError:
                if time.monotonic() + delay > deadline:
                    raise
            if time.monotonic() + delay > deadline:
                raise KafkaError(last, f"Topic {topic} not present in metadata after "
                                       f"{int(self.config.max_block_s * 1000)} ms.")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    # -- sending ----------------------------------------------------------------------

    def send(self, sections: Iterable[Section]) -> None:
        """Queue sections for delivery, in order; blocks while the queue is full."""
        self._raise_if_failed()
        if self._thread is None:
            raise RuntimeError("Producer.begin() was not called")
        items = [s for s in sections if s.count]
        if not items:
            return
        while True:
            try:
                self._queue.put(items, timeout=0.5)
                return
            except queue.Full:
                self._raise_if_failed()

    def flush(self) -> None:
        """Wait until everything queued is delivered; raises the first delivery error."""
        if self._thread is not None:
            done = threading.Event()
            while True:
                try:
                    self._queue.put(done, timeout=0.5)
                    break
                except queue.Full:
                    self._raise_if_failed()
            while not done.wait(0.5):
                if not self._thread.is_alive():
                    break
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    # -- transactions (driver-less use) -----------------------------------------------

    def send_offsets_to_transaction(self, group_id: str,
                                    offsets: Mapping[TopicPartition, tuple[int, str]]) -> None:
        """Commit group offsets inside the open transaction (after a flush)."""
        txn = self._require_txn()
        self.flush()
        add_offsets_to_txn(self._admin, txn, group_id, deadline_s=self.config.max_block_s)
        txn_offset_commit(self._admin, txn, group_id, offsets, deadline_s=self.config.max_block_s)

    def commit(self) -> None:
        txn = self._require_txn()
        self.flush()
        end_txn(self._admin, txn.transactional_id, txn.producer_id, txn.producer_epoch, True,
                deadline_s=self.config.max_block_s)
        txn.partitions.clear()

    def abort(self) -> None:
        txn = self._require_txn()
        end_txn(self._admin, txn.transactional_id, txn.producer_id, txn.producer_epoch, False,
                deadline_s=self.config.max_block_s)
        txn.partitions.clear()

    def _require_txn(self) -> TransactionState:
        if self.transaction_state is None:
            raise RuntimeError("not a transactional producer (no transactional.id)")
        return self.transaction_state

    # -- the sender thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if isinstance(item, threading.Event):
                    item.set()
                    continue
                if self._error is None:
                    self._deliver(item)
            except BaseException as exc:  # kept for the caller's thread
                if self._error is None:
                    self._error = exc
            finally:
                self._queue.task_done()

    def _batch(self, s: Section) -> bytes:
        cfg = self.config
        tp = TopicPartition(s.topic, s.partition)
        records = s.records
        if cfg.compression:
            compressed = _codecs.compress(cfg.compression, records, cfg.compression_level)
            if len(compressed) < len(records):  # as Kafka's producer, keep what is smaller
                records = compressed
                codec = cfg.compression
            else:
                codec = 0
        else:
            codec = 0
        attributes = codec | (TRANSACTIONAL_FLAG if cfg.transactional_id is not None else 0)
        if self._pid.producer_id >= 0:
            sequence = self._sequences.get(tp, 0)
            self._sequences[tp] = (sequence + s.count) & 0x7FFFFFFF
        else:
            sequence = NO_SEQUENCE
        return _records.build_batch(records, 0, -1, attributes, s.count - 1, s.base_timestamp,
                                    s.max_timestamp, self._pid.producer_id, self._pid.producer_epoch,
                                    sequence, s.count)

    def _deliver(self, sections: list[Section]) -> None:
        cfg = self.config
        txn = self.transaction_state
        if txn is not None:
            new = {TopicPartition(s.topic, s.partition) for s in sections} - txn.partitions
            if new:
                add_partitions_to_txn(self._sender_admin, txn, new, deadline_s=cfg.delivery_timeout_s)
        pending: list[tuple[TopicPartition, bytes, int]] = []
        for s in sections:
            batch = self._batch(s)
            if len(batch) > cfg.max_request_bytes:
                raise KafkaError(Errors.MESSAGE_TOO_LARGE,
                                 f"The message is {len(batch)} bytes when serialized which is larger "
                                 f"than {cfg.max_request_bytes}, which is the value of the "
                                 "max.request.size configuration.")
            pending.append((TopicPartition(s.topic, s.partition), batch, s.count))
        deadline = time.monotonic() + cfg.delivery_timeout_s
        delay = cfg.retry_backoff_s
        while pending:
            failed, retriable = self._send_round(pending)
            if not failed:
                return
            if time.monotonic() + delay > deadline:
                tp, err, message = retriable
                raise KafkaError(err, f"Expiring records for {tp}: delivery.timeout.ms of "
                                      f"{int(cfg.delivery_timeout_s * 1000)} ms passed; last error: "
                                      f"{message or err.name}")
            log.debug("produce retry after %s", retriable)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
            self._leaders.clear()
            pending = failed

    def _leader_of(self, tp: TopicPartition) -> int:
        leader = self._leaders.get(tp)
        if leader is None:
            resp = topic_metadata(self._sender_admin, [tp.topic], allow_auto_create=False)
            for t in resp.topics:
                for p in t.partitions:
                    if p.leader_id >= 0:
                        self._leaders[TopicPartition(t.name, p.partition_index)] = p.leader_id
            leader = self._leaders.get(tp)
            if leader is None:
                raise KafkaError(Errors.LEADER_NOT_AVAILABLE, f"no leader for {tp}")
        return leader

    def _send_round(self, pending: list[tuple[TopicPartition, bytes, int]]
                    ) -> tuple[list[tuple[TopicPartition, bytes, int]], Any]:
        """Send every pending batch once; returns (those to retry, last retriable error)."""
        failed: list[tuple[TopicPartition, bytes, int]] = []
        last: Any = None
        by_leader: dict[int, list[tuple[TopicPartition, bytes, int]]] = {}
        for entry in pending:
            try:
                by_leader.setdefault(self._leader_of(entry[0]), []).append(entry)
            except (KafkaError, BrokerConnectionError) as exc:
                if isinstance(exc, KafkaError) and not exc.retriable:
                    raise
                failed.append(entry)
                last = (entry[0], getattr(exc, "code", Errors.NETWORK_EXCEPTION), str(exc))
        for leader, entries in by_leader.items():
            for request in self._pack(entries):
                retry, err = self._produce(leader, request)
                failed.extend(retry)
                if err is not None:
                    last = err
        # Keep each partition's batches in their original order for the next round.
        order = {id(e[1]): i for i, e in enumerate(pending)}
        failed.sort(key=lambda e: order[id(e[1])])
        return failed, last

    def _pack(self, entries: list[tuple[TopicPartition, bytes, int]]
              ) -> Iterable[list[tuple[TopicPartition, bytes, int]]]:
        """Requests of at most max.request.size holding one batch per partition each."""
        request: list[tuple[TopicPartition, bytes, int]] = []
        size = 0
        seen: set[TopicPartition] = set()
        for entry in entries:
            if request and (entry[0] in seen or size + len(entry[1]) > self.config.max_request_bytes):
                yield request
                request, size, seen = [], 0, set()
            request.append(entry)
            size += len(entry[1])
            seen.add(entry[0])
        if request:
            yield request

    def _produce(self, leader: int, entries: list[tuple[TopicPartition, bytes, int]]
                 ) -> tuple[list[tuple[TopicPartition, bytes, int]], Any]:
        cfg = self.config
        topics: dict[str, list[Any]] = {}
        for tp, batch, _ in entries:
            topics.setdefault(tp.topic, []).append(
                ProduceRequest.PartitionProduceData(index=tp.partition, records=batch))
        req = ProduceRequest(transactional_id=cfg.transactional_id, acks=cfg.acks,
                             timeout_ms=int(cfg.request_timeout_s * 1000),
                             topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=ps)
                                         for t, ps in topics.items()])
        try:
            conn = self._sender_admin._node_conn(leader)
            resp = conn.send(req, conn.version_for(ApiKey.PRODUCE, min_version=3))
        except BrokerConnectionError as exc:
            # Whatever reached the broker is deduplicated on resend (idempotence).
            return list(entries), (entries[0][0], Errors.NETWORK_EXCEPTION, str(exc))
        answers: dict[TopicPartition, Any] = {}
        for t in resp.responses:
            for p in t.partition_responses:
                answers[TopicPartition(t.name, p.index)] = p
        retry: list[tuple[TopicPartition, bytes, int]] = []
        last = None
        for entry in entries:
            tp, batch, count = entry
            p = answers.get(tp)
            if p is None:
                raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"no produce answer for {tp}")
            err = Errors.for_code(p.error_code)
            if err in (Errors.NONE, Errors.DUPLICATE_SEQUENCE_NUMBER):
                self.records_sent += count
                self.batches_sent += 1
                self.bytes_sent += len(batch)
                continue
            message = p.error_message or ""
            if p.record_errors:
                message = "; ".join(filter(None, [message] + [
                    f"record {e.batch_index}: {e.batch_index_error_message}" for e in p.record_errors]))
            if err.retriable:
                retry.append(entry)
                last = (tp, err, message)
                continue
            raise KafkaError(err, f"produce to {tp} failed" + (f": {message}" if message else ""))
        return retry, last
