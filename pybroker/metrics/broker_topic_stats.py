"""Per-topic traffic counters (Kafka's BrokerTopicStats / BrokerTopicMetrics).

One `TopicStats` slot per topic hosted here, created when its first partition is published and
shared by every `Partition` of the topic (`partition.stats`), so the hot path bumps plain ints in
place: no lookup, no allocation, no prometheus_client call. The all-topics figures are the sum
over the slots at scrape time, plus `retired`, the counts of topics deleted since start (Kafka's
allTopicsStats keeps counting across deletions; a counter that went down would read as a reset).

Where each counter is bumped, as in Kafka:
- MessagesInPerSec / BytesInPerSec: every append that reached the log as leader
  (ReplicaManager.append, Kafka's appendToLocalLog), so coordinator writes to __consumer_offsets
  and __transaction_state count too; a duplicate batch counts, as it does in Kafka.
- TotalProduceRequestsPerSec / FailedProduceRequestsPerSec: once per partition of a Produce
  (`record_produce`); "failed" leaves out the errors Kafka calls expected (unknown partition, not
  leader, too large, corrupt, storage) and requests refused before the append (authorization,
  acks, version).
- TotalFetchRequestsPerSec / FailedFetchRequestsPerSec / BytesOutPerSec: once per partition of a
  Fetch that this node leads (`record_fetch`), bytes = the record bytes answered.
- ReplicationBytesOutPerSec / ReplicationBytesInPerSec (all topics only, as in Kafka): the record
  bytes this leader answered followers' Fetches with, and the record bytes a follower received
  from its leaders (the replica fetcher, as Kafka's ReplicaFetcherThread counts them).
**Differences:** a parked fetch is counted once (Kafka counts it again when the delayed fetch
reads); a fetch answered empty because its client is over quota is not counted; partitions a
request names but this node does not lead are not counted in totals; BytesRejected, the
message-conversion and invalid-record meters are not kept.

Concurrency: trio thread only; `snapshot` copies the numbers for a scrape.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# Kafka error codes (wire constants; pybroker.protocol.errors sits above this package)
_CORRUPT_MESSAGE = 2
_UNKNOWN_TOPIC_OR_PARTITION = 3
_NOT_LEADER_OR_FOLLOWER = 6
_MESSAGE_TOO_LARGE = 10
_RECORD_LIST_TOO_LARGE = 18
_INVALID_REQUIRED_ACKS = 21
_TOPIC_AUTHORIZATION_FAILED = 29
_UNSUPPORTED_VERSION = 35
_KAFKA_STORAGE_ERROR = 56
_TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
_UNKNOWN_TOPIC_ID = 100
_FENCED_LEADER_EPOCH = 74
_UNKNOWN_LEADER_EPOCH = 75
_OFFSET_OUT_OF_RANGE = 1
_REPLICA_NOT_AVAILABLE = 9
_INCONSISTENT_TOPIC_ID = 103

# ReplicaManager.appendToLocalLog: "Failed produce requests metric is not incremented for known exceptions"
_EXPECTED_PRODUCE_ERRORS = frozenset({
    _UNKNOWN_TOPIC_OR_PARTITION, _NOT_LEADER_OR_FOLLOWER, _MESSAGE_TOO_LARGE, _RECORD_LIST_TOO_LARGE,
    _CORRUPT_MESSAGE, _KAFKA_STORAGE_ERROR, _UNKNOWN_TOPIC_ID})
# refused by KafkaApis / appendRecords before appendToLocalLog: not a produce request to the log at all
_NOT_APPENDED = frozenset({_TOPIC_AUTHORIZATION_FAILED, _TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                           _INVALID_REQUIRED_ACKS, _UNSUPPORTED_VERSION})
# ReplicaManager.readFromLocalLog: errors that do not mark FailedFetchRequestsPerSec
_EXPECTED_FETCH_ERRORS = frozenset({
    _UNKNOWN_TOPIC_OR_PARTITION, _NOT_LEADER_OR_FOLLOWER, _UNKNOWN_LEADER_EPOCH, _FENCED_LEADER_EPOCH,
    _REPLICA_NOT_AVAILABLE, _KAFKA_STORAGE_ERROR, _OFFSET_OUT_OF_RANGE, _INCONSISTENT_TOPIC_ID,
    _UNKNOWN_TOPIC_ID})

# (attribute, Kafka meter name) in the order they are exported
COUNTERS: tuple[tuple[str, str], ...] = (
    ("messages_in", "MessagesInPerSec"),
    ("bytes_in", "BytesInPerSec"),
    ("bytes_out", "BytesOutPerSec"),
    ("total_produce_requests", "TotalProduceRequestsPerSec"),
    ("failed_produce_requests", "FailedProduceRequestsPerSec"),
    ("total_fetch_requests", "TotalFetchRequestsPerSec"),
    ("failed_fetch_requests", "FailedFetchRequestsPerSec"),
)


class TopicStats:
    """The counters of one topic (Kafka's BrokerTopicMetrics with a topic tag)."""

    __slots__ = ("topic", "partitions", "messages_in", "bytes_in", "bytes_out", "total_produce_requests",
                 "failed_produce_requests", "total_fetch_requests", "failed_fetch_requests")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.partitions = 0  # partitions of the topic published here; the slot retires at 0
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.total_produce_requests = 0
        self.failed_produce_requests = 0
        self.total_fetch_requests = 0
        self.failed_fetch_requests = 0

    def values(self) -> tuple[int, ...]:
        return tuple(getattr(self, attr) for attr, _ in COUNTERS)

    def active(self) -> bool:
        """Kafka creates a topic's meters on first use: a topic without traffic shows none."""
        return any(getattr(self, attr) for attr, _ in COUNTERS)


class BrokerTopicStats:
    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}
        self.retired = TopicStats("")  # counts of deleted topics, kept in the all-topics totals
        # all-topics only, as in Kafka (allTopicsStats.replicationBytesIn/OutRate): record bytes
        # a follower appended from its leaders, and record bytes this leader sent to followers
        self.replication_bytes_in = 0
        self.replication_bytes_out = 0

    def add_partition(self, topic: str) -> TopicStats:
        """The slot a newly published partition of `topic` bumps."""
        s = self.topics.get(topic)
        if s is None:
            s = self.topics[topic] = TopicStats(topic)
        s.partitions += 1
        return s

    def remove_partition(self, stats: TopicStats) -> None:
        """A partition went; with the topic's last one its per-topic meters go too (Kafka's
        BrokerTopicStats.removeMetrics) and its counts stay in the all-topics totals."""
        stats.partitions -= 1
        if stats.partitions > 0 or self.topics.get(stats.topic) is not stats:
            return
        del self.topics[stats.topic]
        for attr, _ in COUNTERS:
            setattr(self.retired, attr, getattr(self.retired, attr) + getattr(stats, attr))

    def record_produce(self, topic: str, error_code: int) -> None:
        """One partition of a Produce request has been answered with `error_code`."""
        if error_code in _NOT_APPENDED:
            return
        s = self.topics.get(topic)
        if s is None:
            return  # not hosted here: Kafka answers it before the log is involved
        s.total_produce_requests += 1
        if error_code and error_code not in _EXPECTED_PRODUCE_ERRORS:
            s.failed_produce_requests += 1

    def record_fetch(self, reads: Iterable[Any], from_follower: bool = False) -> None:
        """A Fetch has been answered: each `LogRead` with a partition counts once, its bytes as
        BytesOut, or as ReplicationBytesOut when a follower fetched them (as Kafka's updateBytesOut)."""
        for r in reads:
            p = r.partition
            if p is None:
                continue
            s = p.stats
            s.total_fetch_requests += 1
            code = r.error_code
            if code:
                if code not in _EXPECTED_FETCH_ERRORS:
                    s.failed_fetch_requests += 1
            elif r.size:
                if from_follower:
                    self.replication_bytes_out += r.size
                else:
                    s.bytes_out += r.size

    def snapshot(self) -> tuple[tuple[int, ...], list[tuple[str, tuple[int, ...]]]]:
        """(all-topics values, [(topic, values)] for topics with traffic), in COUNTERS order."""
        per_topic = [(t, s.values()) for t, s in self.topics.items() if s.active()]
        totals = list(self.retired.values())
        for _, vals in per_topic:
            for i, v in enumerate(vals):
                totals[i] += v
        return tuple(totals), sorted(per_topic)
