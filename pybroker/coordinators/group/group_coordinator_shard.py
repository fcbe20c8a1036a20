"""The group coordinator's shard for one __consumer_offsets partition (Kafka's
GroupCoordinatorShard): membership (GroupMetadataManager) + offsets (OffsetMetadataManager),
KIP-848 consumer groups (ConsumerGroupManager), the admin operations that span them
(ListGroups, DescribeGroups, ConsumerGroupDescribe, DeleteGroups), and the one `replay()`
that applies records when writing and when loading.

Record handling in `replay()`: OffsetCommit (types 0/1) -> offsets (pending per producer id
when the record came in a transactional batch, until `replay_end_transaction_marker` sees that
producer's COMMIT/ABORT marker on this partition); GroupMetadata (type 2)
-> a classic group rebuilt as Stable (members) or Empty, or removed by a tombstone;
ConsumerGroup* (types 3..8) -> consumer groups; ShareGroup* (types 9..15) -> share groups
(share_group_manager.py). A group id is classic, consumer or share. A share group's id is its
own: JoinGroup answers INCONSISTENT_GROUP_PROTOCOL, ConsumerGroupHeartbeat, ConsumerGroupDescribe
and the offset APIs GROUP_ID_NOT_FOUND, and a share heartbeat for an id of another type
GROUP_ID_NOT_FOUND, as Kafka's. Between classic and consumer groups: an
Empty classic group (offsets only) gives way to a consumer group and vice versa; a non-empty
classic group is converted by a ConsumerGroupHeartbeat and a consumer group whose last
consumer-protocol member goes is converted back (group_migration.py, KIP-848 online
migration under group.consumer.migration.policy). The classic APIs (Join/Sync/Heartbeat/
LeaveGroup) reach a consumer group's classic members (consumer_group_classic_members.py).

Concurrency: one thread; every handler takes `now_ms`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pybroker.acl import AUTHORIZED_OPERATIONS_OMITTED, GROUP_OPERATIONS
from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.group.classic_group import (
    GROUP_TYPE_CLASSIC,
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
    Future,
)
from pybroker.coordinators.group.consumer_group import CONSUMER_PROTOCOL_TYPE, GROUP_TYPE_CONSUMER
from pybroker.coordinators.group.consumer_group_classic_members import ConsumerGroupClassicMembers
from pybroker.coordinators.group.consumer_group_manager import ConsumerGroupManager
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.group_metadata_manager import GroupMetadataManager, join_error
from pybroker.coordinators.group.group_migration import GroupMigration
from pybroker.coordinators.group.offset_metadata_manager import OffsetMetadataManager
from pybroker.coordinators.group.share_group import GROUP_TYPE_SHARE, SHARE_PROTOCOL_TYPE
from pybroker.coordinators.group.share_group_manager import ShareGroupManager
from pybroker.coordinators.record_serde import CoordinatorRecord
from pybroker.coordinators.shard import CoordinatorResult, CoordinatorTimer
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    ConsumerGroupDescribeResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
)

log = logging.getLogger("pybroker.group")

S = ClassicGroupState
CLEANUP_KEY = "cleanup-group-metadata"


class GroupCoordinatorShard:
    def __init__(self, partition: int, config: GroupConfig, timer: CoordinatorTimer, image: Any = None) -> None:
        self.partition = partition
        self.config = config
        self.timer = timer
        self.groups = GroupMetadataManager(config, timer)
        self.consumer = ConsumerGroupManager(config, timer, image)
        self.migration = GroupMigration(config, self.groups, self.consumer)
        self.consumer.upgrade_classic_group = self.migration.upgrade_classic_group
        self.consumer.downgrade = self.migration.downgrade
        self.classic_members = ConsumerGroupClassicMembers(config, self.consumer)
        self.offsets = OffsetMetadataManager(config, self.groups, self.consumer)
        self.share = ShareGroupManager(config, timer, image, self.non_share_group_type)
        self._now_ms = 0  # time of the record being replayed (load: the batch's append time)

    # ------------------------------------------------------------------ replay

    def replay(self, record: CoordinatorRecord, offset: int = -1, now_ms: int | None = None,
               producer_id: int = -1) -> None:
        """Apply one record at `offset`; producer_id >= 0 for a record of a transactional batch."""
        now = self._now_ms if now_ms is None else now_ms
        kind = record.key_version
        if kind in (0, 1):
            self.offsets.replay(record.key, record.value, now, offset, producer_id)
        elif kind == 2:
            self._replay_group(record.key.group, record.value, now)
        elif 3 <= kind <= 8:
            gid = record.key.group_id
            if record.value is not None and gid not in self.consumer.groups:
                # an offsets-only classic group replayed earlier gives way (its tombstone may be compacted away)
                g = self.groups.group(gid)
                if g is not None and g.state == S.EMPTY and not g.members:
                    self.groups.remove_group(gid)
            self.consumer.replay(record)
        elif 9 <= kind <= 15:
            self.share.replay(record, now)

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                                      offset: int = -1) -> None:
        """A COMMIT/ABORT control batch of `producer_id` at `offset` on this partition (written or loaded)."""
        self.offsets.replay_end_transaction_marker(producer_id, commit, offset)

    def set_committed_offset(self, offset: int) -> None:
        """The partition's high watermark (the runtime, before reads, writes and loads): reads
        answer only what it covers (OffsetMetadataManager, "Visibility")."""
        self.offsets.set_committed_offset(offset)

    def _replay_group(self, group_id: str, value: object | None, now_ms: int) -> None:
        if value is None:
            self.groups.remove_group(group_id)
            return
        v = value
        members = list(v.members)  # type: ignore[attr-defined]
        ts = v.current_state_timestamp  # type: ignore[attr-defined]
        group = ClassicGroup(group_id, state=S.STABLE if members else S.EMPTY,
                             state_timestamp_ms=ts if ts >= 0 else now_ms,
                             generation_id=v.generation,  # type: ignore[attr-defined]
                             protocol_type=v.protocol_type or None,  # type: ignore[attr-defined]
                             protocol_name=v.protocol, leader_id=v.leader)  # type: ignore[attr-defined]
        for mm in members:
            group.restore(ClassicGroupMember(
                mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                mm.rebalance_timeout if mm.rebalance_timeout >= 0 else mm.session_timeout, mm.session_timeout,
                group.protocol_type or "", [(v.protocol or "", bytes(mm.subscription))],  # type: ignore[attr-defined]
                assignment=bytes(mm.assignment)))
            if mm.group_instance_id is not None:
                group.static_members[mm.group_instance_id] = mm.member_id
        if not members:
            group.leader_id = None
        self.groups.groups[group_id] = group

    def on_loaded(self, now_ms: int) -> None:
        """Loaded members must heartbeat within their session timeout, as after a failover."""
        for group in self.groups.groups.values():
            for m in group.members.values():
                self.groups._schedule_heartbeat(group, m.member_id, m.session_timeout_ms)
        self.consumer.on_loaded()
        self.share.on_loaded()
        self._schedule_cleanup()

    def _schedule_cleanup(self) -> None:
        self.timer.schedule(CLEANUP_KEY, self.config.offsets_retention_check_interval_ms, self._cleanup, kind="task")

    def _cleanup(self, now_ms: int) -> CoordinatorResult:
        self._schedule_cleanup()
        return self.cleanup_group_metadata(now_ms)

    def on_unloaded(self) -> None:
        for gid in list(self.groups.groups):
            self.groups.remove_group(gid)
        self.consumer.on_unloaded()
        self.share.on_unloaded()

    # ------------------------------------------------------------------ group types

    def non_share_group_type(self, group_id: str) -> str | None:
        """The type of the classic or consumer group holding `group_id`, if one does."""
        if self.consumer.group(group_id) is not None:
            return GROUP_TYPE_CONSUMER
        g = self.groups.group(group_id)
        return GROUP_TYPE_CLASSIC if g is not None and g.state != S.DEAD else None

    def raise_if_share_group(self, group_id: str) -> None:
        """A consumer-group or offset API against a share group id: Kafka's GROUP_ID_NOT_FOUND."""
        if self.share.group(group_id) is not None:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")

    def consumer_heartbeat(self, req: Any, version: int, client_id: str, client_host: str, now_ms: int
                           ) -> CoordinatorResult:
        self.raise_if_share_group(req.group_id)
        return self.consumer.heartbeat(req, version, client_id, client_host, now_ms)

    # ------------------------------------------------------------------ JoinGroup (classic)

    def classic_join(self, req: Any, version: int, client_id: str, client_host: str, now_ms: int
                     ) -> CoordinatorResult:
        """JoinGroup (Kafka's classicGroupJoin): a non-empty consumer group takes the member as
        a classic member of it; an Empty consumer group of that id is deleted first (Kafka 4
        converts it); otherwise the classic group."""
        if self.share.group(req.group_id) is not None:  # Kafka's classicGroupJoin: another group type
            fut = Future()
            fut.complete(join_error("", Errors.INCONSISTENT_GROUP_PROTOCOL))
            return CoordinatorResult(response=fut, replay=False)
        cg = self.consumer.group(req.group_id)
        if cg is None:
            return self.groups.join(req, version, client_id, client_host, now_ms)
        if not cg.is_empty():
            if not (self.config.min_session_timeout_ms <= req.session_timeout_ms
                    <= self.config.max_session_timeout_ms):
                fut = Future()
                fut.complete(join_error(req.member_id or "", Errors.INVALID_SESSION_TIMEOUT))
                return CoordinatorResult(response=fut, replay=False)
            return self.classic_members.join(cg, req, version, client_id, client_host, now_ms)
        # the classic join does not replay its records, so drop the consumer group in memory too
        tombstones = self.consumer.delete_group_records(req.group_id)
        self.consumer.remove_group(req.group_id)
        result = self.groups.join(req, version, client_id, client_host, now_ms)
        result.records = [*tombstones, *result.records]
        return result

    def classic_sync(self, req: Any, version: int, now_ms: int) -> CoordinatorResult:
        """SyncGroup: a consumer group answers its classic members (an empty one: UNKNOWN_MEMBER_ID)."""
        cg = self.consumer.group(req.group_id)
        if cg is None:
            return self.groups.sync(req, version, now_ms)
        return self.classic_members.sync(cg, req, version, now_ms)

    def classic_heartbeat(self, req: Any, version: int, now_ms: int) -> int:
        cg = self.consumer.group(req.group_id)
        if cg is None:
            return self.groups.heartbeat(req, version, now_ms)
        return self.classic_members.heartbeat(cg, req, version, now_ms)

    def classic_leave(self, req: Any, version: int, now_ms: int) -> CoordinatorResult:
        cg = self.consumer.group(req.group_id)
        if cg is None:
            return self.groups.leave(req, version, now_ms)
        return self.classic_members.leave(cg, req, version, now_ms)

    # ------------------------------------------------------------------ ListGroups

    def list_groups(self, states: Iterable[str], types: Iterable[str]) -> list[ListGroupsResponse.ListedGroup]:
        want_states = {s.lower() for s in states}
        want_types = {t.lower() for t in types}
        out = []
        for g in sorted(self.groups.groups.values(), key=lambda g: g.group_id):
            if g.state == S.DEAD:
                continue
            if want_states and g.state.value.lower() not in want_states:
                continue
            if want_types and GROUP_TYPE_CLASSIC not in want_types:
                continue
            out.append(ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "",
                                                      group_state=g.state.value, group_type=GROUP_TYPE_CLASSIC))
        for cg in self.consumer.groups.values():
            state = cg.state.value
            if want_states and state.lower() not in want_states:
                continue
            if want_types and GROUP_TYPE_CONSUMER not in want_types:
                continue
            out.append(ListGroupsResponse.ListedGroup(group_id=cg.group_id, protocol_type=CONSUMER_PROTOCOL_TYPE,
                                                      group_state=state, group_type=GROUP_TYPE_CONSUMER))
        for sg in self.share.groups.values():
            state = sg.state.value
            if want_states and state.lower() not in want_states:
                continue
            if want_types and GROUP_TYPE_SHARE not in want_types:
                continue
            out.append(ListGroupsResponse.ListedGroup(group_id=sg.group_id, protocol_type=SHARE_PROTOCOL_TYPE,
                                                      group_state=state, group_type=GROUP_TYPE_SHARE))
        out.sort(key=lambda lg: lg.group_id)
        return out

    # ------------------------------------------------------------------ ConsumerGroupDescribe

    def consumer_group_describe(self, group_id: str, include_authorized_operations: bool
                                ) -> ConsumerGroupDescribeResponse.DescribedGroup:
        D = ConsumerGroupDescribeResponse
        ops = GROUP_OPERATIONS if include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
        cg = self.consumer.group(group_id)
        if cg is None:
            classic = self.groups.group(group_id)
            other = (classic is not None and classic.state != S.DEAD) or self.share.group(group_id) is not None
            message = f"Group {group_id} is not a consumer group." if other else f"Group {group_id} not found."
            return D.DescribedGroup(error_code=int(Errors.GROUP_ID_NOT_FOUND), error_message=message,
                                    group_id=group_id, group_state="", group_epoch=-1, assignment_epoch=-1,
                                    assignor_name="", members=[], authorized_operations=ops)

        def assignment(a: dict[bytes, frozenset[int]]) -> ConsumerGroupDescribeResponse.Assignment:
            tps = []
            for tid, parts in sorted(a.items()):
                name = self.consumer.topic_name(tid)
                if name is not None:  # a deleted topic is left out, as Kafka does
                    tps.append(D.TopicPartitions(topic_id=tid, topic_name=name, partitions=sorted(parts)))
            return D.Assignment(topic_partitions=tps)

        members = [D.Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                            member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                            subscribed_topic_names=sorted(m.subscribed_topic_names),
                            subscribed_topic_regex=m.subscribed_topic_regex,
                            assignment=assignment(m.assigned_partitions),
                            target_assignment=assignment(cg.target_assignment.get(m.member_id, {})),
                            # v1 (KIP-1099): how the member joined -- 0 classic protocol (a member left
                            # over from an online migration), 1 consumer protocol
                            member_type=0 if m.use_classic_protocol else 1)
                   for m in cg.members.values()]
        return D.DescribedGroup(error_code=0, error_message=None, group_id=group_id, group_state=cg.state.value,
                                group_epoch=cg.group_epoch, assignment_epoch=cg.target_assignment_epoch,
                                assignor_name=self.consumer.preferred_assignor(cg.members), members=members,
                                authorized_operations=ops)

    # ------------------------------------------------------------------ DescribeGroups

    def describe_group(self, group_id: str, include_authorized_operations: bool, version: int = 5
                       ) -> DescribeGroupsResponse.DescribedGroup:
        ops = GROUP_OPERATIONS if include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
        g = self.groups.group(group_id)
        if g is None or g.state == S.DEAD:
            # a group that does not exist, or is not a classic group (a KIP-848 consumer group): Dead,
            # without an error before v6; from v6 GROUP_ID_NOT_FOUND with Kafka's message (KIP-1043)
            error, message = 0, None
            if version >= 6:
                error = int(Errors.GROUP_ID_NOT_FOUND)
                other = self.consumer.group(group_id) is not None or self.share.group(group_id) is not None
                message = f"Group {group_id} is not a classic group." if other else f"Group {group_id} not found."
            return DescribeGroupsResponse.DescribedGroup(
                error_code=error, error_message=message, group_id=group_id, group_state=S.DEAD.value,
                protocol_type="", protocol_data="", members=[],
                authorized_operations=AUTHORIZED_OPERATIONS_OMITTED if error else ops)
        stable = g.state == S.STABLE
        members = []
        for m in g.members.values():
            members.append(DescribeGroupsResponse.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata(g.protocol_name) if stable else b"",
                member_assignment=m.assignment if stable else b""))
        return DescribeGroupsResponse.DescribedGroup(
            error_code=0, group_id=group_id, group_state=g.state.value, protocol_type=g.protocol_type or "",
            protocol_data=(g.protocol_name or "") if stable else "", members=members, authorized_operations=ops)

    # ------------------------------------------------------------------ DeleteGroups

    def delete_groups(self, group_ids: list[str]) -> CoordinatorResult:
        """Response: [(group id, error code)]; records: offset and group tombstones."""
        records: list[CoordinatorRecord] = []
        out = []
        for gid in group_ids:
            cg = self.consumer.group(gid)
            if cg is not None:
                if not cg.is_empty():
                    out.append((gid, int(Errors.NON_EMPTY_GROUP)))
                else:
                    records.extend([*self.offsets.delete_all_offsets(gid), *self.consumer.delete_group_records(gid)])
                    out.append((gid, 0))
                continue
            sg = self.share.group(gid)
            if sg is not None:
                if not sg.is_empty():
                    out.append((gid, int(Errors.NON_EMPTY_GROUP)))
                else:
                    records.extend([*self.offsets.delete_all_offsets(gid), *self.share.delete_group_records(gid)])
                    out.append((gid, 0))
                continue
            g = self.groups.group(gid)
            if g is None or g.state == S.DEAD:
                out.append((gid, int(Errors.GROUP_ID_NOT_FOUND)))
            elif g.state != S.EMPTY:
                out.append((gid, int(Errors.NON_EMPTY_GROUP)))
            else:
                records.extend(self._delete_group_records(gid))
                out.append((gid, 0))
        return CoordinatorResult(records=records, response=out)

    def _delete_group_records(self, group_id: str) -> list[CoordinatorRecord]:
        return [*self.offsets.delete_all_offsets(group_id), serde.group_metadata_tombstone(group_id)]

    # ------------------------------------------------------------------ retention

    def cleanup_group_metadata(self, now_ms: int) -> CoordinatorResult:
        """offsets.retention.minutes: tombstones for expired offsets and emptied groups."""
        records = self.offsets.cleanup_expired(now_ms, lambda gid: [serde.group_metadata_tombstone(gid)])
        if records:
            log.info("partition %d: expiring %d offsets/groups", self.partition, len(records))
        return CoordinatorResult(records=records)
