"""`__remote_log_metadata` record values in Kafka's bytes: golden bytes built field by field from
Kafka's specs (storage/src/main/resources/message/Remote*.json) and AbstractApiMessageSerde's
frame, round trips of every record type, and the errors for bytes that are not a record."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybroker.log.remote import metadata_serde as serde
from pybroker.log.remote.metadata_serde import MetadataParseError, RemoteLogSegmentMetadataSnapshot
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

TOPIC_ID = bytes(range(1, 17))
SEG_ID = bytes(range(101, 117))
TP = TopicIdPartition(TOPIC_ID, "orders", 7)
SID = RemoteLogSegmentId(TP, SEG_ID)


def cstr(s: str) -> bytes:  # compact string: uvarint(len + 1) + utf-8 (lengths < 127 here)
    b = s.encode()
    return bytes([len(b) + 1]) + b


def tip_entry() -> bytes:  # TopicIdPartitionEntry: Name, Id, Partition, no tags
    return cstr("orders") + TOPIC_ID + struct.pack(">i", 7) + b"\x00"


def seg_id_entry() -> bytes:  # RemoteLogSegmentIdEntry: TopicIdPartition, Id, no tags
    return tip_entry() + SEG_ID + b"\x00"


def epochs_entry(epochs: list[tuple[int, int]]) -> bytes:  # compact array of (int32, int64, no tags)
    return bytes([len(epochs) + 1]) + b"".join(struct.pack(">iq", e, o) + b"\x00" for e, o in epochs)


def test_segment_metadata_golden_bytes() -> None:
    md = RemoteLogSegmentMetadata(SID, 100, 199, 1_700_000_000_123, 3, 1_700_000_000_456, 4096,
                                  ((2, 100), (5, 150)), custom_metadata=b"\xca\xfe")
    expected = (b"\x01\x00\x00"  # frame version 1, api key 0, version 0
                + seg_id_entry()
                + struct.pack(">qqiqq", 100, 199, 3, 1_700_000_000_123, 1_700_000_000_456)
                + epochs_entry([(2, 100), (5, 150)])
                + struct.pack(">i", 4096)
                + b"\x03\xca\xfe"  # compact nullable bytes
                + b"\x00"  # state COPY_SEGMENT_STARTED
                + b"\x00")  # no tagged fields (TxnIndexEmpty false is the default, left out)
    assert serde.serialize(md) == expected
    assert serde.deserialize(expected) == md


def test_txn_index_empty_is_tagged_field_zero() -> None:
    md = RemoteLogSegmentMetadata(SID, 0, 9, 5, 1, 6, 10, ((0, 0),), txn_idx_empty=True)
    data = serde.serialize(md)
    # null custom metadata, state, then one tagged field: tag 0, size 1, true
    assert data.endswith(b"\x00\x00" + b"\x01\x00\x01\x01")
    back = serde.deserialize(data)
    assert isinstance(back, RemoteLogSegmentMetadata) and back.txn_idx_empty is True


def test_update_golden_bytes() -> None:
    u = RemoteLogSegmentMetadataUpdate(SID, 1_700_000_001_000, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 2)
    expected = (b"\x01\x01\x00" + seg_id_entry() + struct.pack(">iq", 2, 1_700_000_001_000)
                + b"\x00"  # null custom metadata
                + b"\x01"  # COPY_SEGMENT_FINISHED
                + b"\x00")
    assert serde.serialize(u) == expected
    assert serde.deserialize(expected) == u


def test_partition_delete_golden_bytes() -> None:
    d = RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_STARTED, 1_700_000_002_000, 1)
    expected = b"\x01\x02\x00" + tip_entry() + struct.pack(">iq", 1, 1_700_000_002_000) + b"\x01" + b"\x00"
    assert serde.serialize(d) == expected
    assert serde.deserialize(expected) == d


def test_snapshot_golden_bytes() -> None:
    s = RemoteLogSegmentMetadataSnapshot(SEG_ID, 0, 50, 77, 4, 88, 999, None,
                                         RemoteLogSegmentState.DELETE_SEGMENT_STARTED, ((1, 0),))
    expected = (b"\x01\x03\x00" + SEG_ID + struct.pack(">qqiqq", 0, 50, 4, 77, 88) + epochs_entry([(1, 0)])
                + struct.pack(">i", 999) + b"\x00" + b"\x02" + b"\x00")
    assert serde.serialize(s) == expected
    assert serde.deserialize(expected) == s
    assert s.to_metadata(TP) == RemoteLogSegmentMetadata(
        SID, 0, 50, 77, 4, 88, 999, ((1, 0),), RemoteLogSegmentState.DELETE_SEGMENT_STARTED)
    assert RemoteLogSegmentMetadataSnapshot.of(s.to_metadata(TP)) == s


def test_reads_version_1_tagged_fields() -> None:
    # Kafka trunk's v1 update: BrokerLeaderEpoch (tag 0) and EndOffset (tag 1) are tagged fields
    body = (seg_id_entry() + struct.pack(">iq", 2, 5) + b"\x00" + b"\x03"
            + b"\x02" + b"\x00\x04" + struct.pack(">i", 9) + b"\x01\x08" + struct.pack(">q", 1234))
    u = serde.deserialize(b"\x01\x01\x01" + body)
    assert u == RemoteLogSegmentMetadataUpdate(SID, 5, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, 2)


@pytest.mark.parametrize("data, message", [
    (b"", "frame"),
    (b"\x00\x00\x00", "frame version 0"),
    (b"\x02\x00\x00", "unknown frame version 2"),
    (b"\x01\x09\x00", "unknown remote log metadata record type 9"),
    (b"\x01\x00\x05", "unsupported version 5"),
    (b"\x01\x02\x00" + tip_entry(), "Failed to deserialize record with type 2"),
    (b"\x01\x02\x00" + tip_entry() + struct.pack(">iq", 1, 2) + b"\x00\x00" + b"junk", "garbage"),
    (b"\x01\x02\x00" + tip_entry() + struct.pack(">iq", 1, 2) + b"\x07\x00", "delete state 7"),
    (b"\x01\x01\x00" + seg_id_entry() + struct.pack(">iq", 2, 5) + b"\x00\x09\x00", "segment state 9"),
    (b"\x01\x03\x00" + SEG_ID + struct.pack(">qqiqq", 0, 50, 4, 77, 88) + b"\x01"
     + struct.pack(">i", 999) + b"\x00\x00\x00", "can not be empty"),
])
def test_unreadable_bytes_raise_metadata_parse_error(data: bytes, message: str) -> None:
    with pytest.raises(MetadataParseError, match=message):
        serde.deserialize(data)


uuids = st.binary(min_size=16, max_size=16)
tps = st.builds(TopicIdPartition, uuids, st.text(min_size=1, max_size=40), st.integers(0, 2**31 - 1))
i64 = st.integers(-(2**63), 2**63 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
epochs = st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, 2**62), min_size=1, max_size=5).map(
    lambda d: tuple(sorted(d.items())))
custom = st.none() | st.binary(max_size=64)


@st.composite
def segments(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start = draw(st.integers(0, 2**62))
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(draw(tps), draw(uuids)), start, start + draw(st.integers(0, 2**30)), draw(i64),
        draw(i32), draw(i64), draw(i32), draw(epochs), draw(st.sampled_from(RemoteLogSegmentState)),
        draw(custom), draw(st.booleans()))


updates = st.builds(RemoteLogSegmentMetadataUpdate, st.builds(RemoteLogSegmentId, tps, uuids), i64,
                    st.sampled_from(RemoteLogSegmentState), i32, custom)
deletes = st.builds(RemotePartitionDeleteMetadata, tps, st.sampled_from(RemotePartitionDeleteState), i64, i32)


@given(st.one_of(segments(), updates, deletes))
def test_round_trip(value: serde.RemoteLogMetadata) -> None:
    assert serde.deserialize(serde.serialize(value)) == value


@given(st.binary(max_size=80))
def test_random_bytes_never_raise_anything_else(data: bytes) -> None:
    try:
        serde.deserialize(data)
    except MetadataParseError:
        pass
