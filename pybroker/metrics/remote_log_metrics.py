"""Tiered storage's meters and gauges of the copy and expiration side (Kafka's BrokerTopicMetrics
remote-storage members, KIP-405 and KIP-963), kept by the remote log manager
(pybroker/replication/remote_log_manager.py); exported by server/broker_metrics.py under the
names Strimzi's rules give Kafka's MBeans (the remote reads' RemoteFetch* meters are the remote
log reader's, pybroker/replication/remote_log_reader.py):

- meters (a Count per topic and for all topics, `kafka_server_brokertopicmetrics_<name>_total`):
  RemoteCopyBytesPerSec, RemoteCopyRequestsPerSec, RemoteCopyErrorsPerSec,
  RemoteDeleteRequestsPerSec, RemoteDeleteErrorsPerSec (`COUNTERS`);
- gauges (per partition here, summed per topic and for all topics when exported, as Kafka's
  topic-level gauges sum the partitions: `kafka_server_brokertopicmetrics_<name>`):
  RemoteCopyLagBytes, RemoteCopyLagSegments, RemoteDeleteLagBytes, RemoteDeleteLagSegments,
  RemoteLogMetadataCount, RemoteLogSizeBytes (`GAUGES`).

`copy_throttle_time_ms` (Kafka's remote-copy-throttle-time) counts the time copies waited for
remote.log.manager.copy.max.bytes.per.second.

Concurrency: trio thread only (the remote log manager bumps them between its worker-thread
calls); `snapshot` copies the numbers for a scrape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# (attribute, Kafka meter name), in export order
COUNTERS: tuple[tuple[str, str], ...] = (
    ("remote_copy_bytes", "RemoteCopyBytesPerSec"),
    ("remote_copy_requests", "RemoteCopyRequestsPerSec"),
    ("remote_copy_errors", "RemoteCopyErrorsPerSec"),
    ("remote_delete_requests", "RemoteDeleteRequestsPerSec"),
    ("remote_delete_errors", "RemoteDeleteErrorsPerSec"),
)
# (attribute, Kafka gauge name)
GAUGES: tuple[tuple[str, str], ...] = (
    ("copy_lag_bytes", "RemoteCopyLagBytes"),
    ("copy_lag_segments", "RemoteCopyLagSegments"),
    ("delete_lag_bytes", "RemoteDeleteLagBytes"),
    ("delete_lag_segments", "RemoteDeleteLagSegments"),
    ("metadata_count", "RemoteLogMetadataCount"),
    ("log_size_bytes", "RemoteLogSizeBytes"),
)


@dataclass(slots=True)
class RemoteTopicCounters:
    remote_copy_bytes: int = 0
    remote_copy_requests: int = 0
    remote_copy_errors: int = 0
    remote_delete_requests: int = 0
    remote_delete_errors: int = 0

    def values(self) -> tuple[int, ...]:
        return tuple(getattr(self, attr) for attr, _ in COUNTERS)


@dataclass(slots=True)
class RemotePartitionGauges:
    copy_lag_bytes: int = 0
    copy_lag_segments: int = 0
    delete_lag_bytes: int = 0
    delete_lag_segments: int = 0
    metadata_count: int = 0
    log_size_bytes: int = 0

    def values(self) -> tuple[int, ...]:
        return tuple(getattr(self, attr) for attr, _ in GAUGES)


@dataclass
class RemoteLogMetrics:
    topics: dict[str, RemoteTopicCounters] = field(default_factory=dict)
    partitions: dict[tuple[str, int], RemotePartitionGauges] = field(default_factory=dict)
    retired: RemoteTopicCounters = field(default_factory=RemoteTopicCounters)  # deleted topics' counts
    copy_throttle_time_ms: float = 0.0

    def topic(self, topic: str) -> RemoteTopicCounters:
        """The meters of `topic`, made on first use (Kafka creates a topic's meters lazily)."""
        c = self.topics.get(topic)
        if c is None:
            c = self.topics[topic] = RemoteTopicCounters()
        return c

    def partition(self, topic: str, partition: int) -> RemotePartitionGauges:
        g = self.partitions.get((topic, partition))
        if g is None:
            g = self.partitions[(topic, partition)] = RemotePartitionGauges()
        return g

    def remove_partition(self, topic: str, partition: int) -> None:
        """The partition's gauges go (Kafka's removeRemoteTopicPartitionMetrics); with the topic's
        last one its meters retire into the all-topics totals."""
        self.partitions.pop((topic, partition), None)
        if any(t == topic for t, _ in self.partitions):
            return
        gone = self.topics.pop(topic, None)
        if gone is not None:
            for attr, _ in COUNTERS:
                setattr(self.retired, attr, getattr(self.retired, attr) + getattr(gone, attr))

    def snapshot(self) -> tuple[tuple[int, ...], list[tuple[str, tuple[int, ...]]],
                                tuple[int, ...], list[tuple[str, tuple[int, ...]]]]:
        """(meter totals, [(topic, meters)], gauge totals, [(topic, gauges summed over its partitions)])."""
        per_topic = sorted((t, c.values()) for t, c in self.topics.items())
        totals = list(self.retired.values())
        for _, vals in per_topic:
            for i, v in enumerate(vals):
                totals[i] += v
        by_topic: dict[str, list[int]] = {}
        gauge_totals = [0] * len(GAUGES)
        for (topic, _p), g in self.partitions.items():
            acc = by_topic.setdefault(topic, [0] * len(GAUGES))
            for i, v in enumerate(g.values()):
                acc[i] += v
                gauge_totals[i] += v
        return (tuple(totals), per_topic, tuple(gauge_totals),
                sorted((t, tuple(v)) for t, v in by_topic.items()))


__all__ = ["COUNTERS", "GAUGES", "RemoteLogMetrics", "RemotePartitionGauges", "RemoteTopicCounters"]
