"""The group coordinator's shard for one __consumer_offsets partition (Kafka's
GroupCoordinatorShard): membership (GroupMetadataManager) + offsets (OffsetMetadataManager),
the admin operations that span both (ListGroups, DescribeGroups, DeleteGroups), and the one
`replay()` that applies records when writing and when loading.

Record handling in `replay()`: OffsetCommit (types 0/1) -> offsets; GroupMetadata (type 2)
-> a classic group rebuilt as Stable (members) or Empty, or removed by a tombstone;
ConsumerGroup* (types 3..8, KIP-848) are not replayed yet (kept for a later coordinator).

Concurrency: one thread; every handler takes `now_ms`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.group.classic_group import (
    GROUP_TYPE_CLASSIC,
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
)
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.group_metadata_manager import GroupMetadataManager
from pybroker.coordinators.group.offset_metadata_manager import OffsetMetadataManager
from pybroker.coordinators.record_serde import CoordinatorRecord
from pybroker.coordinators.shard import CoordinatorResult, CoordinatorTimer
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DescribeGroupsResponse, ListGroupsResponse

log = logging.getLogger("pybroker.group")

S = ClassicGroupState
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
# READ(3), DELETE(6), DESCRIBE(8): what a group allows when no authorizer is configured
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
CLEANUP_KEY = "cleanup-group-metadata"


class GroupCoordinatorShard:
    def __init__(self, partition: int, config: GroupConfig, timer: CoordinatorTimer) -> None:
        self.partition = partition
        self.config = config
        self.timer = timer
        self.groups = GroupMetadataManager(config, timer)
        self.offsets = OffsetMetadataManager(config, self.groups)
        self.groups._has_offsets = self.offsets.has_offsets
        self._now_ms = 0  # time of the record being replayed (load: the batch's append time)

    # ------------------------------------------------------------------ replay

    def replay(self, record: CoordinatorRecord, offset: int = -1, now_ms: int | None = None) -> None:
        now = self._now_ms if now_ms is None else now_ms
        kind = record.key_version
        if kind in (0, 1):
            self.offsets.replay(record.key, record.value, now)
        elif kind == 2:
            self._replay_group(record.key.group, record.value, now)
        # 3..8: KIP-848 consumer groups, not replayed by the classic coordinator

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
            group.members[mm.member_id] = ClassicGroupMember(
                mm.member_id, mm.group_instance_id, mm.client_id, mm.client_host,
                mm.rebalance_timeout if mm.rebalance_timeout >= 0 else mm.session_timeout, mm.session_timeout,
                group.protocol_type or "", [(v.protocol or "", bytes(mm.subscription))],  # type: ignore[attr-defined]
                assignment=bytes(mm.assignment))
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
        self._schedule_cleanup()

    def _schedule_cleanup(self) -> None:
        self.timer.schedule(CLEANUP_KEY, self.config.offsets_retention_check_interval_ms, self._cleanup, kind="task")

    def _cleanup(self, now_ms: int) -> CoordinatorResult:
        self._schedule_cleanup()
        return self.cleanup_group_metadata(now_ms)

    def on_unloaded(self) -> None:
        for gid in list(self.groups.groups):
            self.groups.remove_group(gid)

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
        return out

    # ------------------------------------------------------------------ DescribeGroups

    def describe_group(self, group_id: str, include_authorized_operations: bool
                       ) -> DescribeGroupsResponse.DescribedGroup:
        ops = GROUP_AUTHORIZED_OPERATIONS if include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
        g = self.groups.group(group_id)
        if g is None or g.state == S.DEAD:
            # DescribeGroups v0-5: an unknown group is described as Dead, without an error
            return DescribeGroupsResponse.DescribedGroup(
                error_code=0, group_id=group_id, group_state=S.DEAD.value, protocol_type="", protocol_data="",
                members=[], authorized_operations=ops)
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
