"""Replication throttles (KIP-73): Kafka's ReplicationQuotaManager, one for the leader side and
one for the follower side of this node.

What is throttled: a topic's `leader.replication.throttled.replicas` /
`follower.replication.throttled.replicas` lists `partition:broker` items (or `*`); each node
keeps the partitions whose items name itself (Kafka's TopicConfigHandler). kafka-reassign-
partitions --throttle lists the current replicas of a moving partition as leader throttles and
the replicas it adds as follower throttles, then sets the rates on every broker involved.

How much: `leader.replication.throttled.rate` / `follower.replication.throttled.rate` bytes per
second (dynamic broker configs; Long.MAX_VALUE, i.e. none, by default), measured with Kafka's
SimpleRate over `replication.quota.window.num` windows of `replication.quota.window.size.seconds`
(11 x 1 s). The quota is exceeded when the measured rate is above the bound.

The decision (Kafka's shouldLeaderThrottle / shouldFollowerThrottle) is made per partition
before data moves, and the bytes are recorded after they moved, so a throttle holds the rate
on average, a response at a time:

- leader, answering a follower's Fetch: the partition's records are left out when the follower
  is not in the ISR, the partition is throttled here and the leader quota is exceeded; the
  records of every throttled partition the response carries (in-ISR followers' too) are
  recorded against the leader quota.
- follower, building its Fetch: the partition is left out of the request when it is not in sync
  (see ReplicaFetcher), throttled here and the follower quota is exceeded; the records appended
  for every throttled partition are recorded against the follower quota.

In-sync replicas are never held back, so a throttle cannot shrink an ISR; their traffic still
counts, so the total replication traffic of throttled partitions stays near the bound. Worked
example, follower rate 1,000,000 B/s, a new replica catching up with replica.fetch.max.bytes
1 MiB: the first response carries 1 MiB (nothing was recorded yet); SimpleRate then reads
1,048,576 B over its one-second minimum window, above the bound, so the partition is left out
and the fetcher backs off replica.fetch.backoff.ms (1 s); at 2 s the rate reads 1,048,576 B
over 2 s, below the bound, and the next MiB moves. The average stays under the bound (measured
over up to 11 s), give or take one response; a leader throttle works alike, its follower
waiting replica.fetch.wait.max.ms per empty answer.

Time is passed in (`now_ms`, trio's clock in milliseconds). Concurrency: trio thread only.
"""

from __future__ import annotations

from collections.abc import Mapping

from pybroker.config import LONG_MAX, parse_throttled_replicas
from pybroker.metrics.stats import SimpleRate

LEADER_REPLICATION = "LeaderReplication"  # Kafka's QuotaType names (the metric's group)
FOLLOWER_REPLICATION = "FollowerReplication"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"


class ReplicationQuotaManager:
    """The throttled partitions and the byte rate of one side (leader or follower) of this node."""

    def __init__(self, replication_type: str, num_samples: int = 11, window_seconds: int = 1) -> None:
        self.replication_type = replication_type
        self.num_samples = num_samples
        self.window_ms = window_seconds * 1000
        self.bound: float = float(LONG_MAX)
        self._rate = SimpleRate(num_samples, self.window_ms)
        # topic -> the partitions throttled here; None: all of them (Kafka's AllReplicas)
        self._throttled: dict[str, frozenset[int] | None] = {}

    # ------------------------------------------------------------------ configuration

    def update_quota(self, bound: float) -> None:
        """The rate's upper bound in bytes per second (Kafka's updateQuota(upperBound(...)))."""
        self.bound = float(bound)

    def mark_throttled(self, topic: str, partitions: frozenset[int] | None) -> None:
        """Throttle these partitions of `topic` (None: all), replacing what the topic had."""
        self._throttled[topic] = partitions

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    def update_topic(self, topic: str, value: object, broker_id: int) -> None:
        """Apply a topic's throttled-replicas config value (a list or its string; empty or
        absent removes the throttle), as Kafka's TopicConfigHandler.updateThrottledList."""
        if value is None or (isinstance(value, str) and not value.strip()) or \
                (isinstance(value, (list, tuple)) and not value):
            self.remove_throttle(topic)
        else:
            self.mark_throttled(topic, parse_throttled_replicas(value, broker_id))

    def throttled_topics(self) -> Mapping[str, frozenset[int] | None]:
        return self._throttled

    # ------------------------------------------------------------------ the decision

    def is_throttled(self, topic: str, partition: int) -> bool:
        """Whether this partition is in the throttled list here (whatever the rate)."""
        throttled = self._throttled
        if not throttled or topic not in throttled:  # the common case: one dict probe or none
            return False
        partitions = throttled[topic]
        return partitions is None or partition in partitions

    def is_quota_exceeded(self, now_ms: int) -> bool:
        """The measured byte rate is above the bound (Kafka's sensor.checkQuotas)."""
        if self.bound >= LONG_MAX:
            return False  # no quota: never exceeded, and no need to measure
        return self._rate.measure(now_ms) > self.bound

    def should_throttle(self, topic: str, partition: int, in_sync: bool, now_ms: int) -> bool:
        """Kafka's shouldLeaderThrottle / shouldFollowerThrottle: not in sync, throttled here
        and over quota."""
        return not in_sync and self.is_throttled(topic, partition) and self.is_quota_exceeded(now_ms)

    def record(self, value: float, now_ms: int) -> None:
        """Count bytes that moved, even past the quota (they were sent already). Samples older
        than the windows are reset as they are measured, so an idle rate reads 0 (Kafka also
        drops the sensor after an hour without records; nothing here needs that)."""
        self._rate.record(value, now_ms)

    def byte_rate(self, now_ms: int) -> float:
        """The measured rate in bytes per second (Kafka's metric kafka.server:type=<type>, byte-rate)."""
        return self._rate.measure(now_ms)
