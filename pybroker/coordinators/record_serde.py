"""Key/value records of __consumer_offsets (Kafka's GroupCoordinatorRecordSerde).

Format of one record, as Kafka writes it so Kafka's tools can read our topic:
    key   = int16 record type (the key's schema "version") + key struct at that version
    value = int16 value version + value struct at that version; a null value is a tombstone

Record types: 0/1 OffsetCommitKey (1 is what Kafka writes), 2 GroupMetadataKey,
3..8 the KIP-848 ConsumerGroup* records (decoded here, replayed by a later coordinator), 9..15
the KIP-932 ShareGroup* records (share_group_records.py).
Versions written: OffsetCommitValue v3 (v1 only when an expire timestamp is set, as Kafka),
GroupMetadataValue v3. Stateless; safe from any thread.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from pybroker.protocol import messages as m
from pybroker.protocol.api_message import ApiMessage

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

# record type -> (key class, value class)
RECORD_TYPES: dict[int, tuple[type[ApiMessage], type[ApiMessage]]] = {
    0: (m.OffsetCommitKey, m.OffsetCommitValue),
    1: (m.OffsetCommitKey, m.OffsetCommitValue),
    2: (m.GroupMetadataKey, m.GroupMetadataValue),
    3: (m.ConsumerGroupMetadataKey, m.ConsumerGroupMetadataValue),
    4: (m.ConsumerGroupPartitionMetadataKey, m.ConsumerGroupPartitionMetadataValue),
    5: (m.ConsumerGroupMemberMetadataKey, m.ConsumerGroupMemberMetadataValue),
    6: (m.ConsumerGroupTargetAssignmentMetadataKey, m.ConsumerGroupTargetAssignmentMetadataValue),
    7: (m.ConsumerGroupTargetAssignmentMemberKey, m.ConsumerGroupTargetAssignmentMemberValue),
    8: (m.ConsumerGroupCurrentMemberAssignmentKey, m.ConsumerGroupCurrentMemberAssignmentValue),
    # KIP-932 share groups (coordinators/group/share_group_records.py); 9 is read, no longer written
    9: (m.ShareGroupPartitionMetadataKey, m.ShareGroupPartitionMetadataValue),
    10: (m.ShareGroupMemberMetadataKey, m.ShareGroupMemberMetadataValue),
    11: (m.ShareGroupMetadataKey, m.ShareGroupMetadataValue),
    12: (m.ShareGroupTargetAssignmentMetadataKey, m.ShareGroupTargetAssignmentMetadataValue),
    13: (m.ShareGroupTargetAssignmentMemberKey, m.ShareGroupTargetAssignmentMemberValue),
    14: (m.ShareGroupCurrentMemberAssignmentKey, m.ShareGroupCurrentMemberAssignmentValue),
    15: (m.ShareGroupStatePartitionMetadataKey, m.ShareGroupStatePartitionMetadataValue),
}
_H = struct.Struct(">h")


class UnknownRecordTypeError(ValueError):
    pass


@dataclass(slots=True)
class CoordinatorRecord:
    """One record: typed key and value (None = tombstone) with their schema versions."""

    key_version: int
    key: Any
    value_version: int
    value: Any | None

    def encode(self) -> tuple[bytes, bytes | None]:
        k = _H.pack(self.key_version) + self.key.encode(self.key_version)
        if self.value is None:
            return k, None
        return k, _H.pack(self.value_version) + self.value.encode(self.value_version)


def decode(key: bytes | memoryview, value: bytes | memoryview | None) -> CoordinatorRecord:
    """Decode one record; raises UnknownRecordTypeError for a type this broker cannot read."""
    (key_version,) = _H.unpack_from(key, 0)
    types = RECORD_TYPES.get(key_version)
    if types is None:
        raise UnknownRecordTypeError(f"unknown __consumer_offsets record type {key_version}")
    key_cls, value_cls = types
    k = key_cls.decode(memoryview(key)[2:], key_version)
    if value is None:
        return CoordinatorRecord(key_version, k, -1, None)
    (value_version,) = _H.unpack_from(value, 0)
    v = value_cls.decode(memoryview(value)[2:], value_version)
    return CoordinatorRecord(key_version, k, value_version, v)


# ---------------------------------------------------------------------- builders

def offset_commit_record(group: str, topic: str, partition: int, offset: int, leader_epoch: int,
                         metadata: str, commit_timestamp_ms: int,
                         expire_timestamp_ms: int = -1) -> CoordinatorRecord:
    value_version = (OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if expire_timestamp_ms >= 0
                     else OFFSET_COMMIT_VALUE_VERSION)
    return CoordinatorRecord(
        OFFSET_COMMIT_KEY_VERSION, m.OffsetCommitKey(group=group, topic=topic, partition=partition),
        value_version, m.OffsetCommitValue(offset=offset, leader_epoch=leader_epoch, metadata=metadata,
                                           commit_timestamp=commit_timestamp_ms,
                                           expire_timestamp=expire_timestamp_ms))


def offset_commit_tombstone(group: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(OFFSET_COMMIT_KEY_VERSION,
                             m.OffsetCommitKey(group=group, topic=topic, partition=partition), -1, None)


def group_metadata_record(group: Any, assignments: dict[str, bytes] | None = None) -> CoordinatorRecord:
    """The GroupMetadata record of a classic group (members with their current assignment)."""
    members = []
    for mem in group.members.values():
        members.append(m.GroupMetadataValue.MemberMetadata(
            member_id=mem.member_id, group_instance_id=mem.group_instance_id, client_id=mem.client_id,
            client_host=mem.client_host, rebalance_timeout=mem.rebalance_timeout_ms,
            session_timeout=mem.session_timeout_ms, subscription=bytes(mem.metadata(group.protocol_name)),
            assignment=bytes((assignments or {}).get(mem.member_id, mem.assignment))))
    value = m.GroupMetadataValue(protocol_type=group.protocol_type or "", generation=group.generation_id,
                                 protocol=group.protocol_name, leader=group.leader_id,
                                 current_state_timestamp=group.state_timestamp_ms, members=members)
    return CoordinatorRecord(GROUP_METADATA_KEY_VERSION, m.GroupMetadataKey(group=group.group_id),
                             GROUP_METADATA_VALUE_VERSION, value)


def group_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(GROUP_METADATA_KEY_VERSION, m.GroupMetadataKey(group=group_id), -1, None)
