"""The share coordinator service (Kafka's ShareCoordinatorService): routes a share partition's
state to the shard of its __share_group_state partition and runs the operation there.

Partition of a share partition: Utils.abs(key.hashCode()) % share.coordinator.state.topic.num.partitions
over Kafka's coordinator key string "groupId:topicId:partition" (SharePartitionKey.asCoordinatorKey,
the topic id in Kafka's base64 form), so a key lands on the same partition here and in Kafka.

__share_group_state is created on first use (FindCoordinator SHARE, a state RPC, the persister)
through the active controller: share.coordinator.state.topic.num.partitions partitions,
replication factor share.coordinator.state.topic.replication.factor (as Kafka: while fewer
brokers are unfenced, creation fails and callers get COORDINATOR_NOT_AVAILABLE), and Kafka's
topic configs (ShareCoordinatorService.shareGroupStateTopicConfigs): cleanup.policy=delete,
retention.ms=-1 (the coordinator, not retention, decides what is redundant),
compression.type=producer, segment.bytes=share.coordinator.state.topic.segment.bytes,
min.insync.replicas=share.coordinator.state.topic.min.isr (at most the replication factor, as
pybroker does for __transaction_state). Creation is serialised by a lock.

Cold partitions: every share.coordinator.cold.partition.snapshot.interval.ms each shard led here
re-snapshots the share partitions whose last snapshot is older than that (Kafka's job of that name).

Deleted topics: after every metadata change, each shard led here tombstones the state of the
share partitions whose topic id the image no longer has (Kafka's onTopicsDeleted).

Pruning (Kafka's pruning job): every share.coordinator.state.topic.prune.interval.ms the records
of each partition led here below the oldest latest-ShareSnapshot of its live share partitions
(ShareCoordinatorShard.last_redundant_offset), and below the high watermark, are deleted by
moving the log start offset (DeleteRecords' path, allowed on this internal topic).

Every operation is one share partition (Kafka schedules one per partition of a request). Reads
that record a new leader epoch and all writes go through the runtime's write path (appended,
replayed, answered once the high watermark covers them, share.coordinator.write.timeout.ms);
the summary too, with no record, as Kafka schedules it (pybroker's runtime answers a write
without records at once, not after the pending writes are replicated). A runtime failure becomes the partition's error as Kafka's
handleOperationException maps it (shard.operation_error): NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS as they are, a write not replicated in time COORDINATOR_NOT_AVAILABLE.

Concurrency: trio thread.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from typing import Any, cast

import trio

from pybroker.coordinators.partition_writer import PartitionWriter
from pybroker.coordinators.runtime import CoordinatorRuntime, ShardStatus, partition_for
from pybroker.coordinators.shard import CoordinatorResult, operation_error
from pybroker.coordinators.share import record_serde as serde
from pybroker.coordinators.share.share_coordinator_shard import (
    OpError,
    ReadAnswer,
    ShareCoordinatorShard,
    SummaryAnswer,
)
from pybroker.log.errors import LogError
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.share.persister import StateBatch

log = logging.getLogger("pybroker.share.coordinator")

SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"


def kafka_uuid_str(topic_id: bytes) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(bytes(topic_id)).rstrip(b"=").decode("ascii")


def coordinator_key(group_id: str, topic_id: bytes, partition: int) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey: "groupId:topicId:partition"."""
    return f"{group_id}:{kafka_uuid_str(topic_id)}:{partition}"


def parse_coordinator_key(key: str) -> tuple[str, bytes, int]:
    """(group id, topic id, partition) of a coordinator key; ValueError when it is not one
    (Kafka's SharePartitionKey.getInstance(String): the last two ':' tokens are a topic id and a
    partition, the rest the group id)."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise ValueError(f"Invalid key format: expected - groupId:topicId:partition, found - {key}")
    group_id, tid, part = parts
    try:
        raw = base64.urlsafe_b64decode(tid + "==")
        partition = int(part)
    except ValueError as exc:
        raise ValueError(f"Invalid key format: expected - groupId:topicId:partition, found - {key}") from exc
    if len(raw) != 16 or kafka_uuid_str(raw) != tid:
        raise ValueError(f"Invalid key format: expected - groupId:topicId:partition, found - {key}")
    return group_id, raw, partition


class ShareCoordinator:
    def __init__(self, broker_config: Any, replica_manager: PartitionWriter, controller: Any, image: Any,
                 spawn: Callable[..., Any]) -> None:
        self.config = broker_config
        self.controller = controller
        self.image = image
        self.rm = replica_manager
        per_snapshot = broker_config["share.coordinator.snapshot.update.records.per.snapshot"]
        self.runtime = CoordinatorRuntime(
            SHARE_GROUP_STATE_TOPIC_NAME, replica_manager,
            lambda index, timer: ShareCoordinatorShard(index, per_snapshot, image), spawn,
            commit_timeout_ms=broker_config["share.coordinator.write.timeout.ms"], decode=serde.decode,
            load_read_bytes=broker_config["share.coordinator.load.buffer.size"])
        self._create_lock = trio.Lock()
        self.spawn = spawn
        self._cleanups: set[int] = set()  # partitions whose deleted-topic cleanup is being written
        # Kafka's share-coordinator-metrics write sensor: WriteShareGroupState operations that
        # reached a shard, and their latency (request to answer) in milliseconds
        self.write_count = 0
        self.write_latency_sum_ms = 0.0
        self.write_latency_max_ms = 0.0
        self.last_pruned_offsets: dict[int, int] = {}  # partition -> log start offset the pruner set

    # ------------------------------------------------------------------ topic + routing

    def num_partitions(self) -> int:
        t = self.image.topic(SHARE_GROUP_STATE_TOPIC_NAME)
        if t is not None and t.partitions:
            return len(t.partitions)
        return int(self.config["share.coordinator.state.topic.num.partitions"])

    def partition_for_key(self, key: str) -> int:
        return partition_for(key, self.num_partitions())

    def partition_for(self, group_id: str, topic_id: bytes, partition: int) -> int:
        return self.partition_for_key(coordinator_key(group_id, topic_id, partition))

    def topic_configs(self) -> dict[str, str]:
        rf = int(self.config["share.coordinator.state.topic.replication.factor"])
        return {"cleanup.policy": "delete", "retention.ms": "-1", "compression.type": "producer",
                "segment.bytes": str(self.config["share.coordinator.state.topic.segment.bytes"]),
                "min.insync.replicas": str(min(rf, int(self.config["share.coordinator.state.topic.min.isr"])))}

    async def ensure_topic(self) -> bool:
        """Create __share_group_state if missing; False if it cannot be created now."""
        if self.image.topic(SHARE_GROUP_STATE_TOPIC_NAME) is not None:
            return True
        async with self._create_lock:
            if self.image.topic(SHARE_GROUP_STATE_TOPIC_NAME) is not None:
                return True
            rf = self.config["share.coordinator.state.topic.replication.factor"]
            n = self.config["share.coordinator.state.topic.num.partitions"]
            try:
                results = await self.controller.create_topics(
                    [(SHARE_GROUP_STATE_TOPIC_NAME, n, rf, {}, self.topic_configs())])
            except KafkaError as exc:
                log.warning("cannot create %s: %s", SHARE_GROUP_STATE_TOPIC_NAME, exc)
                return False
            if results[0].error and self.image.topic(SHARE_GROUP_STATE_TOPIC_NAME) is None:
                log.warning("cannot create %s: %s", SHARE_GROUP_STATE_TOPIC_NAME, results[0].message)
                return False
            log.info("created %s with %d partitions", SHARE_GROUP_STATE_TOPIC_NAME, n)
            return True

    def coordinator_node_of(self, index: int) -> int | None:
        """The broker leading __share_group_state-`index`, or None."""
        t = self.image.topic(SHARE_GROUP_STATE_TOPIC_NAME)
        reg = None if t is None else t.partitions.get(index)
        return None if reg is None or reg.leader < 0 else reg.leader

    def coordinator_node(self, key: str) -> int | None:
        return self.coordinator_node_of(self.partition_for_key(key))

    # ------------------------------------------------------------------ operations

    async def _write(self, group_id: str, topic_id: bytes, partition: int,
                     op: Callable[[ShareCoordinatorShard, int], CoordinatorResult]) -> Any:
        """Run a write operation on the key's shard; its response, or OpError for a runtime failure."""
        if not await self.ensure_topic():
            return OpError(Errors.COORDINATOR_NOT_AVAILABLE)
        index = self.partition_for(group_id, topic_id, partition)
        try:
            return await self.runtime.write(index, op)
        except LogError as exc:
            log.warning("%s-%d write failed: %s", SHARE_GROUP_STATE_TOPIC_NAME, index, exc)
            return OpError(operation_error(int(exc.code)))
        except KafkaError as exc:
            return OpError(operation_error(exc.code), exc.message if operation_error(exc.code) == exc.code else None)

    async def initialize_state(self, group_id: str, topic_id: bytes, partition: int, state_epoch: int,
                               start_offset: int) -> OpError | None:
        result: OpError | None = await self._write(
            group_id, topic_id, partition,
            lambda s, now: s.initialize(group_id, topic_id, partition, state_epoch, start_offset, now))
        return result

    async def read_state(self, group_id: str, topic_id: bytes, partition: int,
                         leader_epoch: int) -> ReadAnswer | OpError:
        result: ReadAnswer | OpError = await self._write(
            group_id, topic_id, partition, lambda s, now: s.read(group_id, topic_id, partition, leader_epoch, now))
        return result

    async def write_state(self, group_id: str, topic_id: bytes, partition: int, state_epoch: int,
                          leader_epoch: int, start_offset: int, batches: list[StateBatch]) -> OpError | None:
        started = time.monotonic()
        reached = False

        def op(s: ShareCoordinatorShard, now: int) -> CoordinatorResult:
            nonlocal reached
            reached = True
            return s.write(group_id, topic_id, partition, state_epoch, leader_epoch, start_offset, batches, now)
        result: OpError | None = await self._write(group_id, topic_id, partition, op)
        if reached:
            elapsed_ms = (time.monotonic() - started) * 1000
            self.write_count += 1
            self.write_latency_sum_ms += elapsed_ms
            self.write_latency_max_ms = max(self.write_latency_max_ms, elapsed_ms)
        return result

    async def delete_state(self, group_id: str, topic_id: bytes, partition: int) -> OpError | None:
        result: OpError | None = await self._write(group_id, topic_id, partition,
                                                   lambda s, now: s.delete(group_id, topic_id, partition))
        return result

    async def read_summary(self, group_id: str, topic_id: bytes, partition: int) -> SummaryAnswer | OpError:
        # a write operation with no record, as Kafka schedules it
        result: SummaryAnswer | OpError = await self._write(
            group_id, topic_id, partition,
            lambda s, now: CoordinatorResult(response=s.read_summary(group_id, topic_id, partition)))
        return result

    # ------------------------------------------------------------------ pruning

    async def prune_once(self) -> dict[int, int]:
        """Delete the records of every __share_group_state partition led here that no share
        partition needs any more (below the oldest latest-snapshot of its live keys, and
        committed): Kafka's ShareCoordinatorService pruning job. The new log start offsets by
        partition."""
        pruned: dict[int, int] = {}
        for index, ctx in list(self.runtime.shards.items()):
            if ctx.status != ShardStatus.ACTIVE:
                continue
            offset = cast(ShareCoordinatorShard, ctx.shard).last_redundant_offset()
            partition = self.rm.get_partition(SHARE_GROUP_STATE_TOPIC_NAME, index)
            if offset is None or partition is None or not partition.is_leader:
                continue
            offset = min(offset, partition.high_watermark)
            if offset <= partition.log.log_start_offset:
                continue
            rm: Any = self.rm
            statuses, _delayed = await rm.delete_records(0, [(SHARE_GROUP_STATE_TOPIC_NAME, index, offset)],
                                                         allow_internal_topic_deletion=True)
            if statuses[0].error_code:
                log.debug("pruning %s-%d below %d: error %d", SHARE_GROUP_STATE_TOPIC_NAME, index, offset,
                          statuses[0].error_code)
                continue
            pruned[index] = offset
            self.last_pruned_offsets[index] = offset
            log.debug("pruned %s-%d below offset %d", SHARE_GROUP_STATE_TOPIC_NAME, index, offset)
        return pruned

    async def run_pruner(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """prune_once every share.coordinator.state.topic.prune.interval.ms."""
        task_status.started()
        interval_s = max(0.01, self.config["share.coordinator.state.topic.prune.interval.ms"] / 1000)
        while not self.runtime.closed:
            await trio.sleep(interval_s)
            try:
                await self.prune_once()
            except Exception:  # a failed round is retried at the next interval
                log.exception("pruning %s failed", SHARE_GROUP_STATE_TOPIC_NAME)

    async def snapshot_cold_partitions(self) -> int:
        """Re-snapshot the share partitions whose last snapshot is older than
        share.coordinator.cold.partition.snapshot.interval.ms, in every partition led here (Kafka's
        cold-partition snapshot job: keeps the pruner moving past keys nobody writes). The number
        of partitions written to."""
        interval = int(self.config["share.coordinator.cold.partition.snapshot.interval.ms"])
        written = 0
        for index, ctx in list(self.runtime.shards.items()):
            if ctx.status != ShardStatus.ACTIVE:
                continue
            try:
                await self.runtime.write(index, lambda s, now: s.snapshot_cold_partitions(now, interval))
            except (KafkaError, LogError) as exc:  # the next round tries again
                log.info("%s-%d: cold-partition snapshot failed: %s", SHARE_GROUP_STATE_TOPIC_NAME, index, exc)
                continue
            written += 1
        return written

    async def run_cold_snapshotter(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """snapshot_cold_partitions every share.coordinator.cold.partition.snapshot.interval.ms."""
        task_status.started()
        interval_s = max(0.01, self.config["share.coordinator.cold.partition.snapshot.interval.ms"] / 1000)
        while not self.runtime.closed:
            await trio.sleep(interval_s)
            try:
                await self.snapshot_cold_partitions()
            except Exception:  # a failed round is retried at the next interval
                log.exception("cold-partition snapshots of %s failed", SHARE_GROUP_STATE_TOPIC_NAME)

    def on_metadata(self) -> None:
        """A metadata change: shards follow leadership, and share state of deleted topics goes
        (each shard knows its topic ids: one lookup per topic, not per share partition)."""
        self.runtime.on_metadata()
        self._cleanup_deleted_topics()

    def _cleanup_deleted_topics(self) -> None:
        """The state of share partitions whose topic is gone is deleted (tombstones written by each
        shard led here), as Kafka's ShareCoordinatorService.onTopicsDeleted does."""
        known = self.image.topics_by_id
        for index, ctx in list(self.runtime.shards.items()):
            if ctx.status != ShardStatus.ACTIVE or index in self._cleanups:
                continue
            gone = {t for t in cast(ShareCoordinatorShard, ctx.shard).topic_ids() if t not in known}
            if gone:
                self._cleanups.add(index)
                self.spawn(self._delete_topics, index, gone)

    async def _delete_topics(self, index: int, gone: set[bytes]) -> None:
        try:
            await self.runtime.write(index, lambda s, now: s.delete_topics(gone))
            log.info("%s-%d: deleted the share state of %d deleted topic(s)", SHARE_GROUP_STATE_TOPIC_NAME,
                     index, len(gone))
        except (KafkaError, LogError) as exc:  # the next metadata change tries again
            log.info("%s-%d: deleting the share state of deleted topics failed: %s", SHARE_GROUP_STATE_TOPIC_NAME,
                     index, exc)
        except Exception:  # never the broker's nursery: the next metadata change tries again
            log.exception("%s-%d: deleting the share state of deleted topics failed", SHARE_GROUP_STATE_TOPIC_NAME,
                          index)
        finally:
            self._cleanups.discard(index)

    def shutdown(self) -> None:
        self.runtime.close()
