"""A small blocking Kafka producer (what `pybroker produce` and `pybroker perf produce` need).

Records are accumulated per partition into v2 record batches (pybroker.records.batch
build_batch, so compression and the CRC are the codec's) and sent in one ProduceRequest per
leader when a batch reaches `batch_size` bytes, when `linger_ms` has passed since the
oldest buffered record (checked at each send()), or on flush(). Kafka's rules that carry
over:
- partitioning: a record with an explicit partition keeps it; a keyed record goes to
  toPositive(murmur2(key)) % partitions (Kafka's BuiltInPartitioner, so keys land where the
  Java client puts them); unkeyed records stick to one partition until batch.size bytes have
  gone to it, then move on round-robin (KIP-794's uniform sticky partitioner, without its
  load weighting): a batch sent early by linger.ms does not move them, so batches fill;
- batching: each partition's batch is sent when full (batch.size) or when linger.ms has
  passed since its first record (checked at each send(), and by `send_expired()`), each
  batch on its own clock;
- a topic missing from the metadata is created by the broker when `allow_auto_create_topics`
  (Kafka's allow.auto.create.topics, default true) and auto.create.topics.enable allow it;
- acks 0 / 1 / -1 (all); with acks=0 no response is read and offsets are unknown (-1);
- retriable partition errors (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, ...) refresh
  metadata and resend the same batch, up to `retries` times; other errors fail the batch's
  records. Not idempotent (no producer id), so a resend after a lost response may
  duplicate, as a Kafka producer with enable.idempotence=false would.
Delivery reports: `send()` returns a RecordMetadata placeholder that is filled in when the
batch is acknowledged (offset, timestamp, error), and `on_delivery(metadata)` is called then.
Concurrency: not thread-safe; one request in flight per broker connection (blocking).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pybroker._native import arrow_records
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.connection import BrokerConnection, BrokerConnectionError
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.client_security import PLAINTEXT, ClientSecurity
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import ProduceRequest
from pybroker.records.batch import build_batch

__all__ = ["Producer", "RecordMetadata", "partition_for_key"]

# Per-record bytes beyond key and value in a v2 batch (varints, attributes, deltas): an
# estimate for deciding when a batch is full, as Kafka's estimateSizeInBytesUpperBound is.
_RECORD_OVERHEAD = 21
_BATCH_OVERHEAD = 61


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """Kafka's BuiltInPartitioner for a keyed record: toPositive(murmur2(key)) % partitions."""
    return (arrow_records.murmur2(key) & 0x7FFFFFFF) % num_partitions


@dataclass
class RecordMetadata:
    """Where a record landed; offset -1 until acknowledged (or with acks=0)."""

    topic: str
    partition: int
    timestamp_ms: int
    serialized_size: int
    send_time: float  # time.monotonic() at send(), for latency
    value_size: int = 0  # the payload's bytes (what Kafka's perf tool counts)
    offset: int = -1
    error: KafkaError | None = None
    done: bool = False


@dataclass
class _Batch:
    tp: TopicPartition
    records: list[tuple[int, bytes | None, bytes | None, Sequence[tuple[bytes | str, bytes | None]]]] = \
        field(default_factory=list)
    metas: list[RecordMetadata] = field(default_factory=list)
    size: int = _BATCH_OVERHEAD
    created: float = 0.0
    attempts: int = 0


class Producer:
    """Blocking producer; see the module docstring."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        acks: int = -1,
        compression: int = 0,
        compression_level: int | None = None,
        batch_size: int = 16384,
        linger_ms: float = 5.0,
        max_request_size: int = 1048576,
        client_id: str = "pybroker-producer",
        request_timeout_s: float = 30.0,
        retries: int = 5,
        retry_backoff_s: float = 0.1,
        on_delivery: Callable[[RecordMetadata], None] | None = None,
        admin: AdminClient | None = None,
        security: ClientSecurity = PLAINTEXT,
        allow_auto_create_topics: bool = True,
    ) -> None:
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be -1 (all), 0 or 1, not {acks}")
        self.acks = acks
        self.compression = compression
        self.compression_level = compression_level
        self.batch_size = max(1, batch_size)
        self.linger_s = max(0.0, linger_ms) / 1000.0
        self.max_request_size = max_request_size
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.on_delivery = on_delivery
        self.allow_auto_create_topics = allow_auto_create_topics
        self._own_admin = admin is None
        self.admin = admin or AdminClient(bootstrap_servers, client_id=client_id,
                                          request_timeout_s=request_timeout_s, security=security)
        self._batches: dict[TopicPartition, _Batch] = {}
        self._partitions: dict[str, int] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self._sticky: dict[str, int] = {}
        self._sticky_bytes: dict[str, int] = {}  # bytes sent to the sticky partition since it was picked
        self._round_robin = 0
        self._conns: dict[int, BrokerConnection] = {}

    @property
    def buffered(self) -> int:
        """Records waiting in unsent batches."""
        return sum(len(b.records) for b in self._batches.values())

    # -- metadata -----------------------------------------------------------------------

    def partitions_for(self, topic: str) -> int:
        """Number of partitions; KafkaError(UNKNOWN_TOPIC_OR_PARTITION) if the topic is missing."""
        n = self._partitions.get(topic)
        if n is None:
            self._refresh([topic])
            n = self._partitions[topic]
        return n

    def _refresh(self, topics: Sequence[str]) -> None:
        """Partition counts and leaders of `topics`. With allow_auto_create_topics the Metadata
        request asks the broker to create a missing topic (Kafka's producer default); one being
        created answers LEADER_NOT_AVAILABLE, so ask again, with backoff, until it is described
        or the request timeout passes (Kafka's producer waits up to max.block.ms). A topic the
        broker will not create (UNKNOWN_TOPIC_OR_PARTITION) fails at once."""
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            md = self.admin.metadata(list(topics), allow_auto_topic_creation=self.allow_auto_create_topics)
            pending = False
            for name in topics:
                t = md.topics.get(name)
                if t is None or t.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                    raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
                if t.error == Errors.LEADER_NOT_AVAILABLE and not t.partitions:
                    pending = True  # being created
                    continue
                if t.error:
                    raise KafkaError(t.error, f"cannot produce to topic '{name}'")
                self._partitions[name] = len(t.partitions)
                for p in t.partitions:
                    self._leaders[TopicPartition(name, p.partition)] = p.leader
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise KafkaError(Errors.LEADER_NOT_AVAILABLE, f"topic {', '.join(topics)} not present in metadata "
                                 f"after {int(self.request_timeout_s * 1000)} ms")
            time.sleep(self.retry_backoff_s)

    # -- sending ------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | None, key: bytes | None = None,
             headers: Sequence[tuple[bytes | str, bytes | None]] = (), *, partition: int | None = None,
             timestamp_ms: int | None = None) -> RecordMetadata:
        n = self.partitions_for(topic)
        size = (_RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
                + sum(len(k) + (len(v) if v else 0) + 2 for k, v in headers))
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, n)
            else:
                partition = self._sticky_partition(topic, n, size)
        elif not 0 <= partition < n:
            raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION,
                             f"partition {topic}-{partition} does not exist (the topic has {n} partitions)")
        now = time.monotonic()
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        if size + _BATCH_OVERHEAD > self.max_request_size:
            raise KafkaError(Errors.RECORD_LIST_TOO_LARGE, f"a record of {size} bytes is larger than "
                             f"max.request.size ({self.max_request_size})")
        tp = TopicPartition(topic, partition)
        batch = self._batches.get(tp)
        if batch is not None and batch.size + size > self.batch_size and batch.records:
            self._send_batches([self._batches.pop(tp)])
            batch = None
        if batch is None:
            batch = self._batches[tp] = _Batch(tp, created=now)
        meta = RecordMetadata(topic, partition, ts, size, now, len(value) if value else 0)
        batch.records.append((ts, key, value, headers))
        batch.metas.append(meta)
        batch.size += size
        if batch.size >= self.batch_size:
            self._send_batches([self._batches.pop(tp)])
        self.send_expired(now)
        return meta

    def _sticky_partition(self, topic: str, n: int, size: int) -> int:
        """KIP-794: stay on one partition until batch.size bytes went to it, then take the next."""
        partition = self._sticky.get(topic)
        if partition is None or partition >= n or self._sticky_bytes.get(topic, 0) >= self.batch_size:
            partition = self._round_robin % n
            self._round_robin += 1
            self._sticky[topic] = partition
            self._sticky_bytes[topic] = 0
        self._sticky_bytes[topic] += size
        return partition

    def next_linger_deadline(self) -> float | None:
        """time.monotonic() at which the oldest buffered batch's linger.ms runs out; None if empty."""
        if not self._batches:
            return None
        return min(b.created for b in self._batches.values()) + self.linger_s

    def send_expired(self, now: float | None = None) -> None:
        """Send the batches whose linger.ms has passed (what Kafka's sender thread does)."""
        now = time.monotonic() if now is None else now
        expired = [tp for tp, b in self._batches.items() if now - b.created >= self.linger_s]
        if expired:
            self._send_batches([self._batches.pop(tp) for tp in expired])

    def flush(self) -> None:
        """Send every buffered record and wait for the answers."""
        batches, self._batches = list(self._batches.values()), {}
        if batches:
            self._send_batches(batches)

    def _leader_conn(self, node_id: int) -> BrokerConnection:
        conn = self._conns.get(node_id)
        if conn is None or not conn.connected:
            node = self.admin.metadata([]).brokers.get(node_id)
            if node is None:
                raise KafkaError(Errors.LEADER_NOT_AVAILABLE, f"broker {node_id} is not in the metadata")
            conn = BrokerConnection(node.host, node.port, client_id=self.client_id, security=self.admin.security,
                                    request_timeout_s=self.request_timeout_s)
            conn.connect()
            self._conns[node_id] = conn
        return conn

    def _send_batches(self, batches: list[_Batch]) -> None:
        pending = batches
        while pending:
            by_leader: dict[int, list[_Batch]] = {}
            for b in pending:
                leader = self._leaders.get(b.tp, -1)
                if leader < 0:
                    self._refresh([b.tp.topic])
                    leader = self._leaders.get(b.tp, -1)
                if leader < 0:
                    self._fail(b, KafkaError(Errors.LEADER_NOT_AVAILABLE, f"partition {b.tp} has no leader"))
                    continue
                by_leader.setdefault(leader, []).append(b)
            retry: list[_Batch] = []
            for leader, group in by_leader.items():
                retry += self._produce(leader, group)
            if retry:
                time.sleep(self.retry_backoff_s)
                self._refresh(sorted({b.tp.topic for b in retry}))
            pending = retry

    def _produce(self, leader: int, batches: list[_Batch]) -> list[_Batch]:
        """One ProduceRequest for these batches; returns the batches to retry."""
        encoded = {b.tp: build_batch(b.records, compression=self.compression,
                                     compression_level=self.compression_level) for b in batches}
        topics: dict[str, list[ProduceRequest.PartitionProduceData]] = {}
        for b in batches:
            topics.setdefault(b.tp.topic, []).append(
                ProduceRequest.PartitionProduceData(index=b.tp.partition, records=encoded[b.tp]))
        req = ProduceRequest(acks=self.acks, timeout_ms=int(self.request_timeout_s * 1000),
                             topic_data=[ProduceRequest.TopicProduceData(name=n, partition_data=ps)
                                         for n, ps in topics.items()])
        try:
            conn = self._leader_conn(leader)
            version = conn.version_for(ApiKey.PRODUCE, min_version=3, max_version=11)
            if self.acks == 0:
                conn.send_no_response(req, version)
                for b in batches:
                    self._complete(b, -1, -1, None)
                return []
            resp = conn.send(req, version)
        except BrokerConnectionError as exc:
            self._conns.pop(leader, None)
            return self._retry_or_fail(batches, KafkaError(Errors.NETWORK_EXCEPTION, str(exc)))
        except KafkaError as exc:
            if not exc.retriable:
                raise
            # the leader the metadata named is gone from it (a node killed a moment ago):
            # LEADER_NOT_AVAILABLE, retried after a metadata refresh like a partition error
            self._conns.pop(leader, None)
            return self._retry_or_fail(batches, exc)
        by_tp = {b.tp: b for b in batches}
        retry: list[_Batch] = []
        for t in resp.responses:
            for p in t.partition_responses:
                found = by_tp.pop(TopicPartition(t.name, p.index), None)
                if found is None:
                    continue
                b = found
                err = Errors.for_code(p.error_code)
                if err == Errors.NONE:
                    self._complete(b, p.base_offset, p.log_append_time_ms, None)
                else:
                    msg = p.error_message or (p.record_errors[0].batch_index_error_message
                                              if p.record_errors else None)
                    failure = KafkaError(err, f"cannot produce to {b.tp}" + (f": {msg}" if msg else ""))
                    retry += self._retry_or_fail([b], failure)
        for b in by_tp.values():  # missing from the response: treat as a failed send
            self._fail(b, KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"no answer for {b.tp}"))
        return retry

    def _retry_or_fail(self, batches: list[_Batch], exc: KafkaError) -> list[_Batch]:
        out = []
        for b in batches:
            b.attempts += 1
            if exc.retriable and b.attempts <= self.retries:
                self._leaders.pop(b.tp, None)
                out.append(b)
            else:
                self._fail(b, exc)
        return out

    def _complete(self, b: _Batch, base_offset: int, log_append_time: int, error: KafkaError | None) -> None:
        for i, meta in enumerate(b.metas):
            meta.offset = base_offset + i if base_offset >= 0 else -1
            if log_append_time is not None and log_append_time >= 0:
                meta.timestamp_ms = log_append_time
            meta.error = error
            meta.done = True
            if self.on_delivery is not None:
                self.on_delivery(meta)

    def _fail(self, b: _Batch, exc: KafkaError) -> None:
        self._complete(b, -1, -1, exc)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()
            if self._own_admin:
                self.admin.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
