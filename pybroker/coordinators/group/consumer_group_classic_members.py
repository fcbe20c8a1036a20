"""Classic-protocol members inside a KIP-848 consumer group (Kafka's GroupMetadataManager:
classicGroupJoinToConsumerGroup, classicGroupSyncToConsumerGroup,
classicGroupHeartbeatToConsumerGroup, classicGroupLeaveToConsumerGroup).

A classic member keeps speaking JoinGroup / SyncGroup / Heartbeat / LeaveGroup / OffsetCommit;
the consumer group's server-side assignor decides its partitions:

  JoinGroup  the member's subscription (topics, rack, owned partitions) is decoded from its
             first protocol's ConsumerProtocolSubscription and the member is updated and
             reconciled exactly as a heartbeat would (ConsumerGroupManager.update_member). Once
             the records are committed the answer is: generation = member epoch, protocol type
             "consumer", protocol name = the member's first protocol, leader "", no members,
             skip_assignment false; its session deadline restarts (its own session timeout) and
             it must send SyncGroup within its rebalance timeout. A v4+ dynamic member without
             an id first gets MEMBER_ID_REQUIRED with a fresh id (nothing is recorded for it).
  SyncGroup  answers the member's assigned partitions as a ConsumerProtocolAssignment at its
             protocol's version; REBALANCE_IN_PROGRESS when the group epoch moved past the
             member's epoch (unless it is still revoking: UNREVOKED_PARTITIONS).
  Heartbeat  REBALANCE_IN_PROGRESS tells the member to rejoin when the group epoch moved past
             its epoch, when it must revoke partitions, or when partitions it waits for were
             released; the member then has its rebalance timeout to send JoinGroup.
  LeaveGroup removes the members (tombstones, new subscription metadata, group epoch + 1).

Cooperative and eager members follow from their owned partitions: an eager member rejoins
owning nothing, so it moves to the new epoch at once; a cooperative member still owning
partitions that moved stays at its epoch (UNREVOKED_PARTITIONS) and gets only what it keeps,
revokes, and rejoins.

Concurrency: the shard's thread; handlers take `now_ms`.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from pybroker.coordinators.group import consumer_group_records as rec
from pybroker.coordinators.group import consumer_protocol as cp
from pybroker.coordinators.group.classic_group import Future
from pybroker.coordinators.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from pybroker.coordinators.group.consumer_group_manager import (
    ConsumerGroupManager,
    join_key,
    new_member_id,
    sync_key,
)
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.group_metadata_manager import join_error, sync_error
from pybroker.coordinators.record_serde import CoordinatorRecord
from pybroker.coordinators.shard import CoordinatorResult
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

log = logging.getLogger("pybroker.group")


class ConsumerGroupClassicMembers:
    def __init__(self, config: GroupConfig, consumer: ConsumerGroupManager) -> None:
        self.config = config
        self.consumer = consumer

    # ------------------------------------------------------------------ validation

    def _member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
        """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
        gid = group.group_id
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {gid}.")
        else:
            known = group.static_members.get(instance_id)
            if known is None or known not in group.members:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID,
                                    f"Member with instance id {instance_id} is not a member of group {gid}.")
            if known != member_id:
                raise KafkaError(Errors.FENCED_INSTANCE_ID,
                                    f"Static member {member_id} with instance id {instance_id} is fenced.")
            member = group.members[known]
        if not member.use_classic_protocol:
            raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")
        return member

    def _schedule_join_timeout(self, gid: str, member: ConsumerGroupMember) -> None:
        self.consumer.fence_later(join_key(gid, member.member_id), gid, member.member_id, member.rebalance_timeout_ms,
                                  "the classic member failed to join within the rebalance timeout", if_absent=True)

    def _rebalance_in_progress(self, group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Kafka's throwIfRebalanceInProgress condition (the join deadline starts with it)."""
        if group.group_epoch > member.member_epoch and member.state != MemberState.UNREVOKED_PARTITIONS:
            self._schedule_join_timeout(group.group_id, member)
            return True
        return False

    # ------------------------------------------------------------------ JoinGroup

    def join(self, group: ConsumerGroup, req: JoinGroupRequest, version: int, client_id: str, client_host: str,
             now_ms: int) -> CoordinatorResult:
        """Returns a result whose response is a Future of JoinGroupResponse."""
        fut = Future()
        try:
            return self._join(group, req, version, client_id, client_host, fut)
        except KafkaError as exc:
            fut.complete(join_error(req.member_id or "", exc.code))
            return CoordinatorResult(response=fut, replay=False)

    def _join(self, group: ConsumerGroup, req: JoinGroupRequest, version: int, client_id: str, client_host: str,
              fut: Future) -> CoordinatorResult:
        gid = group.group_id
        instance_id = req.group_instance_id if version >= 5 else None
        session_timeout = req.session_timeout_ms
        rebalance_timeout = req.rebalance_timeout_ms if version >= 1 else session_timeout
        protocols = tuple((p.name, bytes(p.metadata)) for p in req.protocols)
        member_id = req.member_id or ""
        unknown = member_id == ""
        if unknown:
            member_id = new_member_id()
        if len(group.members) >= self.config.consumer_group_max_size and member_id not in group.members:
            raise KafkaError(Errors.GROUP_MAX_SIZE_REACHED,
                                f"The consumer group has reached its maximum capacity of "
                                f"{self.config.consumer_group_max_size} members.")
        if not group.supports_classic_protocols(req.protocol_type, {n for n, _ in protocols}):
            raise KafkaError(Errors.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported.")
        if version >= 4 and unknown and instance_id is None:
            # KIP-394: the member must come back with the id (nothing is recorded for it yet)
            fut.complete(join_error(member_id, Errors.MEMBER_ID_REQUIRED))
            log.info("group %s: new classic member %s must rejoin with its id", gid, member_id)
            return CoordinatorResult(response=fut, replay=False)
        try:
            sub = cp.deserialize_subscription(protocols[0][1])
        except cp.MalformedConsumerProtocol as exc:
            raise KafkaError(Errors.UNKNOWN_SERVER_ERROR,
                                f"Malformed embedded consumer protocol in subscription: {exc}") from None

        records: list[CoordinatorRecord] = []
        members, targets = group.members, group.target_assignment
        member = members.get(member_id)
        replaced: tuple[ConsumerGroupMember, ...] = () if member is None else (member,)
        is_new = False
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if unknown:
                if known is not None:
                    # a restarted static member takes the place (and partitions) of the old instance
                    members, targets = dict(members), dict(targets)
                    member = self.consumer.static_takeover(group, instance_id, member_id, members, targets, records,
                                                           use_classic_protocol=True)
                    replaced = (group.members[known],)
            elif known is None:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID,
                                    f"Member with instance id {instance_id} is not a member of group {gid}.")
            elif known != member_id:
                raise KafkaError(Errors.FENCED_INSTANCE_ID,
                                    f"Static member {member_id} with instance id {instance_id} is fenced.")
        if member is None:
            member = ConsumerGroupMember(member_id)
            is_new = True
            members, targets = dict(members), dict(targets)
            log.info("group %s: member %s joins the consumer group using the classic protocol", gid, member_id)
        updated = replace(
            member,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=getattr(sub, "rack_id", None) or member.rack_id,
            rebalance_timeout_ms=rebalance_timeout if rebalance_timeout != -1 else member.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sub.topics), client_id=client_id, client_host=client_host,
            classic_member_metadata=ClassicMemberMetadata(session_timeout, protocols))
        owned = cp.to_topic_ids(getattr(sub, "owned_partitions", None) or (), self.consumer.image)
        reconciled = self.consumer.update_member(group, member, updated, replaced, is_new, members, targets, owned,
                                                 records)
        resp = JoinGroupResponse(throttle_time_ms=0, error_code=0, generation_id=reconciled.member_epoch,
                                 protocol_type=cp.CONSUMER_PROTOCOL_TYPE,
                                 protocol_name=updated.classic_member_metadata.protocol_name(),  # type: ignore[union-attr]
                                 leader="", skip_assignment=False, member_id=member_id, members=[])

        def committed() -> None:
            self.consumer.timer.cancel(join_key(gid, member_id))
            if self.consumer.group(gid) is not None and member_id in self.consumer.group(gid).members:  # type: ignore[union-attr]
                self.consumer.schedule_session_ms(gid, member_id, session_timeout)
                self.consumer.fence_later(sync_key(gid, member_id), gid, member_id, rebalance_timeout,
                                          "the member failed to sync within timeout")
            fut.complete(resp)
        return CoordinatorResult(records=records, response=fut, on_committed=committed)

    # ------------------------------------------------------------------ SyncGroup

    def sync(self, group: ConsumerGroup, req: SyncGroupRequest, version: int, now_ms: int) -> CoordinatorResult:
        """Returns a result whose response is a Future of SyncGroupResponse."""
        fut = Future()
        gid = group.group_id
        instance_id = req.group_instance_id if version >= 3 else None
        protocol_type = req.protocol_type if version >= 5 else None
        protocol_name = req.protocol_name if version >= 5 else None
        try:
            if group.is_empty():
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Group {gid} is empty.")
            member = self._member(group, req.member_id, instance_id)
            _check_generation(member, req.generation_id)
            meta = member.classic_member_metadata
            assert meta is not None
            if protocol_type is not None and protocol_type != cp.CONSUMER_PROTOCOL_TYPE:
                raise KafkaError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                                    f"The protocol type {protocol_type} is not the group protocol type consumer.")
            if protocol_name is not None and protocol_name != meta.protocol_name():
                raise KafkaError(Errors.INCONSISTENT_GROUP_PROTOCOL,
                                    f"The protocol name {protocol_name} is not {meta.protocol_name()}.")
            if self._rebalance_in_progress(group, member):
                raise KafkaError(Errors.REBALANCE_IN_PROGRESS,
                                    f"A new rebalance is triggered in group {gid}: member {member.member_id} "
                                    "should rejoin to catch up.")
            try:
                assignment = cp.serialize_assignment(cp.to_topic_names(member.assigned_partitions, self.consumer.image),
                                                     cp.deserialize_version(meta.first_metadata()))
            except cp.MalformedConsumerProtocol:
                raise KafkaError(Errors.UNKNOWN_SERVER_ERROR,
                                    "Malformed embedded consumer protocol in version deserialization.") from None
        except KafkaError as exc:
            fut.complete(sync_error(exc.code))
            return CoordinatorResult(response=fut, replay=False)
        mid = member.member_id

        def committed() -> None:
            self.consumer.timer.cancel(sync_key(gid, mid))
            self.consumer.schedule_session_ms(gid, mid, meta.session_timeout_ms)
            fut.complete(SyncGroupResponse(throttle_time_ms=0, error_code=0, protocol_type=protocol_type,
                                           protocol_name=protocol_name, assignment=assignment))
        return CoordinatorResult(response=fut, replay=False, on_committed=committed)

    # ------------------------------------------------------------------ Heartbeat

    def heartbeat(self, group: ConsumerGroup, req: HeartbeatRequest, version: int, now_ms: int) -> int:
        instance_id = req.group_instance_id if version >= 3 else None
        try:
            member = self._member(group, req.member_id, instance_id)
            _check_generation(member, req.generation_id)
        except KafkaError as exc:
            return exc.code
        gid = group.group_id
        meta = member.classic_member_metadata
        assert meta is not None
        self.consumer.schedule_session_ms(gid, member.member_id, meta.session_timeout_ms)
        # rejoin: the group epoch moved on, partitions must be revoked, or awaited ones were released
        if (member.member_epoch < group.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS
                or (member.state == MemberState.UNRELEASED_PARTITIONS
                    and not group.waiting_on_unreleased_partition(member))):
            self._schedule_join_timeout(gid, member)
            return int(Errors.REBALANCE_IN_PROGRESS)
        return 0

    # ------------------------------------------------------------------ LeaveGroup

    def leave(self, group: ConsumerGroup, req: LeaveGroupRequest, version: int, now_ms: int) -> CoordinatorResult:
        gid = group.group_id
        identities = ([(m.member_id, m.group_instance_id) for m in req.members] if version >= 3
                      else [(req.member_id, None)])
        records: list[CoordinatorRecord] = []
        out: list[tuple[str, str | None, int]] = []
        leaving: dict[str, ConsumerGroupMember] = {}
        for member_id, instance_id in identities:
            try:
                if instance_id is None:
                    member = group.members.get(member_id)
                    if member is None:
                        raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {member_id} is not in group {gid}.")
                else:
                    known = group.static_members.get(instance_id)
                    member = group.members.get(known) if known is not None else None
                    if member is None:
                        raise KafkaError(Errors.UNKNOWN_MEMBER_ID,
                                            f"Instance id {instance_id} is unknown in group {gid}.")
                    # an admin removes a static member by instance id alone
                    if member_id and member_id != member.member_id:
                        raise KafkaError(Errors.FENCED_INSTANCE_ID,
                                            f"Static member {member_id} with instance id {instance_id} is fenced.")
                    member_id = member.member_id
                if not member.use_classic_protocol:
                    raise KafkaError(Errors.UNKNOWN_MEMBER_ID,
                                        f"Member {member.member_id} does not use the classic protocol.")
                if member_id not in leaving:
                    log.info("group %s: classic member %s left", gid, member_id)
                    records.extend(rec.member_removal_records(gid, member_id))
                    self.consumer.cancel_timers(gid, member_id)
                    leaving[member_id] = member
                out.append((member_id, instance_id, 0))
            except KafkaError as exc:
                out.append((member_id, instance_id, exc.code))
        if records:
            metadata = self.consumer.subscription_metadata_without(group, tuple(leaving.values()))
            if metadata != group.subscription_metadata:
                records.append(rec.partition_metadata_record(gid, metadata))
            records.append(rec.group_epoch_record(gid, group.group_epoch + 1))
        members = [LeaveGroupResponse.MemberResponse(member_id=mid, group_instance_id=iid, error_code=code)
                   for mid, iid, code in out]
        top = 0 if version >= 3 else (out[0][2] if out else 0)
        return CoordinatorResult(records=records, response=LeaveGroupResponse(throttle_time_ms=0, error_code=top,
                                                                              members=members))


def _check_generation(member: ConsumerGroupMember, generation_id: int) -> None:
    """Kafka's throwIfGenerationIdUnmatched: a classic member's generation is its member epoch."""
    if generation_id != member.member_epoch:
        raise KafkaError(Errors.ILLEGAL_GENERATION,
                            f"The request generation id {generation_id} is not equal to the member epoch "
                            f"{member.member_epoch} of member {member.member_id}.")

