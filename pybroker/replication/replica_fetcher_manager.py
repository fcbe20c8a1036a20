"""The follower side of replication (Kafka's ReplicaFetcherManager / AbstractFetcherManager).

Concurrency first: trio thread only. The replica manager calls `add_partition` on makeFollower
and `remove_partition` on makeLeader, deletion or a leader change, between its awaits; each
(leader broker, fetcher id) pair gets one ReplicaFetcher task, started in the replica manager's
nursery the first time a partition needs it and cancelled when its last partition goes (Kafka's
shutdownIdleFetcherThreads). A partition goes to fetcher `(crc32(topic) * 31 + partition) %
num.replica.fetchers` of its leader, as Kafka's getFetcherId does, so a broker holds at most
`num.replica.fetchers` connections to each leader.

Each fetcher reaches its leader through a LeaderEndPoint made for it by the factory this manager
is given (leader_end_point.py; Kafka's ReplicaFetcherManager passes its fetcher threads a
RemoteLeaderEndPoint the same way): on a broker, a connection to the leader's
`inter.broker.listener.name` endpoint from the metadata image's broker registrations; in tests
and the replication simulation, the leader's handlers without a socket.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from pybroker.replication.replica_fetcher import PartitionFetchState, ReplicaFetcher

if TYPE_CHECKING:
    from pybroker.replication.leader_end_point import LeaderEndPointFactory
    from pybroker.replication.partition import Partition
    from pybroker.replication.replica_manager import ReplicaManager

TopicPartition = tuple[str, int]


class ReplicaFetcherManager:
    # Kafka's LeaderEndPoint.isTruncationOnFetchSupported (Fetch v13+ under an IBP >= 2.7): the
    # leader answers a diverging last fetched epoch (KIP-320), so a follower with an epoch
    # history starts fetching at once. pybroker nodes all speak Fetch v17 and answer it; False
    # (tests only) brings back the OffsetForLeaderEpoch round trip before the first fetch.
    truncation_on_fetch = True

    def __init__(self, rm: ReplicaManager, leader_end_points: LeaderEndPointFactory) -> None:
        self.rm = rm
        self.leader_end_points = leader_end_points  # (leader id, fetcher id) -> a new fetcher's endpoint
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._assigned: dict[TopicPartition, tuple[int, int]] = {}  # partition -> its fetcher's key
        self.closed = False  # shut down: no fetcher starts again (the logs are being closed)

    @property
    def backoff_s(self) -> float:
        return max(0.01, self.rm.config["replica.fetch.backoff.ms"] / 1000)

    def fetcher_id(self, topic: str, partition: int) -> int:
        return (zlib.crc32(topic.encode()) * 31 + partition) % max(1, self.rm.config["num.replica.fetchers"])

    def broker_epoch(self) -> int:
        reg = self.rm.image.brokers.get(self.rm.node_id)
        return reg.epoch if reg is not None else -1

    def add_partition(self, p: Partition) -> None:
        """Follow `p` from its leader at its leader epoch (makeFollower): Kafka's
        initialFetchOffset and partitionFetchState. A log with an epoch history fetches at once
        from its log end offset with its latest epoch, and the leader's answer says where to cut
        if the logs diverged; a log without one (empty, or written before epochs) truncates to its
        high watermark first, as Kafka's truncateToHighWatermark. Without truncation on fetch,
        every new state truncates first (OffsetForLeaderEpoch)."""
        tp = (p.topic, p.partition)
        self.remove_partition(tp)
        if self.closed:
            return
        key = (p.leader_id, self.fetcher_id(p.topic, p.partition))
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = self.fetchers[key] = ReplicaFetcher(self, *key, self.leader_end_points(*key))
            self.rm.spawn(fetcher.run)
        latest = p.log.latest_epoch()
        fetching = self.truncation_on_fetch and latest is not None
        fetcher.add(PartitionFetchState(p.topic, p.partition, p.topic_id, p.leader_epoch, p.log.log_end_offset,
                                        latest if fetching else None, truncating=not fetching))
        self._assigned[tp] = key

    def remove_partition(self, tp: TopicPartition) -> None:
        key = self._assigned.pop(tp, None)
        if key is None:
            return
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            return
        fetcher.remove(tp)
        if not fetcher.partitions:  # idle: its task and connection go
            del self.fetchers[key]
            fetcher.cancel_scope.cancel()

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        key = self._assigned.get(tp)
        fetcher = self.fetchers.get(key) if key is not None else None
        return fetcher.partitions.get(tp) if fetcher is not None else None

    def shutdown(self) -> None:
        """Stop every fetcher for good (node shutdown, before the logs are flushed and closed)."""
        self.closed = True
        for fetcher in self.fetchers.values():
            fetcher.cancel_scope.cancel()
        self.fetchers.clear()
        self._assigned.clear()
