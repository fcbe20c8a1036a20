"""The share coordinator's shard for one __share_group_state partition (Kafka's ShareCoordinatorShard).

State, per share partition key (group id, topic id, partition) -- Kafka's SharePartitionKey:
the current ShareGroupOffset (snapshot epoch, state epoch, leader epoch, start offset,
delivery-complete count, create/write timestamps, batches), the highest leader epoch and
state epoch seen (the fences), and the number of ShareUpdate records since the last snapshot.
All of it is rebuilt by `replay` from the records, so a reload gives the same state.

Operations (each returns a CoordinatorResult whose records the runtime appends and replays;
a refusal has no records and its error in the response):

- initialize: a ShareSnapshot with the request's state epoch and start offset, leader epoch -1,
  no batches, the next snapshot epoch. FENCED_STATE_EPOCH below the state epoch recorded.
- read (Kafka's readStateAndMaybeUpdateLeaderEpoch): INVALID_REQUEST for a key never
  initialized, FENCED_LEADER_EPOCH below the leader epoch recorded; a new leader epoch is
  recorded by writing a state record with it (so it survives a reload), -1 records nothing.
- write: INVALID_REQUEST for a key never initialized, FENCED_LEADER_EPOCH /
  FENCED_STATE_EPOCH below the recorded ones (-1 is not checked); then one record: a
  ShareUpdate holding the written batches (combined among themselves, cut at the start
  offset), or every share.coordinator.snapshot.update.records.per.snapshot updates a
  ShareSnapshot with the whole state combined (state_batch_combiner). A write moves neither
  epoch: its record carries the current leader and state epochs.
- snapshot_cold_partitions: a ShareSnapshot of every key whose last snapshot is older than
  share.coordinator.cold.partition.snapshot.interval.ms (same state, next snapshot epoch, new
  write timestamp), so that the pruner can pass keys nobody writes; nothing when every key's
  latest snapshot is already such a re-snapshot (a quiet partition stays quiet).
- delete: a tombstone (nothing for a key without state).
- read_summary: state epoch, leader epoch and start offset of the state (a read, no record, no
  leader-epoch fence); Kafka's defaults (0, 0, -1) for a key never initialized.

Every operation first refuses a negative partition (INVALID_REQUEST) and a topic partition the
metadata image does not have (UNKNOWN_TOPIC_OR_PARTITION), in Kafka's order.

Pruning: the offset of the latest ShareSnapshot of every key is tracked (Kafka's
ShareCoordinatorOffsetsManager); `last_redundant_offset()` is the lowest of them, below which
no record is needed to rebuild the state (a tombstone's key needs nothing).

Concurrency: one thread at a time (the runtime's trio thread, or the loader's worker thread
before the shard is installed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from pybroker.coordinators.record_serde import CoordinatorRecord
from pybroker.coordinators.shard import CoordinatorResult
from pybroker.coordinators.share import record_serde as serde
from pybroker.coordinators.share.state_batch_combiner import combine_state_batches
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors
from pybroker.share.persister import NO_EPOCH, UNINITIALIZED_START_OFFSET, StateBatch

log = logging.getLogger("pybroker.share.coordinator")

Key = tuple[str, bytes, int]  # (group id, topic id, partition): Kafka's SharePartitionKey

DEFAULT_STATE_EPOCH = 0  # Kafka's PartitionFactory.DEFAULT_STATE_EPOCH
DEFAULT_LEADER_EPOCH = 0  # Kafka's PartitionFactory.DEFAULT_LEADER_EPOCH
UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1

NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
READ_UNINITIALIZED_SHARE_PARTITION = "Read state called on uninitialized share partition."
WRITE_UNINITIALIZED_SHARE_PARTITION = "Write state called on uninitialized share partition."


@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """The state of one share partition (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = UNINITIALIZED_DELIVERY_COMPLETE_COUNT
    create_timestamp: int = -1
    write_timestamp: int = -1
    batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class OpError:
    """A refused operation: the error code and message for the partition's response entry."""

    code: int
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ReadAnswer:
    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class SummaryAnswer:
    state_epoch: int
    leader_epoch: int
    start_offset: int


def _batches(raw: Any) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in raw)


def _snapshot_value(o: ShareGroupOffset) -> m.ShareSnapshotValue:
    return m.ShareSnapshotValue(
        snapshot_epoch=o.snapshot_epoch, state_epoch=o.state_epoch, leader_epoch=o.leader_epoch,
        start_offset=o.start_offset, delivery_complete_count=o.delivery_complete_count,
        create_timestamp=o.create_timestamp, write_timestamp=o.write_timestamp,
        state_batches=[m.ShareSnapshotValue.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                       delivery_state=b.delivery_state,
                                                       delivery_count=b.delivery_count) for b in o.batches])


def _update_value(o: ShareGroupOffset) -> m.ShareUpdateValue:
    return m.ShareUpdateValue(
        snapshot_epoch=o.snapshot_epoch, leader_epoch=o.leader_epoch, start_offset=o.start_offset,
        delivery_complete_count=o.delivery_complete_count,
        state_batches=[m.ShareUpdateValue.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                     delivery_state=b.delivery_state,
                                                     delivery_count=b.delivery_count) for b in o.batches])


class ShareCoordinatorShard:
    def __init__(self, partition: int, snapshot_update_records_per_snapshot: int = 500, image: Any = None) -> None:
        self.partition = partition
        self.updates_per_snapshot = snapshot_update_records_per_snapshot
        self.image = image  # the broker's MetadataImage (topics_by_id); None refuses every key
        self.states: dict[Key, ShareGroupOffset] = {}
        self.leader_epochs: dict[Key, int] = {}
        self.state_epochs: dict[Key, int] = {}
        self.update_counts: dict[Key, int] = {}
        self.snapshot_offsets: dict[Key, int] = {}  # offset of each key's latest ShareSnapshot
        self.topic_keys: dict[bytes, int] = {}  # topic id -> how many keys of `states` are of it

    # ------------------------------------------------------------------ runtime hooks

    def on_loaded(self, now_ms: int) -> None:
        log.debug("__share_group_state-%d loaded: %d share partitions", self.partition, len(self.states))

    def on_unloaded(self) -> None:
        pass

    def replay(self, record: CoordinatorRecord, offset: int = -1, now_ms: int | None = None) -> None:
        k = record.key
        key: Key = (k.group_id, bytes(k.topic_id), k.partition)
        if record.value is None:  # tombstone: the share partition's state is deleted
            if key in self.states:
                self._count_topic(key[1], -1)
            for d in (self.states, self.leader_epochs, self.state_epochs, self.update_counts, self.snapshot_offsets):
                d.pop(key, None)
            return
        if key not in self.states:
            self._count_topic(key[1], 1)
        v = record.value
        if record.key_version == serde.SHARE_SNAPSHOT_RECORD_TYPE:
            self._raise_epoch(self.leader_epochs, key, v.leader_epoch)
            self._raise_epoch(self.state_epochs, key, v.state_epoch)
            self.states[key] = ShareGroupOffset(v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
                                                v.delivery_complete_count, v.create_timestamp, v.write_timestamp,
                                                _batches(v.state_batches))
            # Kafka resets the count once it reached the cadence (the snapshot a write made)
            if self.update_counts.get(key, 0) >= self.updates_per_snapshot:
                self.update_counts[key] = 0
            if offset >= 0:
                self.snapshot_offsets[key] = offset
        elif record.key_version == serde.SHARE_UPDATE_RECORD_TYPE:
            self._raise_epoch(self.leader_epochs, key, v.leader_epoch)
            cur = self.states.get(key)
            batches = _batches(v.state_batches)
            if cur is None:
                self.states[key] = ShareGroupOffset(v.snapshot_epoch, NO_EPOCH, v.leader_epoch,
                                                    v.start_offset, v.delivery_complete_count, -1, -1,
                                                    tuple(combine_state_batches((), batches, v.start_offset)))
            else:
                start = cur.start_offset if v.start_offset == -1 else v.start_offset
                self.states[key] = replace(
                    cur, start_offset=start,
                    leader_epoch=cur.leader_epoch if v.leader_epoch == -1 else v.leader_epoch,
                    delivery_complete_count=(cur.delivery_complete_count if v.delivery_complete_count == -1
                                             else v.delivery_complete_count),
                    batches=tuple(combine_state_batches(cur.batches, batches, start)))
            # Kafka's count: 0 at the first update of a key, +1 at each next one
            count = self.update_counts.get(key)
            self.update_counts[key] = 0 if count is None else count + 1

    def _count_topic(self, topic_id: bytes, delta: int) -> None:
        n = self.topic_keys.get(topic_id, 0) + delta
        if n > 0:
            self.topic_keys[topic_id] = n
        else:
            self.topic_keys.pop(topic_id, None)

    @staticmethod
    def _raise_epoch(epochs: dict[Key, int], key: Key, epoch: int) -> None:
        epochs[key] = max(epochs.get(key, epoch), epoch)  # an epoch never goes back

    # ------------------------------------------------------------------ checks

    def _known_partition(self, topic_id: bytes, partition: int) -> bool:
        image = self.image
        if image is None:
            return False
        t = image.topics_by_id.get(bytes(topic_id))
        return t is not None and partition in t.partitions

    def _common_error(self, topic_id: bytes, partition: int) -> OpError | None:
        if partition < 0:
            return OpError(Errors.INVALID_REQUEST, NEGATIVE_PARTITION_ID)
        return None

    def _image_error(self, topic_id: bytes, partition: int) -> OpError | None:
        if not self._known_partition(topic_id, partition):
            return OpError(Errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        return None

    # ------------------------------------------------------------------ operations

    def initialize(self, group_id: str, topic_id: bytes, partition: int, state_epoch: int, start_offset: int,
                   now_ms: int) -> CoordinatorResult:
        """InitializeShareGroupState for one share partition; response None or OpError."""
        key: Key = (group_id, bytes(topic_id), partition)
        err = self._common_error(topic_id, partition)
        if err is None and state_epoch != -1 and self.state_epochs.get(key, state_epoch) > state_epoch:
            err = OpError(Errors.FENCED_STATE_EPOCH, "The share coordinator rejected the request because "
                                                     "the share-group state epoch did not match.")
        err = err or self._image_error(topic_id, partition)
        if err is not None:
            return CoordinatorResult(response=err)
        cur = self.states.get(key)
        state = ShareGroupOffset(
            snapshot_epoch=0 if cur is None else cur.snapshot_epoch + 1, state_epoch=state_epoch,
            leader_epoch=NO_EPOCH, start_offset=start_offset,
            delivery_complete_count=(UNINITIALIZED_DELIVERY_COMPLETE_COUNT
                                     if start_offset == UNINITIALIZED_START_OFFSET else 0),
            create_timestamp=now_ms, write_timestamp=now_ms)
        return CoordinatorResult(records=[serde.snapshot_record(group_id, key[1], partition, _snapshot_value(state))])

    def read(self, group_id: str, topic_id: bytes, partition: int, leader_epoch: int,
             now_ms: int) -> CoordinatorResult:
        """ReadShareGroupState: response ReadAnswer or OpError; records the leader epoch."""
        key: Key = (group_id, bytes(topic_id), partition)
        err = self._common_error(topic_id, partition)
        cur = self.states.get(key)
        if err is None and cur is None:
            err = OpError(Errors.INVALID_REQUEST, READ_UNINITIALIZED_SHARE_PARTITION)
        if err is None and self.leader_epochs.get(key, leader_epoch) > leader_epoch:
            err = OpError(Errors.FENCED_LEADER_EPOCH, "The leader epoch in the request is older than the "
                                                      "epoch on the broker.")
        err = err or self._image_error(topic_id, partition)
        if err is not None or cur is None:
            return CoordinatorResult(response=err)
        answer = ReadAnswer(cur.state_epoch, cur.start_offset, cur.batches)
        if leader_epoch == -1 or self.leader_epochs.get(key) == leader_epoch:
            return CoordinatorResult(response=answer)
        log.info("share partition %s-%s-%d: read by a new leader (epoch %d)", group_id, topic_id.hex(), partition,
                 leader_epoch)
        record = self._state_record(key, cur, leader_epoch, cur.start_offset, cur.delivery_complete_count, (), now_ms)
        return CoordinatorResult(records=[record], response=answer)

    def write(self, group_id: str, topic_id: bytes, partition: int, state_epoch: int, leader_epoch: int,
              start_offset: int, batches: list[StateBatch], now_ms: int,
              delivery_complete_count: int = UNINITIALIZED_DELIVERY_COMPLETE_COUNT) -> CoordinatorResult:
        """WriteShareGroupState: response None or OpError."""
        key: Key = (group_id, bytes(topic_id), partition)
        err = self._common_error(topic_id, partition)
        cur = self.states.get(key)
        if err is None and cur is None:
            err = OpError(Errors.INVALID_REQUEST, WRITE_UNINITIALIZED_SHARE_PARTITION)
        if err is None and leader_epoch != -1 and self.leader_epochs.get(key, leader_epoch) > leader_epoch:
            err = OpError(Errors.FENCED_LEADER_EPOCH, "The leader epoch in the request is older than the "
                                                      "epoch on the broker.")
        if err is None and state_epoch != -1 and self.state_epochs.get(key, state_epoch) > state_epoch:
            err = OpError(Errors.FENCED_STATE_EPOCH, "The share coordinator rejected the request because "
                                                     "the share-group state epoch did not match.")
        err = err or self._image_error(topic_id, partition)
        if err is not None or cur is None:
            return CoordinatorResult(response=err)
        record = self._state_record(key, cur, cur.leader_epoch, start_offset, delivery_complete_count,
                                    tuple(batches), now_ms)
        return CoordinatorResult(records=[record])

    def _state_record(self, key: Key, cur: ShareGroupOffset, leader_epoch: int, start_offset: int,
                      delivery_complete_count: int, batches: tuple[StateBatch, ...], now_ms: int) -> CoordinatorRecord:
        """Kafka's generateShareStateRecord: a ShareSnapshot of the whole state (fresh timestamps, the
        state epoch kept) once the key has had snapshot.update.records.per.snapshot updates since
        its last one, else a ShareUpdate of the given batches. `leader_epoch` is the record's (the
        current one for a write: only a read moves it)."""
        group_id, topic_id, partition = key
        if self.update_counts.get(key, 0) >= self.updates_per_snapshot:
            start = cur.start_offset if start_offset == -1 else start_offset
            snap = ShareGroupOffset(
                snapshot_epoch=cur.snapshot_epoch + 1, state_epoch=cur.state_epoch, leader_epoch=leader_epoch,
                start_offset=start,
                delivery_complete_count=(cur.delivery_complete_count if delivery_complete_count == -1
                                         else delivery_complete_count),
                create_timestamp=now_ms, write_timestamp=now_ms,
                batches=tuple(combine_state_batches(cur.batches, batches, start)))
            return serde.snapshot_record(group_id, topic_id, partition, _snapshot_value(snap))
        update = ShareGroupOffset(
            snapshot_epoch=cur.snapshot_epoch, state_epoch=cur.state_epoch, leader_epoch=leader_epoch,
            start_offset=start_offset, delivery_complete_count=delivery_complete_count,
            batches=tuple(combine_state_batches((), batches, start_offset)))
        return serde.update_record(group_id, topic_id, partition, _update_value(update))

    def delete(self, group_id: str, topic_id: bytes, partition: int) -> CoordinatorResult:
        """DeleteShareGroupState: response None or OpError; a key without state needs no record."""
        key: Key = (group_id, bytes(topic_id), partition)
        err = self._common_error(topic_id, partition) or self._image_error(topic_id, partition)
        if err is not None:
            return CoordinatorResult(response=err)
        if key not in self.states:
            return CoordinatorResult()
        return CoordinatorResult(records=[serde.tombstone(group_id, key[1], partition)])

    def read_summary(self, group_id: str, topic_id: bytes, partition: int) -> SummaryAnswer | OpError:
        """ReadShareGroupStateSummary (an admin read: no leader-epoch fencing, nothing written)."""
        key: Key = (group_id, bytes(topic_id), partition)
        err = self._common_error(topic_id, partition) or self._image_error(topic_id, partition)
        if err is not None:
            return err
        cur = self.states.get(key)
        if cur is None:  # Kafka's PartitionFactory defaults
            return SummaryAnswer(DEFAULT_STATE_EPOCH, DEFAULT_LEADER_EPOCH, UNINITIALIZED_START_OFFSET)
        return SummaryAnswer(cur.state_epoch, cur.leader_epoch, cur.start_offset)

    def snapshot_cold_partitions(self, now_ms: int, interval_ms: int) -> CoordinatorResult:
        """Kafka's snapshotColdPartitions (see the module docstring)."""
        if all(o.create_timestamp != o.write_timestamp for o in self.states.values()):
            return CoordinatorResult()  # every snapshot is already a cold re-snapshot: quiet
        records = []
        for (group_id, topic_id, partition), o in sorted(self.states.items()):
            if now_ms - o.write_timestamp >= interval_ms:
                records.append(serde.snapshot_record(group_id, topic_id, partition, _snapshot_value(
                    replace(o, snapshot_epoch=o.snapshot_epoch + 1, write_timestamp=now_ms))))
        return CoordinatorResult(records=records)

    def delete_topics(self, topic_ids: set[bytes]) -> CoordinatorResult:
        """Tombstones for every share partition of the deleted topics (Kafka's
        maybeCleanupShareState, run when the metadata image loses a topic)."""
        return CoordinatorResult(records=[serde.tombstone(g, t, p) for g, t, p in sorted(self.states)
                                          if t in topic_ids])

    def topic_ids(self) -> set[bytes]:
        return set(self.topic_keys)

    # ------------------------------------------------------------------ pruning

    def last_redundant_offset(self) -> int | None:
        """The lowest offset whose records are still needed (Kafka's lastRedundantOffset): every
        record below the oldest latest-snapshot of the live keys can be deleted. None when a key
        has no snapshot offset known (state from ShareUpdates only) or no key has state."""
        if not self.states or any(k not in self.snapshot_offsets for k in self.states):
            return None
        return min(self.snapshot_offsets[k] for k in self.states)
