"""The values of `__remote_log_metadata` records in Kafka's bytes (Kafka's RemoteLogMetadataSerde
over AbstractApiMessageSerde, and the four Remote*Transform classes).

Format of one record value (the key is null, as Kafka writes it):
    unsigned varint frame version (1), unsigned varint api key, unsigned varint record version,
    then the record body (flexible from v0: compact strings, tagged fields).
Api keys (the specs are tools/kafka-protocol-overlay/storage/*.json, generated into
pybroker/protocol/_generated like every Kafka message):
    0 RemoteLogSegmentMetadataRecord         <-> RemoteLogSegmentMetadata
    1 RemoteLogSegmentMetadataUpdateRecord   <-> RemoteLogSegmentMetadataUpdate
    2 RemotePartitionDeleteMetadataRecord    <-> RemotePartitionDeleteMetadata
    3 RemoteLogSegmentMetadataSnapshotRecord <-> RemoteLogSegmentMetadataSnapshot (the entries of
      the consumer's snapshot file, never in the topic)

Versions: we write v0, which Kafka 3.6 to 4.2 read; KIP-1058's TxnIndexEmpty is v0's tagged
field 0, so an older reader skips it. We also read v1 (Kafka trunk's tagged
BrokerLeaderEpoch/EndOffset), which carries nothing the cache uses. A record we cannot read
raises MetadataParseError (Kafka's MetadataParseException), never anything else: the consumer
logs and skips it.

Stateless; safe from any thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from pybroker.protocol import messages as m
from pybroker.protocol.primitives import read_uvarint, uvarint

FRAME_VERSION = 1
WRITE_VERSION = 0  # what Kafka 3.6-4.2 brokers write and read (see the module docstring)

REMOTE_LOG_SEGMENT_METADATA_API_KEY = 0
REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY = 1
REMOTE_PARTITION_DELETE_API_KEY = 2
REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY = 3


class MetadataParseError(ValueError):
    """Kafka's MetadataParseException: the bytes are not a record this broker can read."""


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataSnapshot:
    """Kafka's RemoteLogSegmentMetadataSnapshot: a segment's metadata without its partition
    (the snapshot file is per partition)."""

    segment_id: bytes
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    segment_leader_epochs: tuple[tuple[int, int], ...]
    txn_idx_empty: bool = False

    @classmethod
    def of(cls, md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataSnapshot:
        return cls(md.remote_log_segment_id.id, md.start_offset, md.end_offset, md.max_timestamp_ms,
                   md.broker_id, md.event_timestamp_ms, md.segment_size_in_bytes, md.custom_metadata,
                   md.state, md.segment_leader_epochs, md.txn_idx_empty)

    def to_metadata(self, tp: TopicIdPartition) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(
            RemoteLogSegmentId(tp, self.segment_id), self.start_offset, self.end_offset,
            self.max_timestamp_ms, self.broker_id, self.event_timestamp_ms, self.segment_size_in_bytes,
            self.segment_leader_epochs, self.state, self.custom_metadata, self.txn_idx_empty)


RemoteLogMetadata = (RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate
                     | RemotePartitionDeleteMetadata | RemoteLogSegmentMetadataSnapshot)


# --- to records -------------------------------------------------------------------


def _tip_entry(cls: Any, tp: TopicIdPartition) -> Any:
    return cls.TopicIdPartitionEntry(name=tp.topic, id=tp.topic_id, partition=tp.partition)


def _segment_id_entry(cls: Any, sid: RemoteLogSegmentId) -> Any:
    return cls.RemoteLogSegmentIdEntry(topic_id_partition=_tip_entry(cls, sid.topic_id_partition), id=sid.id)


def _epoch_entries(cls: Any, epochs: tuple[tuple[int, int], ...]) -> list[Any]:
    return [cls.SegmentLeaderEpochEntry(leader_epoch=e, offset=o) for e, o in epochs]


def to_record(metadata: RemoteLogMetadata) -> Any:
    """The generated message of one metadata value (Kafka's toApiMessageAndVersion)."""
    if isinstance(metadata, RemoteLogSegmentMetadata):
        c: Any = m.RemoteLogSegmentMetadataRecord
        return c(remote_log_segment_id=_segment_id_entry(c, metadata.remote_log_segment_id),
                 start_offset=metadata.start_offset, end_offset=metadata.end_offset,
                 broker_id=metadata.broker_id, max_timestamp_ms=metadata.max_timestamp_ms,
                 event_timestamp_ms=metadata.event_timestamp_ms,
                 segment_leader_epochs=_epoch_entries(c, metadata.segment_leader_epochs),
                 segment_size_in_bytes=metadata.segment_size_in_bytes,
                 custom_metadata=metadata.custom_metadata,
                 remote_log_segment_state=int(metadata.state), txn_index_empty=metadata.txn_idx_empty)
    if isinstance(metadata, RemoteLogSegmentMetadataUpdate):
        c = m.RemoteLogSegmentMetadataUpdateRecord
        return c(remote_log_segment_id=_segment_id_entry(c, metadata.remote_log_segment_id),
                 broker_id=metadata.broker_id, event_timestamp_ms=metadata.event_timestamp_ms,
                 custom_metadata=metadata.custom_metadata, remote_log_segment_state=int(metadata.state))
    if isinstance(metadata, RemotePartitionDeleteMetadata):
        c = m.RemotePartitionDeleteMetadataRecord
        return c(topic_id_partition=_tip_entry(c, metadata.topic_id_partition), broker_id=metadata.broker_id,
                 event_timestamp_ms=metadata.event_timestamp_ms,
                 remote_partition_delete_state=int(metadata.state))
    if isinstance(metadata, RemoteLogSegmentMetadataSnapshot):
        c = m.RemoteLogSegmentMetadataSnapshotRecord
        return c(segment_id=metadata.segment_id, start_offset=metadata.start_offset,
                 end_offset=metadata.end_offset, broker_id=metadata.broker_id,
                 max_timestamp_ms=metadata.max_timestamp_ms, event_timestamp_ms=metadata.event_timestamp_ms,
                 segment_leader_epochs=_epoch_entries(c, metadata.segment_leader_epochs),
                 segment_size_in_bytes=metadata.segment_size_in_bytes,
                 custom_metadata=metadata.custom_metadata, remote_log_segment_state=int(metadata.state),
                 txn_index_empty=metadata.txn_idx_empty)
    raise TypeError(f"not remote log metadata: {type(metadata).__name__}")


def serialize(metadata: RemoteLogMetadata) -> bytes:
    """One record value in Kafka's bytes (RemoteLogMetadataSerde.serialize)."""
    record = to_record(metadata)
    return uvarint(FRAME_VERSION) + uvarint(type(record).API_KEY) + uvarint(WRITE_VERSION) + record.encode(WRITE_VERSION)


# --- from records -----------------------------------------------------------------


_CLASSES = {
    REMOTE_LOG_SEGMENT_METADATA_API_KEY: "RemoteLogSegmentMetadataRecord",
    REMOTE_LOG_SEGMENT_METADATA_UPDATE_API_KEY: "RemoteLogSegmentMetadataUpdateRecord",
    REMOTE_PARTITION_DELETE_API_KEY: "RemotePartitionDeleteMetadataRecord",
    REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_API_KEY: "RemoteLogSegmentMetadataSnapshotRecord",
}


def _tip(e: Any) -> TopicIdPartition:
    return TopicIdPartition(bytes(e.id), e.name, e.partition)


def _segment_id(e: Any) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(_tip(e.topic_id_partition), bytes(e.id))


def _epochs(entries: list[Any]) -> tuple[tuple[int, int], ...]:
    # Kafka keeps them in a map keyed by epoch (a repeated epoch: the last wins), ascending
    return tuple(sorted({e.leader_epoch: e.offset for e in entries}.items()))


def _segment_state(sid: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(sid)
    except ValueError:
        raise MetadataParseError(f"unknown remote log segment state {sid}") from None


def _check_segment(start: int, end: int, epochs: tuple[tuple[int, int], ...]) -> None:
    # RemoteLogSegmentMetadata's constructor checks
    if not epochs:
        raise MetadataParseError("segmentLeaderEpochs can not be empty")
    if start < 0 or end < start:
        raise MetadataParseError(f"invalid offsets: start {start}, end {end}")


def from_record(record: Any) -> RemoteLogMetadata:
    """The value of one decoded record (Kafka's fromApiMessageAndVersion)."""
    name = type(record).__name__
    if name == "RemoteLogSegmentMetadataRecord":
        epochs = _epochs(record.segment_leader_epochs)
        _check_segment(record.start_offset, record.end_offset, epochs)
        # createWithUpdates(state, broker, event time, custom metadata) of the record's own values
        return RemoteLogSegmentMetadata(
            _segment_id(record.remote_log_segment_id), record.start_offset, record.end_offset,
            record.max_timestamp_ms, record.broker_id, record.event_timestamp_ms,
            record.segment_size_in_bytes, epochs, _segment_state(record.remote_log_segment_state),
            None if record.custom_metadata is None else bytes(record.custom_metadata),
            bool(record.txn_index_empty))
    if name == "RemoteLogSegmentMetadataUpdateRecord":
        return RemoteLogSegmentMetadataUpdate(
            _segment_id(record.remote_log_segment_id), record.event_timestamp_ms,
            _segment_state(record.remote_log_segment_state), record.broker_id,
            None if record.custom_metadata is None else bytes(record.custom_metadata))
    if name == "RemotePartitionDeleteMetadataRecord":
        try:
            state = RemotePartitionDeleteState(record.remote_partition_delete_state)
        except ValueError:
            raise MetadataParseError(
                f"unknown remote partition delete state {record.remote_partition_delete_state}") from None
        return RemotePartitionDeleteMetadata(_tip(record.topic_id_partition), state,
                                             record.event_timestamp_ms, record.broker_id)
    if name == "RemoteLogSegmentMetadataSnapshotRecord":
        epochs = _epochs(record.segment_leader_epochs)
        _check_segment(record.start_offset, record.end_offset, epochs)
        return RemoteLogSegmentMetadataSnapshot(
            bytes(record.segment_id), record.start_offset, record.end_offset, record.max_timestamp_ms,
            record.broker_id, record.event_timestamp_ms, record.segment_size_in_bytes,
            None if record.custom_metadata is None else bytes(record.custom_metadata),
            _segment_state(record.remote_log_segment_state), epochs, bool(record.txn_index_empty))
    raise TypeError(f"not a remote log metadata record: {name}")


def deserialize(data: bytes | bytearray | memoryview) -> RemoteLogMetadata:
    """RemoteLogMetadataSerde.deserialize: MetadataParseError for anything unreadable."""
    buf = memoryview(data)
    try:
        frame, pos = read_uvarint(buf, 0)
        api_key, pos = read_uvarint(buf, pos)
        version, pos = read_uvarint(buf, pos)
    except Exception as e:  # truncated varint
        raise MetadataParseError(f"cannot read the record frame: {e}") from e
    if frame == 0:
        raise MetadataParseError("Could not deserialize metadata record with frame version 0.")
    if frame != FRAME_VERSION:
        raise MetadataParseError(f"Could not deserialize metadata record due to unknown frame version "
                                 f"{frame}(only frame version {FRAME_VERSION} is supported)")
    cls_name = _CLASSES.get(api_key)
    if cls_name is None:
        raise MetadataParseError(f"unknown remote log metadata record type {api_key}")
    cls: Any = getattr(m, cls_name)
    lo, hi = cls.VALID_VERSIONS
    if not lo <= version <= hi:
        raise MetadataParseError(f"unsupported version {version} of record type {api_key}")
    try:
        record, end = cls.decode_from(buf, pos, version)
    except Exception as e:
        raise MetadataParseError(f"Failed to deserialize record with type {api_key}: {e}") from e
    if end != len(buf):
        raise MetadataParseError(f"Found {len(buf) - end} byte(s) of garbage after {api_key}")
    return from_record(record)


__all__ = ["FRAME_VERSION", "MetadataParseError", "RemoteLogMetadata", "RemoteLogSegmentMetadataSnapshot",
           "deserialize", "from_record", "serialize", "to_record"]
