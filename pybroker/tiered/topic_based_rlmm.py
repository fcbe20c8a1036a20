"""Kafka's TopicBasedRemoteLogMetadataManager: remote segment metadata kept in the
`__remote_log_metadata` topic, read back by every broker that hosts a replica of the partition.

Construct, then start() (the broker does both once its listener serves; server/broker.py):

    rlmm = TopicBasedRemoteLogMetadataManager(
        bootstrap_servers="127.0.0.1:9092",  # this broker's own listener:
            # remote.log.metadata.manager.listener.name, else the inter-broker listener
        node_id=1,
        configs=rlmm_configs,               # the `rlmm.config.` properties, prefix stripped
        security=listener_security,         # that listener's TLS/SASL (protocol/client_security.py)
        # security_factory: props -> ClientSecurity for security keys set in
        # remote.log.metadata.{common.client,producer,consumer}.* (default: Kafka's client
        # properties, security/client_properties.client_security)
        standalone=cfg.standalone)          # replication factor 1 unless set (rlmm_config.py)
    rlmm.start()

Format: one record per event, null key, value = metadata_serde.serialize(event), in metadata
partition RemoteLogMetadataTopicPartitioner.metadata_partition(tp) (Kafka's hash, so a topic
Kafka wrote reads the same). The topic is created if missing, as Kafka creates it:
num.partitions and replication factor from rlmm_config.py, retention.ms, cleanup.policy=delete,
remote.storage.enable=false. An existing topic with another partition count fails the
initialization (Kafka then stops the broker; here every call raises RemoteStorageError).

Threads (none on the event loop; every public method blocks and is thread-safe):
- "rlmm-init": creates the topic and the clients, retrying every
  remote.log.metadata.initialization.retry.interval.ms up to ...retry.max.timeout.ms.
- "rlmm-consumer" (Kafka's ConsumerTask): consumes the metadata partitions of the user
  partitions this node hosts (on_partition_leadership_changes / on_stop_partitions), from the
  start of a metadata partition whenever a user partition joins it, and applies each event of a
  hosted partition once (a per-partition read offset skips what it already applied) to the
  RemotePartitionMetadataStore. A user partition is ready (is_ready, Kafka's isInitialized) once
  its metadata partition is read up to the end offset it had when the partition was assigned.
- writers (the remote log manager's worker threads): add/update/put publish with the producer
  (acks=all, one write at a time) and return only once the record is acknowledged *and* this
  node's consumer has read past it (Kafka's waitTillConsumptionCatchesUp), within
  remote.log.metadata.consume.wait.ms; otherwise RemoteStorageError.
Unlike Kafka, the producer is not idempotent (pybroker's client has no producer id); a resent
duplicate is harmless, since a self-transition is a no-op in the cache. A record that does not
parse is logged and skipped (Kafka's task would stop consuming). A restarted broker re-reads its
metadata partitions from their start, as Kafka's (3.9) ConsumerTask does (no snapshot file).

Errors: RemoteStorageError for a write that is not durable or not read back in time, and for
any call before initialization or after close(); RemoteResourceNotFoundError /
RemoteLogMetadataNotReadyError (remote_log_metadata_cache.py) from lookups of a partition that
is not hosted / not yet caught up; ValueError for an event in the wrong method (Kafka's
IllegalArgumentException); ConfigError from the constructor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pybroker._native import arrow_records
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.consumer import Consumer
from pybroker.client.producer import Producer
from pybroker.log.remote import metadata_serde
from pybroker.log.remote.metadata_serde import MetadataParseError
from pybroker.log.remote.remote_log_metadata_cache import RemotePartitionMetadataStore
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from pybroker.log.remote.remote_storage_manager import RemoteStorageError
from pybroker.protocol.client_security import PLAINTEXT, ClientSecurity
from pybroker.protocol.errors import Errors
from pybroker.security.client_properties import client_security
from pybroker.tiered.rlmm_config import (
    REMOTE_LOG_METADATA_TOPIC_NAME,
    ClientProps,
    TopicBasedRemoteLogMetadataManagerConfig,
)

log = logging.getLogger(__name__)

_INT32 = 0xFFFFFFFF
POLL_TIMEOUT_S = 0.1  # Kafka's ConsumerTask polls for 100 ms, so an assignment change or close is seen soon
OFFSETS_RETRY_INTERVAL_S = 5.0  # after a failed end-offsets lookup (Kafka: 5 minutes)


def _to_int32(v: int) -> int:
    v &= _INT32
    return v - (1 << 32) if v & 0x80000000 else v


def _java_long_hash(v: int) -> int:
    """Long.hashCode: (int) (v ^ (v >>> 32))."""
    u = v & 0xFFFFFFFFFFFFFFFF
    return _to_int32(u ^ (u >> 32))


class RemoteLogMetadataTopicPartitioner:
    """Kafka's RemoteLogMetadataTopicPartitioner: toPositive(murmur2(int32 bytes of
    Objects.hash(topicId.lsb, topicId.msb, partition))) % partitions."""

    def __init__(self, num_metadata_topic_partitions: int) -> None:
        self.num_partitions = num_metadata_topic_partitions

    def metadata_partition(self, tp: TopicIdPartition) -> int:
        msb = int.from_bytes(tp.topic_id[:8], "big", signed=True)
        lsb = int.from_bytes(tp.topic_id[8:], "big", signed=True)
        h = 1
        for element in (_java_long_hash(lsb), _java_long_hash(msb), _to_int32(tp.partition)):
            h = _to_int32(31 * h + element)
        return (arrow_records.murmur2((h & _INT32).to_bytes(4, "big")) & 0x7FFFFFFF) % self.num_partitions


def _event_partition(event: object) -> TopicIdPartition:
    if isinstance(event, RemoteLogSegmentMetadata):
        return event.topic_id_partition
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return event.remote_log_segment_id.topic_id_partition
    if isinstance(event, RemotePartitionDeleteMetadata):
        return event.topic_id_partition
    raise TypeError(f"not a remote log metadata event: {type(event).__name__}")


@dataclass
class _UserPartition:
    """Kafka's UserTopicIdPartition: a hosted partition and where its metadata lives."""

    tp: TopicIdPartition
    metadata_partition: int
    assigned: bool = False  # the consumer has picked it up
    initialized: bool = False  # its metadata partition was read to the end seen at assignment


class _ConsumerTask:
    """Kafka's ConsumerTask: the one thread that owns the consumer (see the module docstring)."""

    def __init__(self, store: RemotePartitionMetadataStore, partitioner: RemoteLogMetadataTopicPartitioner,
                 consumer_factory: Callable[[], Consumer], retry_interval_s: float) -> None:
        self.store = store
        self.partitioner = partitioner
        self._consumer_factory = consumer_factory
        self._retry_interval_s = retry_interval_s
        self._cond = threading.Condition()  # assignment changes, read progress, close
        self._closed = False
        self._user: dict[TopicIdPartition, _UserPartition] = {}  # what the broker asked for
        self._changed = True
        # the consumer thread's own state (read by writers under _cond)
        self._assigned_metadata: frozenset[int] = frozenset()
        self._read_offsets: dict[int, int] = {}  # metadata partition -> last offset read
        self._read_by_user: dict[TopicIdPartition, int] = {}  # user partition -> last offset applied
        self._processed: frozenset[TopicIdPartition] = frozenset()
        self._end_offsets: dict[int, tuple[int, int]] = {}  # metadata partition -> (start, end)
        self._offsets_failed_at: float | None = None
        self._all_initialized = False
        self.thread = threading.Thread(target=self._run, name="rlmm-consumer", daemon=True)

    # --- called from other threads -------------------------------------------------------

    def update_assignments(self, added: Iterable[TopicIdPartition], removed: Iterable[TopicIdPartition]) -> None:
        with self._cond:
            user = dict(self._user)
            for tp in added:
                user.setdefault(tp, _UserPartition(tp, self.partitioner.metadata_partition(tp)))
            for tp in removed:
                user.pop(tp, None)
            if user.keys() != self._user.keys():
                self._user = user
                self._changed = True
                self._cond.notify_all()

    def is_metadata_partition_requested(self, partition: int) -> bool:
        with self._cond:
            return any(u.metadata_partition == partition for u in self._user.values())

    def read_offset(self, partition: int) -> int | None:
        with self._cond:
            return self._read_offsets.get(partition)

    def wait_for(self, partition: int, offset: int, timeout_s: float) -> bool:
        """Until this consumer has read `offset` of the metadata partition; False on timeout or close."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._read_offsets.get(partition, -1) < offset:
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # --- the consumer thread --------------------------------------------------------

    def _run(self) -> None:
        consumer: Consumer | None = None
        failing = False
        try:
            while not self._closed:
                try:
                    if consumer is None:
                        consumer = self._consumer_factory()
                    self._ingest(consumer)
                    failing = False
                except Exception as exc:  # the broker restarting, a leader moving: retried
                    # one warning per outage, not one per retry
                    log.log(logging.DEBUG if failing else logging.WARNING,
                            "remote log metadata consumer: %s; retrying", exc)
                    failing = True
                    with self._cond:
                        self._changed = True  # redo the assignment on the next round
                        self._cond.wait(self._retry_interval_s)
        finally:
            if consumer is not None:
                try:
                    consumer.close()
                except Exception as exc:
                    log.debug("closing the remote log metadata consumer: %s", exc)

    def _ingest(self, consumer: Consumer) -> None:
        if self._changed:
            self._apply_assignments(consumer)
        with self._cond:
            while not self._closed and not self._changed and not self._assigned_metadata:
                self._cond.wait()  # nothing hosted here: nothing to read
            if self._closed or self._changed:
                return
        records = consumer.poll(POLL_TIMEOUT_S)
        for r in records:
            self._process(r.partition, r.offset, r.value)
        with self._cond:
            for p in self._assigned_metadata:
                pos = consumer.position(TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, p))
                if pos is not None and pos - 1 > self._read_offsets.get(p, -1):
                    self._read_offsets[p] = pos - 1
            self._cond.notify_all()
        self._maybe_mark_ready(consumer)

    def _process(self, partition: int, offset: int, value: bytes | None) -> None:
        if value is None:
            return
        try:
            event = metadata_serde.deserialize(value)
        except MetadataParseError as exc:
            log.error("skipping %s-%d offset %d: %s", REMOTE_LOG_METADATA_TOPIC_NAME, partition, offset, exc)
            return
        if isinstance(event, metadata_serde.RemoteLogSegmentMetadataSnapshot):
            return  # snapshot entries live in snapshot files, never in the topic
        tp = _event_partition(event)
        done = self._read_by_user.get(tp)
        if tp in self._processed and (done is None or done < offset):
            try:
                self.store.handle(event)
            except (LookupError, ValueError) as exc:
                log.warning("remote log metadata event at %s-%d offset %d not applied: %s",
                            REMOTE_LOG_METADATA_TOPIC_NAME, partition, offset, exc)
            self._read_by_user[tp] = offset

    def _apply_assignments(self, consumer: Consumer) -> None:
        """Kafka's maybeWaitForPartitionAssignments."""
        with self._cond:
            if self._closed or not self._changed:
                return
            snapshot = list(self._user.values())
            self._changed = False
        metadata_partitions = {u.metadata_partition for u in snapshot}
        tps = [TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, p) for p in sorted(metadata_partitions)]
        consumer.assign(tps)
        # a metadata partition gaining a user partition is read again from its start; the
        # per-user-partition read offsets keep the others from applying an event twice
        restart = {u.metadata_partition for u in snapshot if not u.assigned}
        with self._cond:
            for p in restart:
                self._read_offsets.pop(p, None)
            self._assigned_metadata = frozenset(metadata_partitions)
        consumer.seek_to([TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, p) for p in sorted(restart)], "earliest")
        for u in snapshot:
            if not u.assigned:
                self.store.maybe_load_partition(u.tp)
                u.assigned = True
        processed = frozenset(u.tp for u in snapshot)
        for tp in set(self._processed) - processed:
            self.store.clear_topic_partition(tp)
            self._read_by_user.pop(tp, None)
        self._processed = processed
        self._all_initialized = False
        self._fetch_end_offsets(consumer)

    def _fetch_end_offsets(self, consumer: Consumer) -> None:
        with self._cond:
            pending = sorted({u.metadata_partition for u in self._user.values() if u.assigned and not u.initialized})
        for p in pending:
            self._end_offsets.pop(p, None)
        if not pending:
            return
        tps = [TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, p) for p in pending]
        try:
            ends = consumer.admin.log_end_offsets(tps)
            starts = consumer.admin.log_start_offsets(tps)
        except Exception as exc:  # no leader yet: marked ready after a later lookup
            log.info("remote log metadata: cannot list the offsets of %s yet: %s", REMOTE_LOG_METADATA_TOPIC_NAME, exc)
            self._offsets_failed_at = time.monotonic()
            return
        self._offsets_failed_at = None
        for tp in tps:
            if tp in ends and tp in starts:
                self._end_offsets[tp.partition] = (starts[tp], ends[tp])

    def _maybe_mark_ready(self, consumer: Consumer) -> None:
        """Kafka's maybeMarkUserPartitionsAsReady."""
        if self._all_initialized:
            return
        if self._offsets_failed_at is not None and time.monotonic() - self._offsets_failed_at > OFFSETS_RETRY_INTERVAL_S:
            self._fetch_end_offsets(consumer)
        all_done = True
        with self._cond:
            users = list(self._user.values())
            read = dict(self._read_offsets)
        for u in users:
            if u.assigned and not u.initialized:
                holder = self._end_offsets.get(u.metadata_partition)
                if holder is not None:
                    start, end = holder
                    if read.get(u.metadata_partition, -1) + 1 >= end or start == end:
                        self.store.mark_initialized(u.tp)
                        u.initialized = True
            all_done = all_done and u.assigned and u.initialized
        self._all_initialized = all_done


class TopicBasedRemoteLogMetadataManager:
    """See the module docstring; implements log/remote/remote_log_metadata_manager.py."""

    def __init__(self, *, bootstrap_servers: str, node_id: int, configs: Mapping[str, Any],
                 security: ClientSecurity = PLAINTEXT,
                 security_factory: Callable[[Mapping[str, str]], ClientSecurity] = client_security,
                 standalone: bool = False) -> None:
        self.config = TopicBasedRemoteLogMetadataManagerConfig.parse(configs, node_id=node_id, standalone=standalone)
        self.node_id = node_id
        self._bootstrap = bootstrap_servers
        self._security = {name: self._client_security(props, security, security_factory)
                          for name, props in (("common", self.config.common), ("producer", self.config.producer),
                                              ("consumer", self.config.consumer))}
        self.partitioner = RemoteLogMetadataTopicPartitioner(self.config.metadata_topic_partitions_count)
        self.store = RemotePartitionMetadataStore()
        self._lock = threading.Lock()  # initialized/closing flags, pending assignments
        self._initialized = threading.Event()
        self._initialization_failed: str | None = None
        self._closing = threading.Event()
        self._pending: set[TopicIdPartition] = set()
        self._producer: Producer | None = None
        self._producer_lock = threading.Lock()
        self._consumer_task: _ConsumerTask | None = None
        self._init_thread: threading.Thread | None = None

    @staticmethod
    def _client_security(props: ClientProps, default: ClientSecurity,
                         factory: Callable[[Mapping[str, str]], ClientSecurity]) -> ClientSecurity:
        """The listener's security, unless the rlmm client properties set their own (Kafka: they
        override the endpoint's)."""
        sec = props.security_props()
        return factory(sec) if sec else default

    def _bootstrap_for(self, props: ClientProps) -> str:
        return props.props.get("bootstrap.servers") or self._bootstrap

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start initializing in the background (Kafka's configure)."""
        with self._lock:
            if self._init_thread is not None or self._closing.is_set():
                return
            self._init_thread = threading.Thread(target=self._initialize, name="rlmm-init", daemon=True)
            self._init_thread.start()

    def wait_initialized(self, timeout_s: float | None = None) -> bool:
        """True once the topic and the clients are ready (False on timeout or failure)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._initialized.is_set():
            if self._initialization_failed is not None or self._closing.is_set():
                return False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._initialized.wait(0.05 if left is None else min(0.05, left))
        return True

    @property
    def initialization_failed(self) -> str | None:
        return self._initialization_failed

    def _admin(self) -> AdminClient:
        c = self.config.common
        return AdminClient(self._bootstrap_for(c), client_id=f"{self.config.client_id_prefix}_admin",
                           request_timeout_s=c.int("request.timeout.ms", 30000) / 1000.0,
                           retries=c.int("retries", 5), retry_backoff_s=c.int("retry.backoff.ms", 100) / 1000.0,
                           security=self._security["common"])

    def _initialize(self) -> None:
        """Kafka's initializeResources."""
        cfg = self.config
        started = time.monotonic()
        interval = cfg.initialization_retry_interval_ms / 1000.0
        topic_ready = False
        attempts = 0
        admin = self._admin()
        try:
            while not self._closing.is_set():
                if (time.monotonic() - started) * 1000 > cfg.initialization_retry_max_timeout_ms:
                    self._fail(f"Timed out in initializing the resources, retried to initialize the resource for "
                               f"{cfg.initialization_retry_max_timeout_ms} ms.")
                    return
                try:
                    if not topic_ready:
                        topic_ready = self._create_topic(admin)
                    if topic_ready:
                        described = admin.describe_topics([REMOTE_LOG_METADATA_TOPIC_NAME])[REMOTE_LOG_METADATA_TOPIC_NAME]
                        if described.error != Errors.NONE:  # not in this node's metadata yet: retried
                            raise RemoteStorageError(f"{REMOTE_LOG_METADATA_TOPIC_NAME}: {described.error.name}")
                        partitions = len(described.partitions)
                        if partitions != cfg.metadata_topic_partitions_count:
                            self._fail(f"Existing topic partition count [{partitions}] is not same as the expected "
                                       f"partition count [{cfg.metadata_topic_partitions_count}]")
                            return
                        self._start_clients()
                        return
                except Exception as exc:
                    log.log(logging.DEBUG if attempts else logging.INFO,
                            "remote log metadata manager not initialized yet (%s); retrying every %d ms",
                            exc, cfg.initialization_retry_interval_ms)
                    attempts += 1
                self._closing.wait(interval)
        finally:
            admin.close()

    def _fail(self, message: str) -> None:
        log.error("remote log metadata manager: %s", message)
        self._initialization_failed = message

    def _create_topic(self, admin: AdminClient) -> bool:
        """True once `__remote_log_metadata` exists (created here or by another broker); raises
        when it cannot be created now."""
        cfg = self.config
        found = admin.describe_topics([REMOTE_LOG_METADATA_TOPIC_NAME]).get(REMOTE_LOG_METADATA_TOPIC_NAME)
        if found is not None and found.error == Errors.NONE:
            return True
        err, message = admin.create_topics({REMOTE_LOG_METADATA_TOPIC_NAME: (
            cfg.metadata_topic_partitions_count, cfg.metadata_topic_replication_factor, cfg.topic_configs())}
        )[REMOTE_LOG_METADATA_TOPIC_NAME]
        if err in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
            log.info("topic %s created with %d partitions, replication factor %d", REMOTE_LOG_METADATA_TOPIC_NAME,
                     cfg.metadata_topic_partitions_count, cfg.metadata_topic_replication_factor)
            return True
        # retried by the caller (logged once): too few brokers for the replication factor yet, ...
        raise RemoteStorageError(f"Encountered error while creating {REMOTE_LOG_METADATA_TOPIC_NAME} topic: "
                                 f"{err.name} {message or ''}".rstrip())

    def _new_producer(self) -> Producer:
        p = self.config.producer
        return Producer(self._bootstrap_for(p), acks=-1, linger_ms=0,
                        batch_size=p.int("batch.size", 16384), max_request_size=p.int("max.request.size", 1048576),
                        client_id=f"{self.config.client_id_prefix}_producer",
                        request_timeout_s=p.int("request.timeout.ms", 30000) / 1000.0,
                        retries=p.int("retries", 10), retry_backoff_s=p.int("retry.backoff.ms", 100) / 1000.0,
                        security=self._security["producer"])

    def _new_consumer(self) -> Consumer:
        c = self.config.consumer
        return Consumer(self._bootstrap_for(c), group_id=None, client_id=f"{self.config.client_id_prefix}_consumer",
                        auto_offset_reset="earliest", enable_auto_commit=False,
                        fetch_max_wait_ms=c.int("fetch.max.wait.ms", 500), fetch_min_bytes=c.int("fetch.min.bytes", 1),
                        fetch_max_bytes=c.int("fetch.max.bytes", 52428800),
                        max_partition_fetch_bytes=c.int("max.partition.fetch.bytes", 1048576),
                        request_timeout_s=c.int("request.timeout.ms", 30000) / 1000.0,
                        security=self._security["consumer"])

    def _start_clients(self) -> None:
        task = _ConsumerTask(self.store, self.partitioner, self._new_consumer,
                             self.config.initialization_retry_interval_ms / 1000.0 or 0.1)
        with self._lock:
            if self._closing.is_set():
                return
            self._producer = self._new_producer()
            self._consumer_task = task
            task.thread.start()
            if self._pending:
                self._assign(self._pending)
                self._pending.clear()
            self._initialized.set()
        log.info("Initialized topic-based RLMM resources successfully")

    def close(self) -> None:
        """Stop the threads and close the clients; later calls raise RemoteStorageError."""
        with self._lock:
            if self._closing.is_set():
                return
            self._closing.set()
            task, init = self._consumer_task, self._init_thread
        if task is not None:
            task.close()
        if init is not None:
            init.join(30)
        if task is not None:
            task.thread.join(30)
        if self._producer_lock.acquire(timeout=30):
            try:
                if self._producer is not None:
                    self._producer.close()
            except Exception as exc:
                log.debug("closing the remote log metadata producer: %s", exc)
            finally:
                self._producer_lock.release()
        self.store.close()

    def __enter__(self) -> TopicBasedRemoteLogMetadataManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure_initialized_and_not_closed(self) -> None:
        if self._initialization_failed is not None:
            raise RemoteStorageError(f"remote log metadata manager failed to initialize: {self._initialization_failed}")
        if self._closing.is_set() or not self._initialized.is_set():
            raise RemoteStorageError(f"This instance is in invalid state, initialized: {self._initialized.is_set()} "
                                     f"close: {self._closing.is_set()}")

    # --- writes ------------------------------------------------------------------------

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"Given remoteLogSegmentMetadata should have state as COPY_SEGMENT_STARTED but it "
                             f"contains state as: {metadata.state.name}")
        self._store(metadata.topic_id_partition, metadata)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        if update.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise ValueError("Given remoteLogSegmentMetadata should not have the state as: COPY_SEGMENT_STARTED")
        self._store(update.remote_log_segment_id.topic_id_partition, update)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        self._store(metadata.topic_id_partition, metadata)

    def _store(self, tp: TopicIdPartition, event: metadata_serde.RemoteLogMetadata) -> None:
        """Kafka's storeRemoteLogMetadata: published, acknowledged, then read back here."""
        self._ensure_initialized_and_not_closed()
        partition = self.partitioner.metadata_partition(tp)
        task = self._consumer_task
        assert task is not None and self._producer is not None
        if not task.is_metadata_partition_requested(partition):
            raise RemoteStorageError(f"This consumer is not assigned to the target partition {partition} (of {tp}); "
                                     "call on_partition_leadership_changes first")
        value = metadata_serde.serialize(event)
        with self._producer_lock:
            if self._closing.is_set():
                raise RemoteStorageError("the remote log metadata manager is closing")
            try:
                meta = self._producer.send(REMOTE_LOG_METADATA_TOPIC_NAME, value, partition=partition)
                self._producer.flush()
            except Exception as exc:
                raise RemoteStorageError(f"cannot publish remote log metadata of {tp}: {exc}") from exc
        if meta.error is not None or meta.offset < 0:
            raise RemoteStorageError(f"cannot publish remote log metadata of {tp}: {meta.error}")
        if not task.wait_for(partition, meta.offset, self.config.consume_wait_ms / 1000.0):
            read = task.read_offset(partition)
            raise RemoteStorageError(f"Timed out in catching up with the expected offset by consumer: "
                                     f"{REMOTE_LOG_METADATA_TOPIC_NAME}-{partition} offset {meta.offset}, read {read}")

    # --- reads -------------------------------------------------------------------------

    def remote_log_segment_metadata(self, tp: TopicIdPartition, epoch_for_offset: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        self._ensure_initialized_and_not_closed()
        return self.store.remote_log_segment_metadata(tp, offset, epoch_for_offset)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        self._ensure_initialized_and_not_closed()
        return self.store.highest_log_offset(tp, leader_epoch)

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        self._ensure_initialized_and_not_closed()
        return iter(self.store.list_remote_log_segments(tp, leader_epoch))

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        self._ensure_initialized_and_not_closed()
        return self.store.remote_log_size(tp, leader_epoch)

    def is_ready(self, tp: TopicIdPartition) -> bool:
        """Kafka's isReady: the partition's metadata was read up to where it stood when assigned."""
        return self.store.is_initialized(tp)

    def metadata_partition(self, tp: TopicIdPartition) -> int:
        return self.partitioner.metadata_partition(tp)

    def read_offset_for_partition(self, metadata_partition: int) -> int | None:
        task = self._consumer_task
        return task.read_offset(metadata_partition) if task is not None else None

    # --- partitions hosted here ----------------------------------------------------------

    def on_partition_leadership_changes(self, leaders: Iterable[TopicIdPartition],
                                        followers: Iterable[TopicIdPartition]) -> None:
        partitions = set(leaders) | set(followers)
        with self._lock:
            if self._closing.is_set():
                raise RemoteStorageError("This instance is in closing state")
            if not self._initialized.is_set():
                self._pending |= partitions
            else:
                self._assign(partitions)

    def _assign(self, partitions: Iterable[TopicIdPartition]) -> None:
        partitions = list(partitions)
        for tp in partitions:
            self.store.maybe_load_partition(tp)
        assert self._consumer_task is not None
        self._consumer_task.update_assignments(partitions, ())

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        partitions = set(partitions)
        with self._lock:
            if self._closing.is_set():
                raise RemoteStorageError("This instance is in closing state")
            if not self._initialized.is_set():
                self._pending -= partitions
            else:
                assert self._consumer_task is not None
                self._consumer_task.update_assignments((), partitions)


__all__ = ["RemoteLogMetadataTopicPartitioner", "TopicBasedRemoteLogMetadataManager"]
