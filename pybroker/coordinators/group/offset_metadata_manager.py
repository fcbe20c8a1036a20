"""Committed offsets of one __consumer_offsets partition (Kafka's OffsetMetadataManager).

State: group id -> (topic, partition) -> OffsetAndMetadata. Every change is an
OffsetCommit record (type 1 key; value v3, or v1 when the commit carries an expire
timestamp) or its tombstone, and `replay()` is the only code that changes the state, both
when writing and when loading. A commit to a group that does not exist (generation -1,
assign() + commit) creates an Empty classic group, on write and on replay alike, so such a
group is listed and described as "Empty" (CLIENTS.md pitfall 11) — unless a KIP-848 consumer
group holds the id: its commits are validated by member id and member epoch (OffsetCommit v9:
UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; older versions from its members UNSUPPORTED_VERSION).

Transactional offsets (KIP-98/KIP-447, Kafka's pendingTransactionalOffsets): an OffsetCommit
record in a transactional batch (TxnOffsetCommit) is replayed into `pending[producer id]`, not
into the committed offsets, and the group is noted in `open_txns_by_group`. The producer's
COMMIT/ABORT marker on this partition (`replay_end_transaction_marker`) moves its pending
offsets into the committed ones -- per partition only when the pending record's offset in
__consumer_offsets is larger than the committed one's, so a later plain commit wins -- or
drops them. A tombstone removes the partition's committed offset and every pending one.
OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for a partition with pending
offsets; retention never expires such a partition, nor deletes a group with an open
transaction.

Retention (offsets.retention.minutes): `cleanup_expired(now_ms)` returns tombstones for
offsets of Empty groups older than the retention — measured from when the group became
Empty, or from the commit for groups that never had members — and for unsubscribed topics
of active consumer groups; an Empty group left without offsets is deleted.

Visibility (Kafka's runtime reads at the last committed offset): a change is replayed when it
is appended, before the partition's high watermark covers it, and a leader that loses its
uncommitted tail (killed, or cut off and truncated by the next leader) never had it committed.
So OffsetFetch answers what the state was at the high watermark: `set_committed_offset(hw)`
(the runtime calls it before every read, write and load) drops the history of changes the HW
now covers, and each change at or above it keeps the value it replaced
(`uncommitted[(group, partition)]`, oldest first), so a read answers the value before the
oldest uncommitted change. Without a committed offset (no runtime: unit tests) everything is
visible at once.

Concurrency: one thread; handlers take `now_ms`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.group.classic_group import ClassicGroup, ClassicGroupState
from pybroker.coordinators.group.consumer_group import ConsumerGroup
from pybroker.coordinators.group.consumer_group_manager import ConsumerGroupManager
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.group_metadata_manager import GroupMetadataManager
from pybroker.coordinators.shard import CoordinatorResult
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import OffsetCommitRequest, OffsetCommitResponse

S = ClassicGroupState
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1
    record_offset: int = -1  # offset of the OffsetCommit record in __consumer_offsets


class OffsetMetadataManager:
    def __init__(self, config: GroupConfig, groups: GroupMetadataManager,
                 consumer_groups: ConsumerGroupManager | None = None) -> None:
        self.config = config
        self.groups = groups
        self.consumer_groups = consumer_groups
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        # producer id -> group -> partition -> offset of its ongoing transaction
        self.pending: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        self.open_txns_by_group: dict[str, set[int]] = {}
        # the high watermark of the partition (None: everything is committed) and, per
        # (group, partition), the changes at or above it: (change offset, value it replaced)
        self.committed_end: int | None = None
        self.uncommitted: dict[tuple[str, TopicPartition], deque[tuple[int, OffsetAndMetadata | None]]] = {}
        self._uncommitted_order: deque[tuple[int, tuple[str, TopicPartition]]] = deque()

    # ------------------------------------------------------------------ visibility

    def set_committed_offset(self, offset: int) -> None:
        """The partition's high watermark moved to `offset`: changes below it are committed."""
        self.committed_end = offset
        order = self._uncommitted_order
        while order and order[0][0] < offset:
            _, key = order.popleft()
            changes = self.uncommitted.get(key)
            if changes:
                changes.popleft()
                if not changes:
                    del self.uncommitted[key]

    def _set(self, group_id: str, tp: TopicPartition, om: OffsetAndMetadata | None, change_offset: int) -> None:
        """Make `om` (None: removed) the committed offset of (group_id, tp), changed by the record
        at `change_offset`; a change above the high watermark remembers what it replaced."""
        per_group = self.offsets.get(group_id)
        previous = per_group.get(tp) if per_group is not None else None
        if self.committed_end is not None and change_offset >= self.committed_end:
            key = (group_id, tp)
            self.uncommitted.setdefault(key, deque()).append((change_offset, previous))
            self._uncommitted_order.append((change_offset, key))
        if om is None:
            if per_group is not None:
                per_group.pop(tp, None)
                if not per_group:
                    del self.offsets[group_id]
        else:
            self.offsets.setdefault(group_id, {})[tp] = om

    def _visible(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets as of the high watermark."""
        current = self.offsets.get(group_id, {})
        if not self.uncommitted:
            return current
        out = dict(current)
        for (gid, tp), changes in self.uncommitted.items():
            if gid == group_id and changes:
                before = changes[0][1]
                if before is None:
                    out.pop(tp, None)
                else:
                    out[tp] = before
        return out

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.get(group_id))

    def group_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.offsets.get(group_id, {})

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """Kafka's hasPendingTransactionalOffsets."""
        for producer_id in self.open_txns_by_group.get(group_id, ()):
            if (topic, partition) in self.pending.get(producer_id, {}).get(group_id, {}):
                return True
        return False

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for producer_id in self.open_txns_by_group.get(group_id, ()):
            out.update(self.pending.get(producer_id, {}).get(group_id, {}))
        return out

    # ------------------------------------------------------------------ replay

    def replay(self, key: object, value: object | None, now_ms: int, offset: int = -1,
               producer_id: int = -1) -> None:
        """Apply an OffsetCommit record at `offset`; `producer_id` >= 0: it came in a
        transactional batch of that producer and stays pending until its marker."""
        group_id, topic, partition = key.group, key.topic, key.partition  # type: ignore[attr-defined]
        tp = (topic, partition)
        if value is None:
            self._set(group_id, tp, None, offset)
            # the tombstone removes the partition's pending offsets too (the open transactions stay open)
            for pid in self.open_txns_by_group.get(group_id, ()):
                self.pending.get(pid, {}).get(group_id, {}).pop(tp, None)
            return
        # an offsets-only group exists as an Empty classic group
        if self._consumer_group(group_id) is None:
            self.groups.get_or_create(group_id, now_ms)
        om = OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata,  # type: ignore[attr-defined]
                               value.commit_timestamp, value.expire_timestamp,  # type: ignore[attr-defined]
                               offset)
        if producer_id >= 0:
            self.pending.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = om
            self.open_txns_by_group.setdefault(group_id, set()).add(producer_id)
        else:
            self._set(group_id, tp, om, offset)

    def replay_end_transaction_marker(self, producer_id: int, commit: bool, offset: int = -1) -> None:
        """The producer's COMMIT/ABORT marker at `offset`: its pending offsets become committed
        (each only if its record is newer than the committed one's) or are dropped."""
        pending = self.pending.pop(producer_id, None)
        if pending is None:
            return
        for group_id in pending:
            open_txns = self.open_txns_by_group.get(group_id)
            if open_txns is not None:
                open_txns.discard(producer_id)
                if not open_txns:
                    del self.open_txns_by_group[group_id]
        if not commit:
            return
        for group_id, offsets in pending.items():
            for tp, om in offsets.items():
                committed = self.offsets.get(group_id, {})
                existing = committed.get(tp)
                if existing is None or om.record_offset > existing.record_offset:
                    self._set(group_id, tp, om, offset)

    # ------------------------------------------------------------------ OffsetCommit

    def _consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return None if self.consumer_groups is None else self.consumer_groups.group(group_id)

    def _validate_commit(self, req: OffsetCommitRequest, version: int, now_ms: int) -> int:
        group = self.groups.group(req.group_id)
        generation = req.generation_id_or_member_epoch if version >= 1 else -1
        member_id = (req.member_id or "") if version >= 1 else ""
        instance_id = req.group_instance_id if version >= 7 else None
        cg = self._consumer_group(req.group_id)
        if cg is not None and self.consumer_groups is not None:
            return self.consumer_groups.validate_offset_commit(cg, member_id, generation, version)
        if group is None:
            if generation < 0:
                self.groups.get_or_create(req.group_id, now_ms)
                return 0
            return Errors.GROUP_ID_NOT_FOUND if version >= 9 else Errors.ILLEGAL_GENERATION
        if group.state == S.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state == S.EMPTY:
            return 0
        if generation >= 0 or member_id or instance_id is not None:
            error = group.member_identity_error(member_id, instance_id)
            if error is not None:
                return error
            if generation != group.generation_id:
                return Errors.ILLEGAL_GENERATION
        elif group.state != S.EMPTY:
            return Errors.UNKNOWN_MEMBER_ID
        if group.state == S.COMPLETING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS
        return 0

    def commit(self, req: OffsetCommitRequest, version: int, now_ms: int) -> CoordinatorResult:
        err: int
        if not req.group_id:
            err = Errors.INVALID_GROUP_ID
        else:
            err = self._validate_commit(req, version, now_ms)
        retention = req.retention_time_ms if 2 <= version <= 4 else -1
        # Kafka adds them as Java longs, so a retention near Long.MAX_VALUE wraps (a negative
        # expiry, kept here as "none": the group's offsets.retention applies); unwrapped, the
        # sum would not fit the record's int64 field
        expire = (now_ms + retention + 2**63) % 2**64 - 2**63 if retention >= 0 else -1
        records = []
        topics_out = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                code = err
                metadata = p.committed_metadata or ""
                if code == 0 and len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                    code = Errors.OFFSET_METADATA_TOO_LARGE
                if code == 0:
                    epoch = p.committed_leader_epoch if version >= 6 else -1
                    records.append(serde.offset_commit_record(req.group_id, t.name, p.partition_index,
                                                              p.committed_offset, epoch, metadata, now_ms, expire))
                parts.append(OffsetCommitResponse.OffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=int(code)))
            topics_out.append(OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=parts))
        return CoordinatorResult(records=records,
                                 response=OffsetCommitResponse(throttle_time_ms=0, topics=topics_out))

    # ------------------------------------------------------------------ OffsetFetch

    def fetch(self, group_id: str, topics: Iterable[tuple[str, list[int]]] | None
              ) -> list[tuple[str, list[tuple[int, OffsetAndMetadata | None]]]]:
        """(topic, [(partition, committed or None)]) for the asked partitions, or every
        committed partition when `topics` is None. Pending transactional offsets are not
        committed offsets."""
        return [(topic, [(p, om) for p, om, _ in parts])
                for topic, parts in self.fetch_with_errors(group_id, topics, False)]

    def fetch_with_errors(self, group_id: str, topics: Iterable[tuple[str, list[int]]] | None,
                          require_stable: bool) -> list[tuple[str, list[tuple[int, OffsetAndMetadata | None, int]]]]:
        """As `fetch`, each partition with an error code: with require_stable a partition with
        pending transactional offsets is (partition, None, UNSTABLE_OFFSET_COMMIT), as Kafka's
        fetchOffsets/fetchAllOffsets answer (for `topics` None only committed partitions are
        listed, so a partition whose only offset is pending is left out, as in Kafka). Only
        what the high watermark covers is answered (the module docstring, "Visibility")."""
        committed = self._visible(group_id)
        unstable = self.pending_partitions(group_id) if require_stable else set()

        def entry(topic: str, p: int, om: OffsetAndMetadata | None) -> tuple[int, OffsetAndMetadata | None, int]:
            if (topic, p) in unstable:
                return p, None, int(Errors.UNSTABLE_OFFSET_COMMIT)
            return p, om, 0

        if topics is None:
            by_topic: dict[str, list[tuple[int, OffsetAndMetadata | None, int]]] = {}
            for (topic, partition), om in sorted(committed.items()):
                by_topic.setdefault(topic, []).append(entry(topic, partition, om))
            return list(by_topic.items())
        return [(topic, [entry(topic, p, committed.get((topic, p))) for p in partitions])
                for topic, partitions in topics]

    # ------------------------------------------------------------------ OffsetDelete

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]
                       ) -> tuple[int, list[tuple[str, list[tuple[int, int]]]], list[serde.CoordinatorRecord]]:
        """Kafka's deleteOffsets: (top-level error, per-partition errors, tombstones)."""
        group: ClassicGroup | ConsumerGroup | None = self._consumer_group(group_id)
        if group is None:
            group = self.groups.group(group_id)
            if group is None or group.state == S.DEAD:
                return Errors.GROUP_ID_NOT_FOUND, [], []
            if group.state != S.EMPTY and group.protocol_type != "consumer":
                return Errors.NON_EMPTY_GROUP, [], []
        committed = self.offsets.get(group_id, {})
        out = []
        records = []
        for topic, partitions in topics:
            subscribed = group.is_subscribed_to(topic)
            parts = []
            for p in partitions:
                if subscribed:
                    parts.append((p, int(Errors.GROUP_SUBSCRIBED_TO_TOPIC)))
                    continue
                # Kafka writes the tombstone for a pending transactional offset too
                if (topic, p) in committed or self.has_pending(group_id, topic, p):
                    records.append(serde.offset_commit_tombstone(group_id, topic, p))
                parts.append((p, 0))
            out.append((topic, parts))
        return 0, out, records

    def delete_all_offsets(self, group_id: str) -> list[serde.CoordinatorRecord]:
        """Tombstones for the group's committed and pending transactional offsets (Kafka's deleteAllOffsets)."""
        doomed = set(self.offsets.get(group_id, {})) | self.pending_partitions(group_id)
        return [serde.offset_commit_tombstone(group_id, t, p) for (t, p) in sorted(doomed)]

    # ------------------------------------------------------------------ retention

    def cleanup_expired(self, now_ms: int, delete_group: Callable[[str], list[serde.CoordinatorRecord]]
                        ) -> list[serde.CoordinatorRecord]:
        records: list[serde.CoordinatorRecord] = []
        retention = self.config.offsets_retention_ms
        for group_id, group in list(self.groups.groups.items()):
            committed = self.offsets.get(group_id, {})
            # a partition with pending transactional offsets does not expire, nor does a group
            # with an open transaction go (Kafka's cleanupExpiredOffsets)
            expired = [tp for tp, om in committed.items() if self._expired(group, tp[0], om, now_ms, retention)
                       and not self.has_pending(group_id, *tp)]
            records.extend(serde.offset_commit_tombstone(group_id, t, p) for t, p in sorted(expired))
            if (group.state == S.EMPTY and len(expired) == len(committed)
                    and group_id not in self.open_txns_by_group):
                records.extend(delete_group(group_id))
        if self.consumer_groups is not None:
            # consumer groups: offsets of topics no member subscribes to expire from their commit
            for group_id, cg in list(self.consumer_groups.groups.items()):
                committed = self.offsets.get(group_id, {})
                expired = [tp for tp, om in committed.items() if not cg.is_subscribed_to(tp[0]) and (
                    now_ms >= om.expire_timestamp_ms if om.expire_timestamp_ms >= 0
                    else now_ms - om.commit_timestamp_ms >= retention) and not self.has_pending(group_id, *tp)]
                records.extend(serde.offset_commit_tombstone(group_id, t, p) for t, p in sorted(expired))
                if cg.is_empty() and len(expired) == len(committed) and group_id not in self.open_txns_by_group:
                    records.extend(self.consumer_groups.delete_group_records(group_id))
        return records

    @staticmethod
    def _expired(group: ClassicGroup, topic: str, om: OffsetAndMetadata, now_ms: int, retention_ms: int) -> bool:
        if om.expire_timestamp_ms >= 0:
            return now_ms >= om.expire_timestamp_ms
        if group.state == S.EMPTY:
            base = (group.state_timestamp_ms if group.protocol_type and group.state_timestamp_ms >= 0
                    else om.commit_timestamp_ms)
            return now_ms - base >= retention_ms
        topics = group.subscribed_topics()
        if topics is not None and topic not in topics and group.state == S.STABLE:
            return now_ms - om.commit_timestamp_ms >= retention_ms
        return False
