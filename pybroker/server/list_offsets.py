"""ListOffsets (api 2) and OffsetForLeaderEpoch (api 23).

ListOffsets targets: -1 latest (the high watermark, or the last stable offset for
read_committed), -2 earliest, -3 max timestamp (v7+), -4 earliest local (v8+),
-5 latest tiered (v9+), else the first offset whose timestamp >= the target (offset -1
when there is none below the high watermark). Leader epochs come from the partition's
leader-epoch cache so they agree with Metadata and the batches (CLIENTS.md pitfall 10).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.log.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from pybroker.security.authorizer import Op, Res
from pybroker.server.fetch import READ_COMMITTED, _check_epoch

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

LPart = ListOffsetsResponse.ListOffsetsPartitionResponse
LTopic = ListOffsetsResponse.ListOffsetsTopicResponse
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}


def _list_one(broker: Broker, version: int, isolation: int, topic: str, req_p: Any) -> LPart:
    out = LPart(partition_index=req_p.partition_index, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
    p = broker.replica_manager.get_partition(topic, req_p.partition_index)
    if p is None:
        out.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION
        return out
    if not p.is_leader:
        out.error_code = Errors.NOT_LEADER_OR_FOLLOWER
        return out
    err = _check_epoch(p, req_p.current_leader_epoch if version >= 4 else -1)
    if err:
        out.error_code = err
        return out
    ts = req_p.timestamp
    if ts < 0 and version < _MIN_VERSION.get(ts, 0):
        out.error_code = Errors.UNSUPPORTED_VERSION
        return out
    upper = p.last_stable_offset if isolation == READ_COMMITTED else p.high_watermark
    if ts == LATEST_TIMESTAMP:
        out.offset = upper
        latest = p.log.latest_epoch()
        out.leader_epoch = latest if latest is not None else -1
        return out
    found = p.log.fetch_offset_by_timestamp(ts)
    if found is None:
        return out
    if ts != EARLIEST_TIMESTAMP and ts != EARLIEST_LOCAL_TIMESTAMP and found.offset >= upper:
        return out  # not yet committed: Kafka answers "no offset" rather than exposing it
    out.offset = found.offset
    out.timestamp = found.timestamp
    out.leader_epoch = found.leader_epoch if found.leader_epoch is not None else -1
    return out


def handle_list_offsets(broker: Broker, ctx: RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse:
    v = ctx.api_version
    isolation = req.isolation_level if v >= 2 else 0
    auth = broker.authorizer
    topics = []
    for t in req.topics:
        seen: set[int] = set()
        parts = []
        # KafkaApis: DESCRIBE on the topic
        denied = auth is not None and not auth.authorize(ctx, Op.DESCRIBE, Res.TOPIC, t.name)
        for rp in t.partitions:
            if denied:
                parts.append(LPart(partition_index=rp.partition_index, error_code=Errors.TOPIC_AUTHORIZATION_FAILED,
                                   timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            if rp.partition_index in seen:
                parts.append(LPart(partition_index=rp.partition_index, error_code=Errors.INVALID_REQUEST,
                                   timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            seen.add(rp.partition_index)
            parts.append(_list_one(broker, v, isolation, t.name, rp))
        topics.append(LTopic(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


EpochEnd = OffsetForLeaderEpochResponse.EpochEndOffset


def handle_offset_for_leader_epoch(broker: Broker, ctx: RequestContext,
                                   req: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    rm = broker.replica_manager
    auth = broker.authorizer
    # KafkaApis: CLUSTER_ACTION on the cluster (a follower) or DESCRIBE on each topic
    trusted = auth is None or auth.authorize_cluster(ctx, Op.CLUSTER_ACTION)
    topics = []
    for t in req.topics:
        parts = []
        denied = not trusted and not auth.authorize(ctx, Op.DESCRIBE, Res.TOPIC, t.topic)
        for rp in t.partitions:
            out = EpochEnd(error_code=0, partition=rp.partition, leader_epoch=-1, end_offset=-1)
            p = rm.get_partition(t.topic, rp.partition)
            if denied:
                out.error_code = Errors.TOPIC_AUTHORIZATION_FAILED
            elif p is None:
                out.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION
            elif not p.is_leader:
                out.error_code = Errors.NOT_LEADER_OR_FOLLOWER
            else:
                err = _check_epoch(p, rp.current_leader_epoch)
                if err:
                    out.error_code = err
                else:
                    out.leader_epoch, out.end_offset = p.log.end_offset_for_epoch(rp.leader_epoch)
            parts.append(out)
        topics.append(OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
