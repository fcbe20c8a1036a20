"""KIP-932 share groups of one __consumer_offsets partition (the share half of Kafka's
GroupMetadataManager: shareGroupHeartbeat, shareGroupLeave, the session timeout,
shareGroupDescribe, and the share-state initialization bookkeeping).

A heartbeat, as Kafka 4.2 runs it:
 1. the group: created by a member joining (epoch 0), GROUP_ID_NOT_FOUND otherwise or when
    the id is held by a classic or consumer group; GROUP_MAX_SIZE_REACHED at group.share.max.size;
 2. the member: created at epoch 0 (member ids come from the client), UNKNOWN_MEMBER_ID
    otherwise; FENCED_MEMBER_EPOCH when its epoch is ahead of ours, or behind and not the
    previous one (a lost response);
 3. its metadata (rack, client, subscribed topic names) persisted when changed; the group
    epoch bumps when a subscription changed, when the subscribed topics' metadata hash changed
    (topics created, deleted, partitions added), or when initialized share partitions are not
    yet in the target assignment;
 4. a group epoch ahead of the target assignment's: the "simple" assignor computes a new
    target over the *initialized* share partitions only;
 5. the member takes its target at once (no revocation in share groups);
 6. the answer carries the member epoch, heartbeat interval and, on a full request or when it
    changed, the assignment;
 7. subscribed partitions whose share state is neither initialized nor being initialized
    (or whose initialization was asked longer than group.share.initialize.retry.interval.ms
    ago) are recorded as initializing in ShareGroupStatePartitionMetadata and returned as an
    `InitializeRequest`: the service asks the Persister to initialize them (state epoch = the
    group epoch, start offset -1: the share-partition leader starts where
    share.auto.offset.reset says) and then records them initialized (`initialize_done`) or
    drops them from initializing (`uninitialize`); the next heartbeat assigns them.

Handlers never change the state: they return records (share_group_records) and replay applies
them, on write and on load alike. Deadlines on the CoordinatorTimer:
    "share-session-<group>-<member>"  the session timeout (share.session.timeout.ms group
                                      config, else group.share.session.timeout.ms): fenced

Concurrency: one thread (the shard's); handlers take `now_ms`.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pybroker.coordinators.group import share_group_records as rec
from pybroker.coordinators.group.assignors import MemberSpec
from pybroker.coordinators.group.assignors.simple import SimpleAssignor
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.share_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    MEMBER_STATE_STABLE,
    Assignment,
    InitTopic,
    ShareGroup,
    ShareGroupMember,
    StatePartitionMetadata,
)
from pybroker.coordinators.record_serde import CoordinatorRecord
from pybroker.coordinators.shard import CoordinatorResult, CoordinatorTimer
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)

log = logging.getLogger("pybroker.group")

R = ShareGroupHeartbeatResponse
D = ShareGroupDescribeResponse
_Q = struct.Struct(">q")


def session_key(group_id: str, member_id: str) -> str:
    return f"share-session-{group_id}-{member_id}"


def heartbeat_error(code: int, message: str | None = None) -> ShareGroupHeartbeatResponse:
    return R(throttle_time_ms=0, error_code=int(code), error_message=message, member_id=None, member_epoch=0,
             heartbeat_interval_ms=0, assignment=None)


def validate_heartbeat(req: ShareGroupHeartbeatRequest) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid (INVALID_REQUEST)."""
    def invalid(msg: str) -> KafkaError:
        return KafkaError(Errors.INVALID_REQUEST, msg)
    if req.member_id == "":
        raise invalid("MemberId can't be empty.")
    if req.group_id == "":
        raise invalid("GroupId can't be empty.")
    if req.rack_id == "":
        raise invalid("RackId can't be empty.")
    if req.member_epoch == 0:
        if not req.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")


@dataclass(frozen=True, slots=True)
class InitializeRequest:
    """Share partitions to initialize through the Persister: `{topic_id: partitions}` at
    `state_epoch`, each from `start_offsets[(topic_id, partition)]` (absent: -1)."""

    group_id: str
    state_epoch: int
    partitions: dict[bytes, frozenset[int]]
    start_offsets: dict[tuple[bytes, int], int] | None = None

    def start_offset(self, topic_id: bytes, partition: int) -> int:
        return -1 if self.start_offsets is None else self.start_offsets.get((topic_id, partition), -1)


def combine(a: dict[bytes, InitTopic], b: dict[bytes, InitTopic]) -> dict[bytes, InitTopic]:
    """Kafka's combineInitMaps: the union per topic; name and timestamp from `b` where it has the topic."""
    out = dict(a)
    for tid, t in b.items():
        old = out.get(tid)
        out[tid] = t if old is None else InitTopic(t.name, old.partitions | t.partitions, t.timestamp_ms)
    return out


def subtract(a: dict[bytes, InitTopic], b: dict[bytes, frozenset[int]]) -> dict[bytes, InitTopic]:
    out = {}
    for tid, t in a.items():
        left = t.partitions - b.get(tid, frozenset())
        if left:
            out[tid] = replace(t, partitions=left)
    return out


class ShareGroupManager:
    def __init__(self, config: GroupConfig, timer: CoordinatorTimer, image: Any = None,
                 other_group_type: Callable[[str], str | None] = lambda _g: None) -> None:
        """`image` answers topics_by_name / topics_by_id (the broker's MetadataImage) and the
        GROUP config overrides; `other_group_type(group_id)` names the type of a classic or
        consumer group holding the id, if one does."""
        self.config = config
        self.timer = timer
        self.image = image
        self.other_group_type = other_group_type
        self.groups: dict[str, ShareGroup] = {}
        self.state_metadata: dict[str, StatePartitionMetadata] = {}
        self.assignor = SimpleAssignor()
        # False when there is no Persister to initialize share state with (the service sets it)
        self.can_initialize = True
        # group epoch bumps by heartbeats (Kafka's ShareGroupRebalances sensor, for the metrics)
        self.rebalances = 0

    def group(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    # ------------------------------------------------------------------ replay

    def replay(self, record: CoordinatorRecord, now_ms: int) -> None:
        kind, key, value = record.key_version, record.key, record.value
        gid = key.group_id
        if kind == rec.PARTITION_METADATA:
            return  # Kafka < 4.1's subscription metadata: replaced by the group's metadata hash
        if kind == rec.STATE_PARTITION_METADATA:
            self._replay_state_metadata(gid, value, now_ms)
            return
        group = self.groups.get(gid)
        if group is None:
            if value is None:
                return
            group = self.groups[gid] = ShareGroup(gid)
        if kind == rec.GROUP_METADATA:
            if value is None:
                self.remove_group(gid)
            else:
                group.group_epoch = value.epoch
                group.metadata_hash = value.metadata_hash
        elif kind == rec.MEMBER_METADATA:
            group.replay_member_metadata(key.member_id, value)
        elif kind == rec.TARGET_ASSIGNMENT_METADATA:
            group.target_assignment_epoch = value.assignment_epoch if value is not None else 0
        elif kind == rec.TARGET_ASSIGNMENT_MEMBER:
            group.replay_target_member(key.member_id, value)
        elif kind == rec.CURRENT_MEMBER_ASSIGNMENT:
            group.replay_current_assignment(key.member_id, value)

    def _replay_state_metadata(self, gid: str, value: Any, now_ms: int) -> None:
        if value is None:
            self.state_metadata.pop(gid, None)
            return

        def topics(infos: Any, ts: int) -> dict[bytes, InitTopic]:
            return {bytes(t.topic_id): InitTopic(t.topic_name, frozenset(t.partitions), ts) for t in infos}
        self.state_metadata[gid] = StatePartitionMetadata(
            # the record holds no time: an initialization replayed is as if asked now
            initializing=topics(value.initializing_topics, now_ms),
            initialized=topics(value.initialized_topics, -1),
            deleting={bytes(t.topic_id): t.topic_name for t in value.deleting_topics})

    def remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            for mid in group.members:
                self.timer.cancel(session_key(group_id, mid))

    def on_loaded(self) -> None:
        """Loaded members must heartbeat within the session timeout, as after a failover."""
        for group in self.groups.values():
            for mid in group.members:
                self._schedule_session(group.group_id, mid)

    def on_unloaded(self) -> None:
        for gid in list(self.groups):
            self.remove_group(gid)
        self.state_metadata.clear()

    # ------------------------------------------------------------------ metadata

    def _topic(self, name: str) -> Any:
        return None if self.image is None else self.image.topics_by_name.get(name)

    def topic_name(self, topic_id: bytes) -> str | None:
        t = None if self.image is None else self.image.topics_by_id.get(topic_id)
        return None if t is None else t.name

    def metadata_hash(self, names: set[str]) -> int:
        """A hash of the subscribed topics' ids, names and partition counts: it changes when a
        subscribed topic is created, deleted or grows. (Kafka's ModernGroup.computeMetadataHash
        plays this part; its value is only ever compared with the one this coordinator wrote.)"""
        if not names:
            return 0
        h = hashlib.blake2b(digest_size=8)
        for name in sorted(names):
            t = self._topic(name)
            if t is not None and t.partitions:
                h.update(name.encode() + b"\0" + bytes(t.topic_id) + len(t.partitions).to_bytes(4, "big"))
        return int(_Q.unpack(h.digest())[0])

    def _group_override(self, gid: str, key: str) -> int | None:
        configs = getattr(self.image, "configs", None)
        raw = configs.get((32, gid), {}).get(key) if configs is not None else None
        return None if raw is None else int(raw)

    def session_timeout_ms(self, gid: str) -> int:
        v = self._group_override(gid, "share.session.timeout.ms")
        return self.config.share_group_session_timeout_ms if v is None else v

    def heartbeat_interval_ms(self, gid: str) -> int:
        v = self._group_override(gid, "share.heartbeat.interval.ms")
        return self.config.share_group_heartbeat_interval_ms if v is None else v

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(self, req: ShareGroupHeartbeatRequest, client_id: str, client_host: str, now_ms: int
                  ) -> CoordinatorResult:
        """Response: (ShareGroupHeartbeatResponse, InitializeRequest | None). Raises KafkaError."""
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            return self._leave(req)
        gid, mid, epoch = req.group_id, req.member_id, req.member_epoch
        create = epoch == 0
        group = self._share_group(gid, create)
        if len(group.members) >= self.config.share_group_max_size and (mid == "" or mid not in group.members):
            raise KafkaError(Errors.GROUP_MAX_SIZE_REACHED,
                             f"The share group has reached its maximum capacity of "
                             f"{self.config.share_group_max_size} members.")
        member = group.members.get(mid)
        is_new = member is None
        if member is None:
            if not create:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {gid}.")
            member = ShareGroupMember(mid)
            log.info("group %s: member %s joins the share group", gid, mid)
        _check_member_epoch(member, epoch)
        updated = replace(
            member,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            subscribed_topic_names=(tuple(req.subscribed_topic_names) if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            client_id=client_id, client_host=client_host)
        records: list[CoordinatorRecord] = []
        subscription_changed = False
        if is_new or updated.subscription_key() != member.subscription_key():
            records.append(rec.member_metadata_record(gid, updated))
            subscription_changed = set(updated.subscribed_topic_names) != set(member.subscribed_topic_names)
        bump = subscription_changed or self._initialized_assignment_pending(group, is_new)
        names = group.subscribed_names_with(None if is_new else member, updated)
        metadata_hash = self.metadata_hash(names)
        if metadata_hash != group.metadata_hash:
            bump = True
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            records.append(rec.group_epoch_record(gid, group_epoch, metadata_hash))
            log.info("group %s: group epoch bumped to %d", gid, group_epoch)
            self.rebalances += 1
        if group_epoch > group.target_assignment_epoch:
            members = dict(group.members)
            members[mid] = updated
            targets = self._compute_targets(group, members, records)
            records.append(rec.target_assignment_epoch_record(gid, group_epoch))
            target_epoch, target = group_epoch, targets.get(mid, {})
        else:
            target_epoch, target = group.target_assignment_epoch, group.target_assignment.get(mid, {})
        reconciled = updated
        if subscription_changed or updated.member_epoch != target_epoch:
            reconciled = replace(updated, state=MEMBER_STATE_STABLE,
                                 assigned_partitions=self._filter(target, updated.subscribed_topic_names))
            if target_epoch != updated.member_epoch:
                reconciled = replace(reconciled, member_epoch=target_epoch,
                                     previous_member_epoch=updated.member_epoch)
        if is_new or reconciled.assignment_key() != updated.assignment_key():
            records.append(rec.current_assignment_record(gid, reconciled))
        self._schedule_session(gid, mid)
        resp = R(throttle_time_ms=0, error_code=0, error_message=None, member_id=mid,
                 member_epoch=reconciled.member_epoch, heartbeat_interval_ms=self.heartbeat_interval_ms(gid),
                 assignment=None)
        if epoch == 0 or req.subscribed_topic_names is not None or \
                reconciled.assigned_partitions != member.assigned_partitions:
            resp.assignment = R.Assignment(topic_partitions=[
                R.TopicPartitions(topic_id=tid, partitions=sorted(parts))
                for tid, parts in sorted(reconciled.assigned_partitions.items())])
        init = self._maybe_initialize(gid, group_epoch, names, records, now_ms, self._live_state(gid, records))
        return CoordinatorResult(records=records, response=(resp, init))

    def _live_state(self, gid: str, records: list[CoordinatorRecord]) -> StatePartitionMetadata | None:
        """The group's share-state metadata without the topics deleted since (Kafka's
        maybeCleanupShareGroupState, which runs on topic deletions; the share coordinator drops
        their state on its side): a record drops them when there are any."""
        info = self.state_metadata.get(gid)
        if info is None or self.image is None:
            return info
        live = self.image.topics_by_id
        if all(tid in live for tid in (*info.initializing, *info.initialized, *info.deleting)):
            return info
        info = StatePartitionMetadata(
            initializing={tid: t for tid, t in info.initializing.items() if tid in live},
            initialized={tid: t for tid, t in info.initialized.items() if tid in live},
            deleting={tid: n for tid, n in info.deleting.items() if tid in live})
        records.append(rec.state_partition_metadata_record(gid, info.initializing, info.initialized, info.deleting))
        return info

    def _share_group(self, gid: str, create: bool) -> ShareGroup:
        """Kafka's getOrMaybeCreateShareGroup: a new group is a scratch object until replay makes it."""
        other = self.other_group_type(gid)
        if other is not None:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
        group = self.groups.get(gid)
        if group is None:
            if not create:
                raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Share group {gid} not found.")
            group = ShareGroup(gid)
        return group

    def _filter(self, assignment: Assignment, names: tuple[str, ...]) -> Assignment:
        """The partitions of the member's subscribed topics only (Kafka's filterAssignedPartitions)."""
        subscribed = set(names)
        return {tid: parts for tid, parts in assignment.items() if self.topic_name(tid) in subscribed}

    def _initialized_assignment_pending(self, group: ShareGroup, is_new: bool) -> bool:
        """Kafka's initializedAssignmentPending: some subscribed topic's initialized partitions
        are not exactly what the target assignment covers."""
        if group.is_empty() and not is_new:
            return False
        info = self.state_metadata.get(group.group_id)
        if info is None or not info.initialized:
            return False
        names = group.subscribed_topic_names()
        if not names:
            return False
        assigned: dict[bytes, set[int]] = {}
        for a in group.target_assignment.values():
            for tid, parts in a.items():
                assigned.setdefault(tid, set()).update(parts)
        for tid, t in info.initialized.items():
            if t.name in names and assigned.get(tid) != set(t.partitions):
                return True
        return False

    def _compute_targets(self, group: ShareGroup, members: dict[str, ShareGroupMember],
                         records: list[CoordinatorRecord]) -> dict[str, Assignment]:
        info = self.state_metadata.get(group.group_id)
        initialized = info.initialized_partitions() if info is not None else {}
        specs = {}
        assignable: dict[bytes, frozenset[int]] = {}
        for mid, m in members.items():
            ids = set()
            for name in m.subscribed_topic_names:
                t = self._topic(name)
                if t is None or not t.partitions:
                    continue
                tid = bytes(t.topic_id)
                ids.add(tid)
                if tid not in assignable:
                    assignable[tid] = frozenset(p for p in initialized.get(tid, ()) if p < len(t.partitions))
            specs[mid] = MemberSpec(mid, frozenset(ids), group.target_assignment.get(mid, {}))
        new = self.assignor.assign(specs, assignable)
        for mid in sorted(new):
            if mid not in group.target_assignment or new[mid] != group.target_assignment[mid]:
                records.append(rec.target_member_record(group.group_id, mid, new[mid]))
        return new

    # ------------------------------------------------------------------ share-state initialization

    def _maybe_initialize(self, gid: str, group_epoch: int, names: set[str], records: list[CoordinatorRecord],
                          now_ms: int, info: StatePartitionMetadata | None) -> InitializeRequest | None:
        """Kafka's maybeCreateInitializeShareGroupStateRequest."""
        if not names or self.image is None or not self.can_initialize:
            return None
        retry_ms = self.config.share_group_initialize_retry_interval_ms
        already: dict[bytes, InitTopic] = {}
        if info is not None:
            fresh = {tid: t for tid, t in info.initializing.items() if now_ms - t.timestamp_ms < retry_ms}
            already = combine(info.initialized, fresh)
        change: dict[bytes, InitTopic] = {}
        for name in sorted(names):
            t = self._topic(name)
            if t is None or not t.partitions:
                continue
            tid = bytes(t.topic_id)
            have = already[tid].partitions if tid in already else frozenset()
            if len(have) < len(t.partitions):
                change[tid] = InitTopic(name, frozenset(range(len(t.partitions))) - have, now_ms)
        if not change:
            return None
        if info is None:
            records.append(rec.state_partition_metadata_record(gid, change, {}, {}))
        else:
            initializing = combine(info.initializing, change)
            deleting = {tid: n for tid, n in info.deleting.items() if tid not in initializing}
            records.append(rec.state_partition_metadata_record(gid, initializing, info.initialized, deleting))
        return InitializeRequest(gid, group_epoch, {tid: t.partitions for tid, t in change.items()})

    def initialize_done(self, gid: str, partitions: dict[bytes, frozenset[int]], now_ms: int) -> CoordinatorResult:
        """Kafka's initializeShareGroupState: the Persister initialized these; record them."""
        group = self.groups.get(gid)
        if not partitions or group is None:
            return CoordinatorResult(records=[])
        info = self.state_metadata.get(gid) or StatePartitionMetadata()
        done = {tid: InitTopic(self.topic_name(tid) or "<UNKNOWN>", parts, now_ms) for tid, parts in partitions.items()}
        return CoordinatorResult(records=[rec.state_partition_metadata_record(
            gid, subtract(info.initializing, partitions), combine(info.initialized, done), info.deleting)])

    def uninitialize(self, gid: str, partitions: dict[bytes, frozenset[int]]) -> CoordinatorResult:
        """Kafka's uninitializeShareGroupState: the Persister failed these; they are asked again."""
        info = self.state_metadata.get(gid)
        if info is None or not info.initializing or not partitions:
            return CoordinatorResult(records=[])
        return CoordinatorResult(records=[rec.state_partition_metadata_record(
            gid, subtract(info.initializing, partitions), info.initialized, info.deleting)])

    # ------------------------------------------------------------------ leaving and fencing

    def _leave(self, req: ShareGroupHeartbeatRequest) -> CoordinatorResult:
        gid = req.group_id
        group = self.groups.get(gid)
        if group is None or self.other_group_type(gid) is not None:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND,
                             f"Group {gid} not found." if group is None else f"Group {gid} is not a share group.")
        if req.member_id not in group.members:
            raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {gid}.")
        log.info("group %s: member %s left the share group", gid, req.member_id)
        resp = R(throttle_time_ms=0, error_code=0, error_message=None, member_id=req.member_id,
                 member_epoch=req.member_epoch, heartbeat_interval_ms=0, assignment=None)
        return CoordinatorResult(records=self.fence_records(group, req.member_id), response=(resp, None))

    def fence_records(self, group: ShareGroup, member_id: str) -> list[CoordinatorRecord]:
        """Kafka's shareGroupFenceMember: the member's tombstones and a new group epoch."""
        gid = group.group_id
        self.timer.cancel(session_key(gid, member_id))
        records = rec.member_removal_records(gid, member_id)
        names = group.subscribed_names_with(group.members.get(member_id), None)
        records.append(rec.group_epoch_record(gid, group.group_epoch + 1, self.metadata_hash(names)))
        return records

    def _schedule_session(self, gid: str, mid: str) -> None:
        self.timer.schedule(session_key(gid, mid), self.session_timeout_ms(gid),
                            lambda now: self._session_expired(gid, mid), kind="heartbeat")

    def _session_expired(self, gid: str, mid: str) -> CoordinatorResult | None:
        group = self.groups.get(gid)
        if group is None or mid not in group.members:
            return None
        log.info("group %s: member %s fenced from the share group, its session expired", gid, mid)
        return CoordinatorResult(records=self.fence_records(group, mid))

    # ------------------------------------------------------------------ admin

    def describe(self, group_id: str, authorized_operations: int) -> ShareGroupDescribeResponse.DescribedGroup:
        group = self.groups.get(group_id)
        if group is None:
            message = (f"Group {group_id} is not a share group." if self.other_group_type(group_id) is not None
                       else f"Group {group_id} not found.")
            return D.DescribedGroup(error_code=int(Errors.GROUP_ID_NOT_FOUND), error_message=message,
                                    group_id=group_id, group_state="", group_epoch=0, assignment_epoch=0,
                                    assignor_name="", members=[], authorized_operations=-2147483648)

        def assignment(a: Assignment) -> ShareGroupDescribeResponse.Assignment:
            tps = []
            for tid, parts in sorted(a.items()):
                name = self.topic_name(tid)
                if name is not None:  # a deleted topic is left out, as Kafka does
                    tps.append(D.TopicPartitions(topic_id=tid, topic_name=name, partitions=sorted(parts)))
            return D.Assignment(topic_partitions=tps)
        members = [D.Member(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                            client_id=m.client_id, client_host=m.client_host,
                            subscribed_topic_names=list(m.subscribed_topic_names),
                            assignment=assignment(m.assigned_partitions))
                   for m in group.members.values()]
        return D.DescribedGroup(error_code=0, error_message=None, group_id=group_id, group_state=group.state.value,
                                group_epoch=group.group_epoch, assignment_epoch=group.target_assignment_epoch,
                                assignor_name=self.assignor.name, members=members,
                                authorized_operations=authorized_operations)

    def existing_group(self, group_id: str) -> ShareGroup:
        """Kafka's shareGroup(groupId): GROUP_ID_NOT_FOUND when missing or of another type."""
        group = self.groups.get(group_id)
        if group is None:
            other = self.other_group_type(group_id) is not None
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group." if other
                             else f"Group {group_id} not found.")
        return group

    def alter_offsets(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]], now_ms: int
                      ) -> CoordinatorResult:
        """AlterShareGroupOffsets (Kafka's completeAlterShareGroupOffsets): the group must be
        empty (NON_EMPTY_GROUP); the named partitions become initializing and are returned to
        (re)initialize at the given start offsets. Response: ([(topic, topic id or None,
        [(partition, error)])], InitializeRequest)."""
        group = self.existing_group(group_id)
        if not group.is_empty():
            raise KafkaError(Errors.NON_EMPTY_GROUP)
        out: list[tuple[str, bytes | None, list[tuple[int, int]]]] = []
        initializing: dict[bytes, InitTopic] = {}
        offsets: dict[tuple[bytes, int], int] = {}
        for name, parts in topics:
            t = self._topic(name)
            if t is None:
                out.append((name, None, [(p, int(Errors.UNKNOWN_TOPIC_OR_PARTITION)) for p, _ in parts]))
                continue
            tid, n = bytes(t.topic_id), len(t.partitions)
            results = []
            for p, start in parts:
                if p < n:
                    results.append((p, 0))
                    offsets[(tid, p)] = start
                else:
                    results.append((p, int(Errors.UNKNOWN_TOPIC_OR_PARTITION)))
            initializing[tid] = InitTopic(name, frozenset(p for p, _ in parts if p < n), now_ms)
            out.append((name, tid, results))
        records: list[CoordinatorRecord] = []
        initializing = {tid: t for tid, t in initializing.items() if t.partitions}
        if initializing:
            info = self.state_metadata.get(group_id)
            if info is None:
                records.append(rec.state_partition_metadata_record(group_id, initializing, {}, {}))
            else:
                merged = combine(info.initializing, initializing)
                deleting = {tid: n for tid, n in info.deleting.items() if tid not in merged}
                records.append(rec.state_partition_metadata_record(group_id, merged, info.initialized, deleting))
        init = InitializeRequest(group_id, group.group_epoch, {tid: t.partitions for tid, t in initializing.items()},
                                 offsets)
        return CoordinatorResult(records=records, response=(out, init))

    def delete_offsets_begin(self, group_id: str, names: list[str]) -> CoordinatorResult:
        """DeleteShareGroupOffsets, first half (Kafka's initiateDeleteShareGroupOffsets): the group
        must be empty; each named topic with initialized (or still-deleting) state moves to
        deleting. Response: ([(topic, error, message)], {topic id: partitions to delete})."""
        group = self.existing_group(group_id)
        if not group.is_empty():
            raise KafkaError(Errors.NON_EMPTY_GROUP)
        errors: list[tuple[str, int, str]] = []
        delete: dict[bytes, frozenset[int]] = {}
        info = self.state_metadata.get(group_id)
        if info is None:
            return CoordinatorResult(records=[], response=(errors, delete))
        initialized = dict(info.initialized)
        deleting = dict(info.deleting)
        for name in names:
            t = self._topic(name)
            if t is None:
                errors.append((name, int(Errors.UNKNOWN_TOPIC_OR_PARTITION),
                               "This server does not host this topic-partition."))
                continue
            tid = bytes(t.topic_id)
            if tid in initialized:
                delete[tid] = initialized.pop(tid).partitions
                deleting[tid] = name
            elif tid in deleting:
                delete[tid] = frozenset(range(len(t.partitions)))
            else:
                errors.append((name, int(Errors.UNKNOWN_TOPIC_OR_PARTITION), "There is no offset information to delete."))
        record = rec.state_partition_metadata_record(group_id, info.initializing, initialized, deleting)
        return CoordinatorResult(records=[record], response=(errors, delete))

    def delete_offsets_done(self, group_id: str, topic_ids: set[bytes]) -> CoordinatorResult:
        """DeleteShareGroupOffsets, second half: the topics whose state the Persister deleted leave deleting."""
        info = self.state_metadata.get(group_id)
        if info is None:
            return CoordinatorResult(records=[])
        deleting = {tid: n for tid, n in info.deleting.items() if tid not in topic_ids}
        return CoordinatorResult(records=[rec.state_partition_metadata_record(
            group_id, info.initializing, info.initialized, deleting)])

    def initialized_partitions(self, group_id: str) -> dict[bytes, frozenset[int]]:
        info = self.state_metadata.get(group_id)
        return {} if info is None else info.initialized_partitions()

    def delete_group_records(self, group_id: str) -> list[CoordinatorRecord]:
        group = self.groups[group_id]
        return rec.group_tombstones(group_id, sorted(group.members))

    def delete_state_candidates(self, group_id: str, records: list[CoordinatorRecord]
                                ) -> dict[bytes, frozenset[int]]:
        """Kafka's shareGroupBuildPartitionDeleteRequest: every initialized, initializing or
        still-deleting share partition of the group moves to deleting (a record appended to
        `records`); returns them, to delete through the Persister."""
        info = self.state_metadata.get(group_id)
        if info is None:
            return {}
        candidates = combine(info.initialized, info.initializing)
        for tid in info.deleting:  # a previous delete that did not finish is retried
            name = self.topic_name(tid)
            t = self._topic(name) if name is not None else None
            if t is not None:
                candidates = combine(candidates, {tid: InitTopic(name or "", frozenset(range(len(t.partitions))))})
        records.append(rec.state_partition_metadata_record(group_id, {}, {},
                                                           {tid: t.name for tid, t in candidates.items()}))
        return {tid: t.partitions for tid, t in candidates.items()}


def _check_member_epoch(member: ShareGroupMember, received: int) -> None:
    """Kafka's throwIfShareGroupMemberEpochIsInvalid."""
    if received > member.member_epoch:
        raise KafkaError(Errors.FENCED_MEMBER_EPOCH,
                         f"The share group member has a greater member epoch ({received}) than the one known by "
                         f"the group coordinator ({member.member_epoch}). The member must abandon all its "
                         "partitions and rejoin.")
    if received < member.member_epoch and received != member.previous_member_epoch:
        raise KafkaError(Errors.FENCED_MEMBER_EPOCH,
                         f"The share group member has a smaller member epoch ({received}) than the one known by "
                         f"the group coordinator ({member.member_epoch}), and it does not match the previous "
                         f"member epoch ({member.previous_member_epoch}). The member must abandon all its "
                         "partitions and rejoin.")
