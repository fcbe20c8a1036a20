"""`dump-log --remote-log-metadata-decoder`'s text: Kafka's toString of each event type, from the
bytes the topic-based RLMM writes, and Kafka's line for a value that does not parse (the live
dump of a node's `__remote_log_metadata` is in tests/server/test_tiered_copy.py)."""

from __future__ import annotations

import uuid

from pybroker.cli.remote_log_metadata_text import remote_log_metadata_payload
from pybroker.log.remote import metadata_serde
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

TOPIC_ID = uuid.UUID("6f1e9b2a-4c3d-4e5f-8a7b-1c2d3e4f5a6b").bytes
SEGMENT_ID = uuid.UUID("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d").bytes
TIP = TopicIdPartition(TOPIC_ID, "orders", 3)
SID = RemoteLogSegmentId(TIP, SEGMENT_ID)
TIP_TEXT = "bx6bKkw9Tl-KexwtPk9aaw:orders-3"
SID_TEXT = f"RemoteLogSegmentId{{topicIdPartition={TIP_TEXT}, id=ChssPU5fSmuMfZ4PGis8TQ}}"


def test_each_event_prints_as_kafkas_tostring() -> None:
    md = RemoteLogSegmentMetadata(SID, 100, 199, 1_700_000_000_123, 2, 1_700_000_000_456, 4096, ((3, 100), (4, 150)))
    assert remote_log_metadata_payload(7, metadata_serde.serialize(md)) == (
        f"RemoteLogSegmentMetadata{{remoteLogSegmentId={SID_TEXT}, startOffset=100, endOffset=199, brokerId=2, "
        "maxTimestampMs=1700000000123, eventTimestampMs=1700000000456, segmentLeaderEpochs={3=100, 4=150}, "
        "segmentSizeInBytes=4096, customMetadata=Optional.empty, state=COPY_SEGMENT_STARTED}")
    update = RemoteLogSegmentMetadataUpdate(SID, 1_700_000_000_789, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 2,
                                            b"chunk-index")
    assert remote_log_metadata_payload(8, metadata_serde.serialize(update)) == (
        f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={SID_TEXT}, customMetadata=Optional[CustomMetadata"
        "{11 bytes}], state=COPY_SEGMENT_FINISHED, eventTimestampMs=1700000000789, brokerId=2}")
    delete = RemotePartitionDeleteMetadata(TIP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 5, 1)
    assert remote_log_metadata_payload(9, metadata_serde.serialize(delete)) == (
        f"RemotePartitionDeleteMetadata{{topicPartition={TIP_TEXT}, state=DELETE_PARTITION_MARKED, "
        "eventTimestampMs=5, brokerId=1}")


def test_a_value_that_does_not_parse_is_skipped_with_kafkas_line() -> None:
    assert remote_log_metadata_payload(12, b"\x07garbage").startswith("Error at offset 12, skipping. ")
    assert remote_log_metadata_payload(13, None).startswith("Error at offset 13, skipping. ")
