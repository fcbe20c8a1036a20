"""Committed offsets of one __consumer_offsets partition (Kafka's OffsetMetadataManager).

State: group id -> (topic, partition) -> OffsetAndMetadata. Every change is an
OffsetCommit record (type 1 key; value v3, or v1 when the commit carries an expire
timestamp) or its tombstone, and `replay()` is the only code that changes the state, both
when writing and when loading. A commit to a group that does not exist (generation -1,
assign() + commit) creates an Empty classic group, on write and on replay alike, so such a
group is listed and described as "Empty" (CLIENTS.md pitfall 11) — unless a KIP-848 consumer
group holds the id: its commits are validated by member id and member epoch (OffsetCommit v9:
UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; older versions from its members UNSUPPORTED_VERSION).

Retention (offsets.retention.minutes): `cleanup_expired(now_ms)` returns tombstones for
offsets of Empty groups older than the retention — measured from when the group became
Empty, or from the commit for groups that never had members — and for unsubscribed topics
of active consumer groups; an Empty group left without offsets is deleted.

Concurrency: one thread; handlers take `now_ms`.
"""

from __future__ import annotations

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


class OffsetMetadataManager:
    def __init__(self, config: GroupConfig, groups: GroupMetadataManager,
                 consumer_groups: ConsumerGroupManager | None = None) -> None:
        self.config = config
        self.groups = groups
        self.consumer_groups = consumer_groups
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.get(group_id))

    def group_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.offsets.get(group_id, {})

    # ------------------------------------------------------------------ replay

    def replay(self, key: object, value: object | None, now_ms: int) -> None:
        group_id, topic, partition = key.group, key.topic, key.partition  # type: ignore[attr-defined]
        if value is None:
            per_group = self.offsets.get(group_id)
            if per_group is not None:
                per_group.pop((topic, partition), None)
                if not per_group:
                    del self.offsets[group_id]
            return
        # an offsets-only group exists as an Empty classic group
        if self._consumer_group(group_id) is None:
            self.groups.get_or_create(group_id, now_ms)
        self.offsets.setdefault(group_id, {})[(topic, partition)] = OffsetAndMetadata(
            value.offset, value.leader_epoch, value.metadata,  # type: ignore[attr-defined]
            value.commit_timestamp, value.expire_timestamp)  # type: ignore[attr-defined]

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
        if not req.group_id:
            err = Errors.INVALID_GROUP_ID
        else:
            err = self._validate_commit(req, version, now_ms)
        retention = req.retention_time_ms if 2 <= version <= 4 else -1
        expire = now_ms + retention if retention >= 0 else -1
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
        committed partition when `topics` is None."""
        committed = self.offsets.get(group_id, {})
        if topics is None:
            by_topic: dict[str, list[tuple[int, OffsetAndMetadata | None]]] = {}
            for (topic, partition), om in sorted(committed.items()):
                by_topic.setdefault(topic, []).append((partition, om))
            return list(by_topic.items())
        return [(topic, [(p, committed.get((topic, p))) for p in partitions]) for topic, partitions in topics]

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
                if (topic, p) in committed:
                    records.append(serde.offset_commit_tombstone(group_id, topic, p))
                parts.append((p, 0))
            out.append((topic, parts))
        return 0, out, records

    def delete_all_offsets(self, group_id: str) -> list[serde.CoordinatorRecord]:
        return [serde.offset_commit_tombstone(group_id, t, p) for (t, p) in sorted(self.offsets.get(group_id, {}))]

    # ------------------------------------------------------------------ retention

    def cleanup_expired(self, now_ms: int, delete_group: Callable[[str], list[serde.CoordinatorRecord]]
                        ) -> list[serde.CoordinatorRecord]:
        records: list[serde.CoordinatorRecord] = []
        retention = self.config.offsets_retention_ms
        for group_id, group in list(self.groups.groups.items()):
            committed = self.offsets.get(group_id, {})
            expired = [tp for tp, om in committed.items() if self._expired(group, tp[0], om, now_ms, retention)]
            records.extend(serde.offset_commit_tombstone(group_id, t, p) for t, p in sorted(expired))
            if group.state == S.EMPTY and len(expired) == len(committed):
                records.extend(delete_group(group_id))
        if self.consumer_groups is not None:
            # consumer groups: offsets of topics no member subscribes to expire from their commit
            for group_id, cg in list(self.consumer_groups.groups.items()):
                committed = self.offsets.get(group_id, {})
                expired = [tp for tp, om in committed.items() if not cg.is_subscribed_to(tp[0]) and (
                    now_ms >= om.expire_timestamp_ms if om.expire_timestamp_ms >= 0
                    else now_ms - om.commit_timestamp_ms >= retention)]
                records.extend(serde.offset_commit_tombstone(group_id, t, p) for t, p in sorted(expired))
                if cg.is_empty() and len(expired) == len(committed):
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
