"""Builders of the KIP-848 records of __consumer_offsets (Kafka's GroupCoordinatorRecordHelpers,
consumer half). Key type = the record type (3..8), every value at version 0; a null value is a
tombstone. Removing a member writes, in this order, the tombstones of its current assignment,
its target assignment and its subscription (replay resets, then removes, the member); deleting
a group ends with the ConsumerGroupMetadata tombstone. A classic-protocol member's metadata
record carries its ClassicMemberMetadata (tagged field 0). Converting a group
(`conversion_tombstones`, `consumer_group_creation_records`) writes Kafka's order:
ConsumerGroup.createGroupTombstoneRecords / createConsumerGroupRecords. Stateless; any thread.
"""

from __future__ import annotations

from pybroker.coordinators.group.consumer_group import (
    Assignment,
    ConsumerGroupMember,
    TopicMetadata,
)
from pybroker.coordinators.record_serde import CoordinatorRecord
from pybroker.protocol import messages as m

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8


def _sorted_topics(assignment: Assignment, cls: type) -> list:
    return [cls(topic_id=tid, partitions=sorted(parts)) for tid, parts in sorted(assignment.items()) if parts]


def group_epoch_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(GROUP_METADATA, m.ConsumerGroupMetadataKey(group_id=group_id), 0,
                             m.ConsumerGroupMetadataValue(epoch=epoch))


def group_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(GROUP_METADATA, m.ConsumerGroupMetadataKey(group_id=group_id), -1, None)


def partition_metadata_record(group_id: str, topics: dict[str, TopicMetadata]) -> CoordinatorRecord:
    V = m.ConsumerGroupPartitionMetadataValue
    value = V(topics=[V.TopicMetadata(topic_id=t.topic_id, topic_name=t.name, num_partitions=t.num_partitions,
                                      partition_metadata=[]) for _, t in sorted(topics.items())])
    return CoordinatorRecord(PARTITION_METADATA, m.ConsumerGroupPartitionMetadataKey(group_id=group_id), 0, value)


def partition_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(PARTITION_METADATA, m.ConsumerGroupPartitionMetadataKey(group_id=group_id), -1, None)


def member_metadata_record(group_id: str, member: ConsumerGroupMember) -> CoordinatorRecord:
    V = m.ConsumerGroupMemberMetadataValue
    classic = member.classic_member_metadata
    value = V(
        instance_id=member.instance_id, rack_id=member.rack_id, client_id=member.client_id,
        client_host=member.client_host, subscribed_topic_names=list(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex, rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor,
        classic_member_metadata=None if classic is None else V.ClassicMemberMetadata(
            session_timeout_ms=classic.session_timeout_ms,
            supported_protocols=[V.ClassicProtocol(name=n, metadata=md) for n, md in classic.supported_protocols]))
    return CoordinatorRecord(MEMBER_METADATA, m.ConsumerGroupMemberMetadataKey(group_id=group_id,
                                                                               member_id=member.member_id), 0, value)


def member_metadata_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(MEMBER_METADATA, m.ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id),
                             -1, None)


def target_assignment_epoch_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(TARGET_ASSIGNMENT_METADATA, m.ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id),
                             0, m.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch))


def target_assignment_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(TARGET_ASSIGNMENT_METADATA, m.ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id),
                             -1, None)


def target_member_record(group_id: str, member_id: str, assignment: Assignment) -> CoordinatorRecord:
    V = m.ConsumerGroupTargetAssignmentMemberValue
    return CoordinatorRecord(TARGET_ASSIGNMENT_MEMBER,
                             m.ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), 0,
                             V(topic_partitions=_sorted_topics(assignment, V.TopicPartition)))


def target_member_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(TARGET_ASSIGNMENT_MEMBER,
                             m.ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), -1, None)


def current_assignment_record(group_id: str, member: ConsumerGroupMember) -> CoordinatorRecord:
    V = m.ConsumerGroupCurrentMemberAssignmentValue
    value = V(member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch,
              state=int(member.state),
              assigned_partitions=_sorted_topics(member.assigned_partitions, V.TopicPartitions),
              partitions_pending_revocation=_sorted_topics(member.partitions_pending_revocation, V.TopicPartitions))
    return CoordinatorRecord(CURRENT_MEMBER_ASSIGNMENT,
                             m.ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member.member_id),
                             0, value)


def current_assignment_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(CURRENT_MEMBER_ASSIGNMENT,
                             m.ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), -1,
                             None)


def member_removal_records(group_id: str, member_id: str) -> list[CoordinatorRecord]:
    return [current_assignment_tombstone(group_id, member_id), target_member_tombstone(group_id, member_id),
            member_metadata_tombstone(group_id, member_id)]


def group_tombstones(group_id: str, member_ids: list[str]) -> list[CoordinatorRecord]:
    records: list[CoordinatorRecord] = []
    for mid in member_ids:
        records.extend(member_removal_records(group_id, mid))
    records += [target_assignment_epoch_tombstone(group_id), partition_metadata_tombstone(group_id),
                group_epoch_tombstone(group_id)]
    return records


def conversion_tombstones(group_id: str, member_ids: list[str]) -> list[CoordinatorRecord]:
    """Kafka's ConsumerGroup.createGroupTombstoneRecords (a group converted to a classic group):
    current assignments, target assignments, target epoch, subscriptions, subscription
    metadata, group epoch."""
    return [*(current_assignment_tombstone(group_id, mid) for mid in member_ids),
            *(target_member_tombstone(group_id, mid) for mid in member_ids),
            target_assignment_epoch_tombstone(group_id),
            *(member_metadata_tombstone(group_id, mid) for mid in member_ids),
            partition_metadata_tombstone(group_id), group_epoch_tombstone(group_id)]


def consumer_group_creation_records(group_id: str, epoch: int, members: list[ConsumerGroupMember],
                                    targets: dict[str, Assignment]) -> list[CoordinatorRecord]:
    """Kafka's ConsumerGroup.createConsumerGroupRecords (a classic group converted): member
    subscriptions, group epoch, target assignments, target epoch, current assignments."""
    return [*(member_metadata_record(group_id, mem) for mem in members), group_epoch_record(group_id, epoch),
            *(target_member_record(group_id, mem.member_id, targets.get(mem.member_id, {})) for mem in members),
            target_assignment_epoch_record(group_id, epoch),
            *(current_assignment_record(group_id, mem) for mem in members)]
