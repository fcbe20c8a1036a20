"""The "consumer" embedded protocol of classic groups (Kafka's ConsumerProtocol), as the group
coordinator reads and writes it when a group changes type (KIP-848 online migration) and
when it answers a classic member of a consumer group.

Format: int16 version, then the struct at that version; versions above 3 are read and written
as 3 (Kafka's checkSubscriptionVersion / checkAssignmentVersion), negative ones are malformed.
    ConsumerProtocolSubscription  topics, user_data, owned_partitions (v1+), generation_id
                                  (v2+), rack_id (v3+)
    ConsumerProtocolAssignment    assigned_partitions (topic name + partitions), user_data

Topic names map to the ids of consumer groups through the broker's metadata image; a topic
the image does not know is dropped, as Kafka's toTopicPartitionMap does. Stateless; any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from pybroker.protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

CONSUMER_PROTOCOL_TYPE = "consumer"
HIGHEST_VERSION = 3


class MalformedConsumerProtocol(ValueError):
    pass


def deserialize_version(data: bytes) -> int:
    if len(data) < 2:
        raise MalformedConsumerProtocol("no version")
    (version,) = struct.unpack_from(">h", data, 0)
    if version < 0:
        raise MalformedConsumerProtocol(f"negative version {version}")
    return version


def deserialize_subscription(data: bytes) -> Any:
    """A ConsumerProtocolSubscription; MalformedConsumerProtocol when it cannot be read."""
    version = min(deserialize_version(data), HIGHEST_VERSION)
    try:
        return ConsumerProtocolSubscription.decode(memoryview(data)[2:], version)
    except Exception as exc:
        raise MalformedConsumerProtocol(str(exc)) from None


def deserialize_assignment(data: bytes) -> Any:
    """A ConsumerProtocolAssignment; an empty byte string (a member that never got one) is
    the empty assignment."""
    if not data:
        return ConsumerProtocolAssignment(assigned_partitions=[], user_data=None)
    version = min(deserialize_version(data), HIGHEST_VERSION)
    try:
        return ConsumerProtocolAssignment.decode(memoryview(data)[2:], version)
    except Exception as exc:
        raise MalformedConsumerProtocol(str(exc)) from None


def serialize_assignment(partitions_by_name: Mapping[str, frozenset[int] | set[int]], version: int) -> bytes:
    """Kafka's serializeAssignment(assignment, version): topics in name order, no user data."""
    version = min(max(version, 0), HIGHEST_VERSION)
    A = ConsumerProtocolAssignment
    body = A(assigned_partitions=[A.TopicPartition(topic=name, partitions=sorted(parts))
                                  for name, parts in sorted(partitions_by_name.items()) if parts],
             user_data=None).encode(version)
    return struct.pack(">h", version) + body


def to_topic_ids(topic_partitions: Any, image: Any) -> dict[bytes, frozenset[int]]:
    """[(topic name, partitions)] structs -> {topic id: partitions}, unknown topics dropped."""
    out: dict[bytes, frozenset[int]] = {}
    by_name = {} if image is None else image.topics_by_name
    for tp in topic_partitions or ():
        t = by_name.get(tp.topic)
        if t is not None and tp.partitions:
            out[t.topic_id] = out.get(t.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def to_topic_names(assignment: dict[bytes, frozenset[int]], image: Any) -> dict[str, frozenset[int]]:
    """{topic id: partitions} -> {topic name: partitions}, topics the image lost dropped."""
    by_id = {} if image is None else image.topics_by_id
    out: dict[str, frozenset[int]] = {}
    for tid, parts in assignment.items():
        t = by_id.get(tid)
        if t is not None and parts:
            out[t.name] = frozenset(parts)
    return out
