"""Key/value records of __share_group_state (Kafka's ShareCoordinatorRecordSerde).

Format of one record, as Kafka writes it so Kafka's tools can read our topic:
    key   = int16 record type + key struct (GroupId string, TopicId uuid, Partition int32)
    value = int16 value version (0) + value struct (flexible); a null value is a tombstone

Record types: 0 ShareSnapshot (the whole state of one share partition: state epoch, leader
epoch, start offset, timestamps, batches), 1 ShareUpdate (the batches one write changed, merged
into the last snapshot on replay). A deleted share partition is a tombstone under its
ShareSnapshot key. Stateless; safe from any thread.
"""

from __future__ import annotations

import struct
from typing import Any

from pybroker.coordinators.record_serde import CoordinatorRecord, UnknownRecordTypeError
from pybroker.protocol import messages as m

SHARE_SNAPSHOT_RECORD_TYPE = 0
SHARE_UPDATE_RECORD_TYPE = 1
VALUE_VERSION = 0

_H = struct.Struct(">h")


def decode(key: bytes | memoryview, value: bytes | memoryview | None) -> CoordinatorRecord:
    """Decode one record; UnknownRecordTypeError for a type this broker cannot read."""
    (record_type,) = _H.unpack_from(key, 0)
    if record_type == SHARE_SNAPSHOT_RECORD_TYPE:
        k: object = m.ShareSnapshotKey.decode(memoryview(key)[2:], record_type)
        value_cls: Any = m.ShareSnapshotValue
    elif record_type == SHARE_UPDATE_RECORD_TYPE:
        k = m.ShareUpdateKey.decode(memoryview(key)[2:], record_type)
        value_cls = m.ShareUpdateValue
    else:
        raise UnknownRecordTypeError(f"unknown __share_group_state record type {record_type}")
    if value is None:
        return CoordinatorRecord(record_type, k, -1, None)
    (value_version,) = _H.unpack_from(value, 0)
    return CoordinatorRecord(record_type, k, value_version, value_cls.decode(memoryview(value)[2:], value_version))


def snapshot_record(group_id: str, topic_id: bytes, partition: int, value: m.ShareSnapshotValue) -> CoordinatorRecord:
    return CoordinatorRecord(SHARE_SNAPSHOT_RECORD_TYPE,
                             m.ShareSnapshotKey(group_id=group_id, topic_id=topic_id, partition=partition),
                             VALUE_VERSION, value)


def update_record(group_id: str, topic_id: bytes, partition: int, value: m.ShareUpdateValue) -> CoordinatorRecord:
    return CoordinatorRecord(SHARE_UPDATE_RECORD_TYPE,
                             m.ShareUpdateKey(group_id=group_id, topic_id=topic_id, partition=partition),
                             VALUE_VERSION, value)


def tombstone(group_id: str, topic_id: bytes, partition: int) -> CoordinatorRecord:
    """Kafka's newShareStateTombstoneRecord: the ShareSnapshot key with a null value."""
    return CoordinatorRecord(SHARE_SNAPSHOT_RECORD_TYPE,
                             m.ShareSnapshotKey(group_id=group_id, topic_id=topic_id, partition=partition), -1, None)
