"""DescribeTopicPartitions (api 75, v0; KIP-966): topic metadata a page of partitions at a time.

Kafka's DescribeTopicPartitionsRequestHandler + KRaftMetadataCache.describeTopicResponse:

- The topics asked for (an empty list: every topic of the cluster, internal ones included)
  with a name >= the cursor's topic name, de-duplicated and sorted by name (Java String
  order, i.e. UTF-16 code units), are walked in order.
- At most min(`max.request.partition.size.limit`, response_partition_limit) partitions are
  returned. The cursor's topic starts at the cursor's partition index, every other at 0.
  When a topic's partitions do not all fit, the answer stops with it and `next_cursor`
  names (that topic, first partition left out); when the budget is used up exactly before
  the next topic, `next_cursor` is (next topic, 0) - that topic need not exist.
- A named topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION
  for an illegal name) with a zero id and no partitions; it costs no budget. With the
  empty list unknown topics cannot occur.
- A cursor whose topic is not among the named topics (at or after itself) makes the
  request invalid: every requested topic comes back INVALID_REQUEST with no partitions
  (DescribeTopicPartitionsRequest.getErrorResponse).
- Partitions carry leader (-1 unless the leader is registered with this listener),
  leader epoch, replicas and ISR unfiltered, offline replicas (unregistered, fenced or
  without this listener), and the ELR / last known ELR (KIP-966) from the image.
- No authorizer: topic_authorized_operations is every topic operation, on every topic
  entry including errors (Kafka sets it on the whole response).

Concurrency: a sync handler on the trio thread; it reads the image without awaiting, so
the page is consistent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.acl import TOPIC_OPERATIONS
from pybroker.controller.controller import validate_topic_name
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

# org.apache.kafka.common.internals.Topic.INTERNAL_TOPICS
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
ZERO_ID = bytes(16)
NO_LEADER = -1

_Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
_Partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition
_Cursor = DescribeTopicPartitionsResponse.Cursor


def java_order(name: str) -> bytes:
    """A sort key ordering strings as Java's String.compareTo does (UTF-16 code units)."""
    return name.encode("utf-16-be", "surrogatepass")


def _on_listener(broker: Broker, broker_id: int, listener: str) -> Any:
    reg = broker.image.brokers.get(broker_id)
    if reg is None or not any(ep[0] == listener for ep in reg.endpoints):
        return None
    return reg


def _partition(broker: Broker, reg: Any, listener: str) -> Any:
    offline = []
    for b in reg.replicas:
        node = _on_listener(broker, b, listener)
        if node is None or node.fenced:
            offline.append(b)
    leader = reg.leader if _on_listener(broker, reg.leader, listener) is not None else NO_LEADER
    return _Partition(error_code=0, partition_index=reg.partition_id, leader_id=leader,
                      leader_epoch=reg.leader_epoch, replica_nodes=list(reg.replicas), isr_nodes=list(reg.isr),
                      eligible_leader_replicas=list(reg.elr), last_known_elr=list(reg.last_known_elr),
                      offline_replicas=offline)


def handle_describe_topic_partitions(broker: Broker, ctx: RequestContext, req: DescribeTopicPartitionsRequest
                                     ) -> DescribeTopicPartitionsResponse:
    image = broker.image
    listener = ctx.conn.listener_name
    fetch_all = not req.topics
    cursor = req.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    cursor_key = java_order(cursor_topic)
    candidates = image.topics_by_name if fetch_all else (t.name for t in req.topics)
    names = {n for n in candidates if java_order(n) >= cursor_key}
    if not fetch_all and cursor is not None and cursor_topic not in names:
        # InvalidRequestException -> the request's error response
        return DescribeTopicPartitionsResponse(throttle_time_ms=0, next_cursor=None, topics=[
            _Topic(error_code=Errors.INVALID_REQUEST, name=t.name, topic_id=ZERO_ID, is_internal=False,
                   partitions=[]) for t in req.topics])

    remaining = min(broker.config["max.request.partition.size.limit"], req.response_partition_limit)
    topics: list[Any] = []
    next_cursor = None
    for name in sorted(names, key=java_order):
        if remaining > 0:
            t = image.topic(name)
            if t is None:
                if not fetch_all:
                    error = Errors.UNKNOWN_TOPIC_OR_PARTITION if validate_topic_name(name) is None \
                        else Errors.INVALID_TOPIC_EXCEPTION
                    topics.append(_Topic(error_code=error, name=name, topic_id=ZERO_ID,
                                         is_internal=name in INTERNAL_TOPICS, partitions=[]))
                continue
            start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
            count = len(t.partitions)
            upper = min(count, start + remaining)
            # a negative cursor index names no partition: Kafka skips the missing ids
            parts = [_partition(broker, t.partitions[p], listener) for p in range(start, upper)
                     if p in t.partitions]
            topics.append(_Topic(error_code=0, name=name, topic_id=t.topic_id, is_internal=name in INTERNAL_TOPICS,
                                 partitions=parts))
            if upper < count:
                next_cursor = _Cursor(topic_name=name, partition_index=upper)
                break
            remaining -= len(parts)
        elif remaining == 0:
            # the budget ran out exactly at a topic boundary: resume at this topic's start
            next_cursor = _Cursor(topic_name=name, partition_index=0)
            break
    for entry in topics:
        entry.topic_authorized_operations = TOPIC_OPERATIONS
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)
