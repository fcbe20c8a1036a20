"""ListOffsets (api 2) and OffsetForLeaderEpoch (api 23).

ListOffsets targets: -1 latest (the high watermark, or the last stable offset for
read_committed), -2 earliest, -3 max timestamp (v7+), -4 earliest local (v8+), -5 latest tiered
(v9+), -6 earliest pending upload (v11+, KIP-1023), else the first offset whose timestamp >= the
target (offset -1 when there is none below the high watermark; on a tiered partition the
remote segments below the local log are searched first, ReplicaManager.fetch_offset_with_remote,
so the handler awaits). -4/-5/-6 on a tiered topic
are the log's (UnifiedLog.fetch_offset_by_timestamp: local log start, highest offset in remote
storage, first offset not yet copied); on a topic that is not tiered -4 is -2's answer and -5
and -6 answer offset -1 with leader epoch -1, as Kafka does; a special timestamp below its
first version is UNSUPPORTED_VERSION for that partition. Leader epochs
come from the partition's leader-epoch cache so they agree with Metadata and the batches
(CLIENTS.md pitfall 10).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.log.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
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

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

LPart = ListOffsetsResponse.ListOffsetsPartitionResponse
LTopic = ListOffsetsResponse.ListOffsetsTopicResponse
# Kafka's ListOffsetsRequest: the first version each special timestamp may be sent at
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9,
                EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11}


async def _list_one(broker: Broker, version: int, isolation: int, topic: str,
                    req_p: ListOffsetsRequest.ListOffsetsPartition) -> LPart:
    ts = req_p.timestamp
    out = LPart(partition_index=req_p.partition_index, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
    if ts < 0 and version < _MIN_VERSION.get(ts, 0):
        # the partition's own errors come first, as in Kafka
        found = broker.replica_manager.leader_partition(topic, req_p.partition_index,
                                                        req_p.current_leader_epoch if version >= 4 else -1)
        out.error_code = found if isinstance(found, int) else Errors.UNSUPPORTED_VERSION
        return out
    # KIP-405: a timestamp only the remote segments hold is searched there (on a reader thread)
    out.error_code, out.offset, out.timestamp, out.leader_epoch = await broker.replica_manager.fetch_offset_with_remote(
        topic, req_p.partition_index, ts, isolation, req_p.current_leader_epoch if version >= 4 else -1)
    return out


async def handle_list_offsets(broker: Broker, ctx: RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse:
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
            parts.append(await _list_one(broker, v, isolation, t.name, rp))
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
        denied = auth is not None and not trusted and not auth.authorize(ctx, Op.DESCRIBE, Res.TOPIC, t.topic)
        for rp in t.partitions:
            out = EpochEnd(error_code=0, partition=rp.partition, leader_epoch=-1, end_offset=-1)
            if denied:
                out.error_code = Errors.TOPIC_AUTHORIZATION_FAILED
            else:
                out.error_code, out.leader_epoch, out.end_offset = rm.last_offset_for_leader_epoch(
                    t.topic, rp.partition, rp.current_leader_epoch, rp.leader_epoch)
            parts.append(out)
        topics.append(OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
