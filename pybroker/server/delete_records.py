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

Concurrency: trio thread; renames and removals in trio.to_thread.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.log.log import UnifiedLog, mark_segments_deleted
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse
from pybroker.purgatory.purgatory import DelayedOperation
from pybroker.security.authorizer import Op, Res

if TYPE_CHECKING:
    from pybroker.replication.replica_manager import ReplicaManager
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

log = logging.getLogger("pybroker.server")

HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK
INVALID_LOW_WATERMARK = -1
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult


class DeleteRecordsPartitionStatus:
    """One partition of a waiting DeleteRecords (Kafka's DeleteRecordsPartitionStatus): the offset
    its low watermark must reach and the response entry, REQUEST_TIMED_OUT until it does."""

    __slots__ = ("topic", "partition", "required_offset", "result", "acks_pending")

    def __init__(self, topic: str, partition: int, required_offset: int, result: PartitionResult) -> None:
        self.topic = topic
        self.partition = partition
        self.required_offset = required_offset
        self.result = result
        self.acks_pending = result.error_code == 0
        if self.acks_pending:
            result.error_code = Errors.REQUEST_TIMED_OUT  # cleared when the low watermark gets there

    def __repr__(self) -> str:
        return (f"DeleteRecordsPartitionStatus({self.topic}-{self.partition}, pending={self.acks_pending}, "
                f"error={self.result.error_code}, low_watermark={self.result.low_watermark}, "
                f"required={self.required_offset})")


class DelayedDeleteRecords(DelayedOperation):
    """Waits until every partition's low watermark reached its required offset or the partition
    failed (Kafka's DelayedDeleteRecords); on expiry the pending ones stay REQUEST_TIMED_OUT."""

    def __init__(self, delay_ms: int, statuses: Sequence[DeleteRecordsPartitionStatus],
                 replica_manager: ReplicaManager) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self.replica_manager = replica_manager

    def try_complete(self) -> bool:
        rm = self.replica_manager
        for status in self.statuses:
            if not status.acks_pending:
                continue
            p = rm.get_partition(status.topic, status.partition)
            error: int
            if p is None:
                error, low = Errors.UNKNOWN_TOPIC_OR_PARTITION, INVALID_LOW_WATERMARK
            elif not p.is_leader:
                error, low = Errors.NOT_LEADER_OR_FOLLOWER, INVALID_LOW_WATERMARK
            else:
                low = rm.low_watermark(p)
                if low < status.required_offset:
                    continue
                error = 0
            status.acks_pending = False
            status.result.error_code = error
            status.result.low_watermark = low
        if any(status.acks_pending for status in self.statuses):
            return False
        return self.force_complete()


def _delete_one(broker: Broker, topic: str, partition: int, offset: int,
                doomed: list[tuple[UnifiedLog, list[Any]]]) -> tuple[int, int, int]:
    """(error code, requested offset, low watermark) for one partition; detached segments are
    added to `doomed`."""
    t = broker.image.topic(topic)
    if t is None or partition not in t.partitions:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, INVALID_LOW_WATERMARK
    if topic in INTERNAL_TOPICS:
        return Errors.INVALID_TOPIC_EXCEPTION, -1, INVALID_LOW_WATERMARK
    rm = broker.replica_manager
    p = rm.get_partition(topic, partition)
    if p is None or not p.is_leader:
        return Errors.NOT_LEADER_OR_FOLLOWER, -1, INVALID_LOW_WATERMARK
    plog: UnifiedLog = p.log
    if not plog.config.delete:
        return Errors.POLICY_VIOLATION, -1, INVALID_LOW_WATERMARK
    target = p.high_watermark if offset == HIGH_WATERMARK else offset
    try:
        segments = plog.increment_log_start_offset(target)
    except OffsetOutOfRangeError:
        return Errors.OFFSET_OUT_OF_RANGE, -1, INVALID_LOW_WATERMARK
    if segments:
        doomed.append((plog, segments))
    return 0, target, rm.low_watermark(p)


async def handle_delete_records(broker: Broker, ctx: RequestContext,
                                req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    auth = broker.authorizer
    rm = broker.replica_manager
    doomed: list[tuple[UnifiedLog, list[Any]]] = []
    waiting: list[DeleteRecordsPartitionStatus] = []
    for t in req.topics:
        # KafkaApis: DELETE on the topic
        if auth is not None and not auth.authorize(ctx, Op.DELETE, Res.TOPIC, t.name):
            topics.append(TopicResult(name=t.name, partitions=[
                PartitionResult(partition_index=p.partition_index, low_watermark=INVALID_LOW_WATERMARK,
                                error_code=Errors.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions]))
            continue
        results = []
        for p in t.partitions:
            err, required, low = _delete_one(broker, t.name, p.partition_index, p.offset, doomed)
            result = PartitionResult(partition_index=p.partition_index, low_watermark=low, error_code=int(err))
            results.append(result)
            if not err and low < required:
                waiting.append(DeleteRecordsPartitionStatus(t.name, p.partition_index, required, result))
        topics.append(TopicResult(name=t.name, partitions=results))
    if doomed:
        # renamed before the answer (a crash after it finishes the deletion on restart); removed
        # after file.delete.delay.ms
        try:
            await trio.to_thread.run_sync(mark_segments_deleted, [s for _, segments in doomed for s in segments])
        except OSError:  # the deletion task tries again; the log start offset has moved anyway
            log.exception("renaming the segments DeleteRecords detached failed")
        for plog, segments in doomed:
            rm.schedule_segment_deletion(plog, segments)
    if waiting:
        op = DelayedDeleteRecords(max(0, req.timeout_ms), waiting, rm)
        keys = [(s.topic, s.partition) for s in waiting]
        if not rm.delete_records_purgatory.try_complete_else_watch(op, keys):
            await ctx.conn.park(op)
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


__all__ = ["DelayedDeleteRecords", "DeleteRecordsPartitionStatus", "handle_delete_records"]
