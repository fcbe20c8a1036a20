"""KIP-848 online migration between classic and consumer groups (Kafka 4's
GroupMetadataManager: validateOnlineUpgrade / convertToConsumerGroup,
validateOnlineDowngradeWithFencedMember / convertToClassicGroup; ConsumerGroup.fromClassicGroup,
ClassicGroup.fromConsumerGroup), under `group.consumer.migration.policy`.

Upgrade — a ConsumerGroupHeartbeat (member epoch 0) for a non-empty classic group whose
protocol type is "consumer", with the policy allowing it and at most group.consumer.max.size
members: pending JoinGroup/SyncGroup answers get REBALANCE_IN_PROGRESS; one batch holds the
classic group's tombstone and the consumer group's records (member subscriptions with their
ClassicMemberMetadata, group epoch = the generation, target = current assignment = each
member's classic assignment, target epoch, current assignments at member epoch = the
generation, all Stable). The heartbeat then goes on against that group (its records follow in
the same batch), so the joining member bumps the epoch and the assignor runs. An Empty classic
group is simply replaced (its tombstone). Anything else: GROUP_ID_NOT_FOUND.

Downgrade — when the member being removed (leave, session/rebalance/join/sync timeout) is the
last consumer-protocol member, at least one classic member remains, the policy allows it and
at most group.max.size remain: the consumer group's tombstones (Kafka's order) and one
GroupMetadata record for the classic group (generation = group epoch, protocol chosen by vote,
leader = the first member, assignments = the consumer group's target assignment serialized at
each member's protocol version). As in Kafka the state is changed in memory (not replayed),
the members' heartbeat deadlines start and a rebalance is prepared so they rejoin.

Concurrency: the shard's thread, like the managers it joins.
"""

from __future__ import annotations

import logging

from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.group import consumer_group_records as rec
from pybroker.coordinators.group import consumer_protocol as cp
from pybroker.coordinators.group.classic_group import (
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
)
from pybroker.coordinators.group.consumer_group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from pybroker.coordinators.group.consumer_group_manager import ConsumerGroupManager, replay_into
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.group_metadata_manager import (
    GroupMetadataManager,
    join_error,
    sync_error,
)
from pybroker.coordinators.record_serde import CoordinatorRecord
from pybroker.protocol.errors import Errors, KafkaError

log = logging.getLogger("pybroker.group")

S = ClassicGroupState


class GroupMigration:
    def __init__(self, config: GroupConfig, classic: GroupMetadataManager, consumer: ConsumerGroupManager) -> None:
        self.config = config
        self.classic = classic
        self.consumer = consumer

    # ------------------------------------------------------------------ upgrade

    def upgrade_classic_group(self, group_id: str, member_epoch: int,
                              records: list[CoordinatorRecord]) -> ConsumerGroup | None:
        """The ConsumerGroupManager's hook: None when no classic group holds the id."""
        g = self.classic.group(group_id)
        if g is None or g.state == S.DEAD:
            return None
        not_consumer = KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if member_epoch != 0:
            raise not_consumer
        if g.state == S.EMPTY:
            # an Empty classic group (offsets only, or members only promised an id) becomes a
            # consumer group, keeping its offsets (Kafka's maybeDeleteEmptyClassicGroup)
            records.append(serde.group_metadata_tombstone(group_id))
            return ConsumerGroup(group_id)
        if not self.validate_online_upgrade(g):
            raise not_consumer
        return self.convert_to_consumer_group(g, records)

    def validate_online_upgrade(self, g: ClassicGroup) -> bool:
        if not self.config.upgrade_enabled:
            log.info("cannot upgrade classic group %s to a consumer group: the online upgrade is disabled",
                     g.group_id)
            return False
        if g.protocol_type != cp.CONSUMER_PROTOCOL_TYPE:
            log.info("cannot upgrade classic group %s to a consumer group: it does not use the consumer "
                     "embedded protocol", g.group_id)
            return False
        if len(g.members) > self.config.consumer_group_max_size:
            log.info("cannot upgrade classic group %s to a consumer group: its size exceeds "
                     "group.consumer.max.size", g.group_id)
            return False
        return True

    def convert_to_consumer_group(self, g: ClassicGroup, records: list[CoordinatorRecord]) -> ConsumerGroup:
        """Appends the conversion records; returns a scratch group holding what they create."""
        gid, generation = g.group_id, g.generation_id
        members: list[ConsumerGroupMember] = []
        for cm in g.members.values():
            protocol = g.protocol_name if g.protocol_name is not None else next(iter(cm.protocol_names()), None)
            try:
                sub = cp.deserialize_subscription(cm.metadata(protocol))
                assignment = cp.deserialize_assignment(cm.assignment)
            except cp.MalformedConsumerProtocol as exc:
                log.warning("cannot upgrade classic group %s: member %s: %s", gid, cm.member_id, exc)
                raise KafkaError(Errors.GROUP_ID_NOT_FOUND,
                                    f"Cannot upgrade the classic group {gid} to consumer group because the "
                                    "embedded consumer protocol is malformed.") from None
            members.append(ConsumerGroupMember(
                cm.member_id, instance_id=cm.group_instance_id, rack_id=getattr(sub, "rack_id", None),
                client_id=cm.client_id, client_host=cm.client_host, subscribed_topic_names=tuple(sub.topics),
                rebalance_timeout_ms=cm.rebalance_timeout_ms, member_epoch=generation,
                previous_member_epoch=generation, state=MemberState.STABLE,
                assigned_partitions=cp.to_topic_ids(assignment.assigned_partitions, self.consumer.image),
                classic_member_metadata=ClassicMemberMetadata(cm.session_timeout_ms, tuple(cm.protocols))))
        # the classic members' pending answers: another rebalance follows at once
        for cm in g.members.values():
            if cm.join_future is not None:
                fut, cm.join_future = cm.join_future, None
                fut.complete(join_error(cm.member_id, Errors.REBALANCE_IN_PROGRESS))
            if cm.sync_future is not None:
                fut, cm.sync_future = cm.sync_future, None
                fut.complete(sync_error(Errors.REBALANCE_IN_PROGRESS))
        created = rec.consumer_group_creation_records(gid, generation, members,
                                                      {m.member_id: m.assigned_partitions for m in members})
        records.append(serde.group_metadata_tombstone(gid))
        records.extend(created)
        scratch = ConsumerGroup(gid)
        for record in created:
            replay_into(scratch, record)
        for m in members:
            # if the append fails the group stays classic and these find no consumer member
            self.consumer.schedule_session(gid, m)
        log.info("group %s: classic group upgraded to a consumer group at epoch %d with %d members", gid,
                 generation, len(members))
        return scratch

    # ------------------------------------------------------------------ downgrade

    def downgrade(self, group: ConsumerGroup, leaving_member_id: str, now_ms: int) -> list[CoordinatorRecord] | None:
        """The ConsumerGroupManager's hook, run when `leaving_member_id` is fenced or leaves."""
        if not self.validate_online_downgrade(group, leaving_member_id):
            return None
        return self.convert_to_classic_group(group, leaving_member_id, now_ms)

    def validate_online_downgrade(self, group: ConsumerGroup, leaving_member_id: str) -> bool:
        if not group.all_members_use_classic_protocol_except(leaving_member_id):
            return False
        if len(group.members) <= 1:
            return False  # the group becomes empty: it stays a consumer group
        if not self.config.downgrade_enabled:
            log.info("cannot downgrade consumer group %s to a classic group: the online downgrade is disabled",
                     group.group_id)
            return False
        if len(group.members) - 1 > self.config.max_size:
            log.info("cannot downgrade consumer group %s to a classic group: its size exceeds group.max.size",
                     group.group_id)
            return False
        return True

    def convert_to_classic_group(self, group: ConsumerGroup, leaving_member_id: str,
                                 now_ms: int) -> list[CoordinatorRecord] | None:
        gid = group.group_id
        classic = ClassicGroup(gid, state=S.STABLE, state_timestamp_ms=now_ms, generation_id=group.group_epoch,
                               protocol_type=cp.CONSUMER_PROTOCOL_TYPE)
        for mid, m in group.members.items():
            if mid == leaving_member_id or m.classic_member_metadata is None:
                continue
            meta = m.classic_member_metadata
            classic.add(ClassicGroupMember(mid, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                           meta.session_timeout_ms, cp.CONSUMER_PROTOCOL_TYPE,
                                           list(meta.supported_protocols)))
        classic.protocol_name = classic.select_protocol()
        for cm in classic.members.values():
            try:
                version = cp.deserialize_version(cm.metadata(classic.protocol_name))
            except cp.MalformedConsumerProtocol as exc:
                # Kafka fails the operation here; we keep the consumer group and fence the member as usual
                log.warning("cannot downgrade consumer group %s: member %s: %s", gid, cm.member_id, exc)
                return None
            cm.assignment = cp.serialize_assignment(
                cp.to_topic_names(group.target_assignment.get(cm.member_id, {}), self.consumer.image), version)
        records = rec.conversion_tombstones(gid, list(group.members))
        records.append(serde.group_metadata_record(classic))
        # the state changes here, not by replay: the classic group must exist to rebalance
        self.consumer.remove_group(gid)
        self.classic.groups[gid] = classic
        for cm in classic.members.values():
            self.classic.schedule_heartbeat(classic, cm.member_id, cm.session_timeout_ms)
        self.classic.prepare_rebalance(classic, now_ms)
        log.info("group %s: consumer group downgraded to a classic group at generation %d with %d members",
                 gid, classic.generation_id, len(classic.members))
        return records
