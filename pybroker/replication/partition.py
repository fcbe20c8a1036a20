"""One partition as this broker sees it (Kafka's Partition): log + leadership state.

Every partition carries replicas, ISR, leader and leader epoch even on one node, so growing
to several brokers adds followers, not a rewrite. The high watermark is the smallest log
end offset among the ISR; with this node alone in the ISR it follows the log end offset
after every append, through the same `maybe_increment_high_watermark` a follower fetch
will drive.

Concurrency: trio thread only.
"""

from __future__ import annotations

from pybroker.log.log import UnifiedLog
from pybroker.metrics.broker_topic_stats import TopicStats


class Partition:
    __slots__ = ("topic", "partition", "topic_id", "log", "leader_id", "leader_epoch", "partition_epoch",
                 "replicas", "isr", "local_id", "follower_end_offsets", "flushing", "stats")

    def __init__(self, topic: str, partition: int, topic_id: bytes, log: UnifiedLog, local_id: int,
                 leader_id: int, leader_epoch: int, partition_epoch: int, replicas: list[int],
                 isr: list[int], stats: TopicStats | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = log
        self.local_id = local_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr = isr
        self.follower_end_offsets: dict[int, int] = {}
        self.flushing = False
        # the topic's traffic counters, shared by its partitions (ReplicaManager.topic_stats)
        self.stats = stats if stats is not None else TopicStats(topic)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def maybe_increment_high_watermark(self) -> bool:
        """Advance the HW to the smallest LEO in the ISR; True if it moved."""
        leo = self.log.log_end_offset
        candidates = [leo]
        for replica in self.isr:
            if replica != self.local_id:
                candidates.append(self.follower_end_offsets.get(replica, 0))
        new_hw = min(candidates)
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, leader={self.leader_id}, epoch={self.leader_epoch})"
