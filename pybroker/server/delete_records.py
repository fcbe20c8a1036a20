"""DeleteRecords (21) v0-2: move partitions' log start offsets forward (Kafka's
ReplicaManager.deleteRecords / Partition.deleteRecordsOnLeader).

Per partition, in Kafka's order: not in the metadata -> UNKNOWN_TOPIC_OR_PARTITION; an
internal topic -> INVALID_TOPIC_EXCEPTION; not led here -> NOT_LEADER_OR_FOLLOWER; a topic
whose cleanup.policy lacks "delete" -> POLICY_VIOLATION; offset -1 means the high watermark;
a negative offset or one above the high watermark -> OFFSET_OUT_OF_RANGE. Success answers
the low watermark, the partition's new log start offset (errors answer -1).

Afterwards ListOffsets(earliest) returns the new start and fetches below it are
OFFSET_OUT_OF_RANGE. Segments wholly below it are detached and renamed `*.deleted` at once
(UnifiedLog.delete_records_before) and their files removed in a worker thread after the
topic's file.delete.delay.ms, as Kafka defers physical deletion, so fetch responses already
holding their fds finish. The new start reaches disk with the next log-start-offset
checkpoint (periodic, and at clean shutdown); after a crash before that, the log restarts
at its first remaining segment (the renamed ones are gone), so only records of the segment
holding the new start can reappear, as in Kafka.

With one replica the low watermark is final at once: the request's timeout_ms is never
waited on (Kafka's delayed delete-records purgatory only waits for followers).

Concurrency: trio thread; file removal in trio.to_thread.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.log.log import UnifiedLog
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse
from pybroker.security.authorizer import Op, Res

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

log = logging.getLogger("pybroker.server")

HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK
INVALID_LOW_WATERMARK = -1
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult


def _delete_one(broker: Broker, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """(error code, low watermark) for one partition."""
    t = broker.image.topic(topic)
    if t is None or partition not in t.partitions:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, INVALID_LOW_WATERMARK
    if topic in INTERNAL_TOPICS:
        return Errors.INVALID_TOPIC_EXCEPTION, INVALID_LOW_WATERMARK
    p = broker.replica_manager.get_partition(topic, partition)
    if p is None or not p.is_leader:
        return Errors.NOT_LEADER_OR_FOLLOWER, INVALID_LOW_WATERMARK
    plog: UnifiedLog = p.log
    if not plog.config.delete:
        return Errors.POLICY_VIOLATION, INVALID_LOW_WATERMARK
    target = p.high_watermark if offset == HIGH_WATERMARK else offset
    try:
        doomed = plog.delete_records_before(target)
    except OffsetOutOfRangeError:
        return Errors.OFFSET_OUT_OF_RANGE, INVALID_LOW_WATERMARK
    broker.replica_manager.schedule_segment_deletion(plog, doomed)
    return 0, plog.log_start_offset


def handle_delete_records(broker: Broker, ctx: RequestContext, req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    auth = broker.authorizer
    for t in req.topics:
        # KafkaApis: DELETE on the topic
        if auth is not None and not auth.authorize(ctx, Op.DELETE, Res.TOPIC, t.name):
            topics.append(TopicResult(name=t.name, partitions=[
                PartitionResult(partition_index=p.partition_index, low_watermark=INVALID_LOW_WATERMARK,
                                error_code=Errors.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions]))
            continue
        topics.append(TopicResult(name=t.name, partitions=[
            PartitionResult(partition_index=p.partition_index, low_watermark=lw, error_code=int(err))
            for p in t.partitions
            for err, lw in (_delete_one(broker, t.name, p.partition_index, p.offset),)]))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
