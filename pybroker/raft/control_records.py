"""KRaft control records (Kafka's ControlRecordType / ControlRecordUtils).

A control batch (attribute bit 5) holds records whose key is the control record key,
int16 version (0) + int16 type, and whose value is a version-0 message that starts with its
own int16 Version field:

    type 2  LeaderChangeMessage   first batch of every leader epoch
    type 3  SnapshotHeaderRecord  first batch of every snapshot (checkpoint) file
    type 4  SnapshotFooterRecord  last batch of every snapshot file
    type 5  KRaftVersionRecord    kraft.version (dynamic quorum, KIP-853)
    type 6  VotersRecord          the voter set (dynamic quorum, KIP-853)

Types 0/1 (transaction ABORT/COMMIT markers) never appear in __cluster_metadata.

Concurrency: pure functions.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from pybroker.protocol._generated.k_raft_version_record import KRaftVersionRecord
from pybroker.protocol._generated.leader_change_message import LeaderChangeMessage
from pybroker.protocol._generated.snapshot_footer_record import SnapshotFooterRecord
from pybroker.protocol._generated.snapshot_header_record import SnapshotHeaderRecord
from pybroker.protocol._generated.voters_record import VotersRecord
from pybroker.records.batch import build_batch

LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
KRAFT_VERSION = 5
KRAFT_VOTERS = 6

CONTROL_RECORD_CLASSES: dict[int, Any] = {
    LEADER_CHANGE: LeaderChangeMessage,
    SNAPSHOT_HEADER: SnapshotHeaderRecord,
    SNAPSHOT_FOOTER: SnapshotFooterRecord,
    KRAFT_VERSION: KRaftVersionRecord,
    KRAFT_VOTERS: VotersRecord,
}
_TYPE_OF = {cls: t for t, cls in CONTROL_RECORD_CLASSES.items()}
_KEY = struct.Struct(">hh")


class ControlRecord(NamedTuple):
    type: int
    message: Any


def control_key(record_type: int) -> bytes:
    return _KEY.pack(0, record_type)


def control_type(key: bytes | memoryview | None) -> int:
    """The type of a control record key; -1 (Kafka's UNKNOWN) when unreadable."""
    if key is None or len(key) < 4:
        return -1
    version, record_type = _KEY.unpack_from(key, 0)
    return record_type if version == 0 else -1


def encode_control_record(message: Any) -> tuple[bytes, bytes]:
    """(key, value) of one control record."""
    record_type = _TYPE_OF[type(message)]
    return control_key(record_type), bytes(message.encode(0))


def decode_control_record(key: bytes | memoryview | None, value: bytes | memoryview | None
                          ) -> ControlRecord:
    record_type = control_type(key)
    cls = CONTROL_RECORD_CLASSES.get(record_type)
    if cls is None or value is None:
        return ControlRecord(record_type, None)
    message, _ = cls._DECODERS[0](memoryview(value), 0)
    return ControlRecord(record_type, message)


def build_control_batch(messages: list[Any], *, base_offset: int, epoch: int, timestamp_ms: int) -> bytes:
    """One control batch holding `messages` (LeaderChangeMessage, SnapshotHeaderRecord, ...)."""
    rows = []
    for message in messages:
        key, value = encode_control_record(message)
        rows.append((timestamp_ms, key, value, ()))
    return build_batch(rows, base_offset=base_offset, control=True, partition_leader_epoch=epoch)


def leader_change_message(leader_id: int, voters: list[int], granting_voters: list[int]) -> LeaderChangeMessage:
    return LeaderChangeMessage(
        version=0, leader_id=leader_id,
        voters=[LeaderChangeMessage.Voter(voter_id=v) for v in sorted(voters)],
        granting_voters=[LeaderChangeMessage.Voter(voter_id=v) for v in sorted(granting_voters)])
