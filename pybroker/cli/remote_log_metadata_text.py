"""`pybroker dump-log --remote-log-metadata-decoder`: the records of `__remote_log_metadata` as
Kafka's DumpLogSegments prints them (RemoteMetadataLogMessageParser: each value deserialized by
RemoteLogMetadataSerde and printed with its Java toString, no key), so a user sees which
segments of which partitions are in remote storage, and in which state.

Formats (Kafka's toString of RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
RemotePartitionDeleteMetadata; ids as Kafka's Uuid strings, a TopicIdPartition as
"<id>:<topic>-<partition>", leader epochs as Java's map "{0=0, 2=100}", custom metadata as
"Optional[CustomMetadata{N bytes}]" or "Optional.empty"). A value that does not parse prints
"Error at offset N, skipping. <why>", as Kafka's. Concurrency: a one-shot command.
"""

from __future__ import annotations

from pybroker.log.meta_properties import uuid_to_str
from pybroker.log.remote import metadata_serde
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
)


def _segment_id(sid: RemoteLogSegmentId) -> str:
    return f"RemoteLogSegmentId{{topicIdPartition={sid.topic_id_partition}, id={uuid_to_str(sid.id)}}}"


def _custom(custom: bytes | None) -> str:
    return "Optional.empty" if custom is None else f"Optional[CustomMetadata{{{len(custom)} bytes}}]"


def remote_log_metadata_text(event: object) -> str:
    """Kafka's toString of one `__remote_log_metadata` event."""
    if isinstance(event, RemoteLogSegmentMetadata):
        epochs = ", ".join(f"{e}={o}" for e, o in event.segment_leader_epochs)
        return (f"RemoteLogSegmentMetadata{{remoteLogSegmentId={_segment_id(event.remote_log_segment_id)}, "
                f"startOffset={event.start_offset}, endOffset={event.end_offset}, brokerId={event.broker_id}, "
                f"maxTimestampMs={event.max_timestamp_ms}, eventTimestampMs={event.event_timestamp_ms}, "
                f"segmentLeaderEpochs={{{epochs}}}, segmentSizeInBytes={event.segment_size_in_bytes}, "
                f"customMetadata={_custom(event.custom_metadata)}, state={event.state.name}}}")
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        return (f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={_segment_id(event.remote_log_segment_id)}, "
                f"customMetadata={_custom(event.custom_metadata)}, state={event.state.name}, "
                f"eventTimestampMs={event.event_timestamp_ms}, brokerId={event.broker_id}}}")
    if isinstance(event, RemotePartitionDeleteMetadata):
        return (f"RemotePartitionDeleteMetadata{{topicPartition={event.topic_id_partition}, "
                f"state={event.state.name}, eventTimestampMs={event.event_timestamp_ms}, "
                f"brokerId={event.broker_id}}}")
    return str(event)  # a snapshot record, should one be written


def remote_log_metadata_payload(offset: int, value: bytes | None) -> str:
    """The payload text of one record (Kafka's RemoteMetadataLogMessageParser.parse)."""
    try:
        if value is None:
            raise ValueError("the record has no value")
        return remote_log_metadata_text(metadata_serde.deserialize(value))
    except Exception as exc:  # Kafka's parser catches every Throwable the same way
        return f"Error at offset {offset}, skipping. {exc}"


__all__ = ["remote_log_metadata_payload", "remote_log_metadata_text"]
