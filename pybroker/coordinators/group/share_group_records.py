"""Builders of the KIP-932 records of __consumer_offsets (Kafka's GroupCoordinatorRecordHelpers,
share half), as Kafka 4.2 writes them. Key type = the record type, every value at version 0; a
null value is a tombstone:

    10 ShareGroupMemberMetadata           a member's rack, client id/host, subscribed topic names
    11 ShareGroupMetadata                 the group epoch and the subscribed topics' metadata hash
    12 ShareGroupTargetAssignmentMetadata the target assignment's epoch
    13 ShareGroupTargetAssignmentMember   a member's target partitions
    14 ShareGroupCurrentMemberAssignment  a member's epochs, state and assigned partitions
    15 ShareGroupStatePartitionMetadata   initializing / initialized / deleting share partitions

Type 9 (ShareGroupPartitionMetadata) is no longer written since Kafka 4.1 (the metadata hash
replaced it); a log holding one is read and the record ignored.

Removing a member writes the tombstones of its current assignment, target assignment and
subscription, in this order (Kafka's shareGroupFenceMember); deleting a group writes Kafka's
ShareGroup.createGroupTombstoneRecords order. Stateless; any thread.
"""

from __future__ import annotations

from pybroker.coordinators.group.share_group import Assignment, InitTopic, ShareGroupMember
from pybroker.coordinators.record_serde import CoordinatorRecord
from pybroker.protocol import messages as m

PARTITION_METADATA = 9
MEMBER_METADATA = 10
GROUP_METADATA = 11
TARGET_ASSIGNMENT_METADATA = 12
TARGET_ASSIGNMENT_MEMBER = 13
CURRENT_MEMBER_ASSIGNMENT = 14
STATE_PARTITION_METADATA = 15
RECORD_TYPES = range(PARTITION_METADATA, STATE_PARTITION_METADATA + 1)


def _topics(assignment: Assignment, cls: type) -> list:
    return [cls(topic_id=tid, partitions=sorted(parts)) for tid, parts in sorted(assignment.items()) if parts]


def group_epoch_record(group_id: str, epoch: int, metadata_hash: int) -> CoordinatorRecord:
    return CoordinatorRecord(GROUP_METADATA, m.ShareGroupMetadataKey(group_id=group_id), 0,
                             m.ShareGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash))


def group_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(GROUP_METADATA, m.ShareGroupMetadataKey(group_id=group_id), -1, None)


def member_metadata_record(group_id: str, member: ShareGroupMember) -> CoordinatorRecord:
    value = m.ShareGroupMemberMetadataValue(rack_id=member.rack_id, client_id=member.client_id,
                                            client_host=member.client_host,
                                            subscribed_topic_names=list(member.subscribed_topic_names))
    return CoordinatorRecord(MEMBER_METADATA, m.ShareGroupMemberMetadataKey(group_id=group_id,
                                                                            member_id=member.member_id), 0, value)


def member_metadata_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(MEMBER_METADATA, m.ShareGroupMemberMetadataKey(group_id=group_id, member_id=member_id),
                             -1, None)


def target_assignment_epoch_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(TARGET_ASSIGNMENT_METADATA, m.ShareGroupTargetAssignmentMetadataKey(group_id=group_id),
                             0, m.ShareGroupTargetAssignmentMetadataValue(assignment_epoch=epoch))


def target_assignment_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(TARGET_ASSIGNMENT_METADATA, m.ShareGroupTargetAssignmentMetadataKey(group_id=group_id),
                             -1, None)


def target_member_record(group_id: str, member_id: str, assignment: Assignment) -> CoordinatorRecord:
    V = m.ShareGroupTargetAssignmentMemberValue
    return CoordinatorRecord(TARGET_ASSIGNMENT_MEMBER,
                             m.ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), 0,
                             V(topic_partitions=_topics(assignment, V.TopicPartition)))


def target_member_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(TARGET_ASSIGNMENT_MEMBER,
                             m.ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id), -1, None)


def current_assignment_record(group_id: str, member: ShareGroupMember) -> CoordinatorRecord:
    V = m.ShareGroupCurrentMemberAssignmentValue
    value = V(member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch,
              state=member.state, assigned_partitions=_topics(member.assigned_partitions, V.TopicPartitions))
    return CoordinatorRecord(CURRENT_MEMBER_ASSIGNMENT,
                             m.ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member.member_id),
                             0, value)


def current_assignment_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(CURRENT_MEMBER_ASSIGNMENT,
                             m.ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id), -1, None)


def state_partition_metadata_record(group_id: str, initializing: dict[bytes, InitTopic],
                                    initialized: dict[bytes, InitTopic],
                                    deleting: dict[bytes, str]) -> CoordinatorRecord:
    V = m.ShareGroupStatePartitionMetadataValue

    def info(topics: dict[bytes, InitTopic]) -> list:
        return [V.TopicPartitionsInfo(topic_id=tid, topic_name=t.name, partitions=sorted(t.partitions))
                for tid, t in sorted(topics.items()) if t.partitions]
    value = V(initializing_topics=info(initializing), initialized_topics=info(initialized),
              deleting_topics=[V.TopicInfo(topic_id=tid, topic_name=name) for tid, name in sorted(deleting.items())])
    return CoordinatorRecord(STATE_PARTITION_METADATA, m.ShareGroupStatePartitionMetadataKey(group_id=group_id), 0,
                             value)


def state_partition_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(STATE_PARTITION_METADATA, m.ShareGroupStatePartitionMetadataKey(group_id=group_id), -1,
                             None)


def member_removal_records(group_id: str, member_id: str) -> list[CoordinatorRecord]:
    return [current_assignment_tombstone(group_id, member_id), target_member_tombstone(group_id, member_id),
            member_metadata_tombstone(group_id, member_id)]


def group_tombstones(group_id: str, member_ids: list[str]) -> list[CoordinatorRecord]:
    """Kafka's ShareGroup.createGroupTombstoneRecords: current assignments, target assignments,
    target epoch, subscriptions, share-state metadata, group epoch."""
    return [*(current_assignment_tombstone(group_id, mid) for mid in member_ids),
            *(target_member_tombstone(group_id, mid) for mid in member_ids),
            target_assignment_epoch_tombstone(group_id),
            *(member_metadata_tombstone(group_id, mid) for mid in member_ids),
            state_partition_metadata_tombstone(group_id), group_epoch_tombstone(group_id)]
