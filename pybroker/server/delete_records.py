"""DeleteRecords (21) v0-2: move partitions' log start offsets forward and answer once every
live replica has followed (Kafka's ReplicaManager.deleteRecords, Partition.deleteRecordsOnLeader
and DelayedDeleteRecords).

Per partition, in Kafka's order: not in the metadata -> UNKNOWN_TOPIC_OR_PARTITION; an
internal topic -> INVALID_TOPIC_EXCEPTION; not led here -> NOT_LEADER_OR_FOLLOWER; a topic
whose cleanup.policy lacks "delete" -> POLICY_VIOLATION; offset -1 means the high watermark;
a negative offset or one above the high watermark -> OFFSET_OUT_OF_RANGE (errors answer low
watermark -1).

The leader's log start offset moves at once: ListOffsets(earliest) returns it and fetches below
it are OFFSET_OUT_OF_RANGE. The answer waits for the *low watermark*, the smallest log start
offset among the leader and its followers on live (registered, unfenced) brokers, in the ISR or
not (Kafka's lowWatermarkIfLeader): followers learn the leader's log start offset from their
Fetch responses, move theirs, and report it in their next Fetch. A partition whose low watermark
reached the requested offset answers it; one that has not when the request's timeout_ms passes
answers REQUEST_TIMED_OUT with the low watermark it had when the request came (Kafka's
DeleteRecordsPartitionStatus); one that lost its leadership meanwhile NOT_LEADER_OR_FOLLOWER;
one deleted meanwhile UNKNOWN_TOPIC_OR_PARTITION. So a follower that is stopped but not yet
fenced (broker.session.timeout.ms) holds the answer until the timeout, however long it stays in
the ISR, and a fenced one is not waited for. With one replica, or followers already there, the
answer is immediate and timeout_ms is never waited on.

**Deliberate difference:** a waiting DeleteRecords is tried again on every follower fetch of
the partition and whenever its registration changes in the metadata image (a follower fenced
or removed, a leadership lost). Kafka tries it only when the partition's low or high watermark
rises, so a follower fenced while a request waits leaves it to time out unless other traffic
raises the high watermark; here it completes with the low watermark the fence allows
(tests/unit/replication/test_delayed_delete_records.py). A leadership lost meanwhile answers
NOT_LEADER_OR_FOLLOWER at once where Kafka's request times out.

Segments wholly below the new start are detached from the log on the loop (no file work), then
renamed `*.deleted` in a worker thread before the answer, and their files removed in a worker
thread after the topic's file.delete.delay.ms, as Kafka defers physical deletion, so fetch
responses already holding their fds finish. The new start reaches disk with the next
log-start-offset checkpoint (periodic, and at clean shutdown); after a crash before that, the log
restarts at its first remaining segment (the renamed ones are gone), so only records of the
segment holding the new start can reappear, as in Kafka.

Layering: the handler authorizes (DELETE on the topic) and answers the partitions the metadata
lacks (Kafka's KafkaApis); the rest is ReplicaManager.delete_records (internal topics,
leadership, Partition.delete_records_on_leader, the segment files, the DelayedDeleteRecords).

Concurrency: trio thread; the replica manager renames and removes in trio.to_thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse
from pybroker.replication.delayed_delete_records import INVALID_LOW_WATERMARK
from pybroker.security.authorizer import Op, Res

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult


async def handle_delete_records(broker: Broker, ctx: RequestContext,
                                req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics: list[TopicResult] = []
    auth = broker.authorizer
    rm = broker.replica_manager
    offsets: list[tuple[str, int, int]] = []
    targets: list[PartitionResult] = []  # the response entry of each offset handed on
    for t in req.topics:
        results: list[PartitionResult] = []
        topics.append(TopicResult(name=t.name, partitions=results))
        # KafkaApis: DELETE on the topic, then the metadata cache
        denied = auth is not None and not auth.authorize(ctx, Op.DELETE, Res.TOPIC, t.name)
        image_topic = broker.image.topic(t.name)
        for p in t.partitions:
            result = PartitionResult(partition_index=p.partition_index, low_watermark=INVALID_LOW_WATERMARK,
                                     error_code=0)
            results.append(result)
            if denied:
                result.error_code = Errors.TOPIC_AUTHORIZATION_FAILED
            elif image_topic is None or p.partition_index not in image_topic.partitions:
                result.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets.append((t.name, p.partition_index, p.offset))
                targets.append(result)
    if offsets:
        statuses, delayed = await rm.delete_records(req.timeout_ms, offsets)
        if delayed is not None:
            await ctx.conn.park(delayed)
        for result, status in zip(targets, statuses, strict=True):
            result.error_code = status.error_code
            result.low_watermark = status.low_watermark
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


__all__ = ["handle_delete_records"]
