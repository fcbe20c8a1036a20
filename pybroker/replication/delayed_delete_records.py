"""A DeleteRecords waiting for the followers (Kafka's DelayedDeleteRecords).

`ReplicaManager.delete_records` moves each leader's log start offset at once and answers each
partition with a `DeleteRecordsPartitionStatus`; the partitions whose *low watermark* (the
smallest log start offset among the leader and its followers on live brokers,
Partition.low_watermark_if_leader) is still below the requested offset wait here, watched under
their (topic, partition), until it gets there. A partition deleted meanwhile answers
UNKNOWN_TOPIC_OR_PARTITION, one this node stopped leading NOT_LEADER_OR_FOLLOWER; one still
short at the request's timeout stays REQUEST_TIMED_OUT with the low watermark it had.

Concurrency: trio thread only. Tried on every follower fetch of a watched partition and on every
change of its registration (ReplicaManager).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pybroker.errors import Errors
from pybroker.purgatory.purgatory import DelayedOperation

if TYPE_CHECKING:
    from pybroker.replication.replica_manager import ReplicaManager

INVALID_LOW_WATERMARK = -1


class DeleteRecordsPartitionStatus:
    """One partition of a DeleteRecords (Kafka's DeleteRecordsPartitionStatus): the answer so far
    (error code, low watermark) and, while `acks_pending`, the offset its low watermark must
    reach; REQUEST_TIMED_OUT until it does."""

    __slots__ = ("topic", "partition", "required_offset", "error_code", "low_watermark", "acks_pending")

    def __init__(self, topic: str, partition: int, required_offset: int = -1, error_code: int = 0,
                 low_watermark: int = INVALID_LOW_WATERMARK) -> None:
        self.topic = topic
        self.partition = partition
        self.required_offset = required_offset
        self.error_code = int(error_code)
        self.low_watermark = low_watermark
        self.acks_pending = False

    def __repr__(self) -> str:
        return (f"DeleteRecordsPartitionStatus({self.topic}-{self.partition}, pending={self.acks_pending}, "
                f"error={self.error_code}, low_watermark={self.low_watermark}, required={self.required_offset})")


class DelayedDeleteRecords(DelayedOperation):
    """Waits until every partition's low watermark reached its required offset or the partition
    failed; on expiry the pending ones stay REQUEST_TIMED_OUT."""

    def __init__(self, delay_ms: int, statuses: Sequence[DeleteRecordsPartitionStatus],
                 replica_manager: ReplicaManager) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self.replica_manager = replica_manager
        for status in statuses:
            status.acks_pending = status.error_code == 0
            if status.acks_pending:
                status.error_code = Errors.REQUEST_TIMED_OUT  # cleared when the low watermark gets there

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
            status.error_code = int(error)
            status.low_watermark = low
        if any(status.acks_pending for status in self.statuses):
            return False
        return self.force_complete()


__all__ = ["INVALID_LOW_WATERMARK", "DelayedDeleteRecords", "DeleteRecordsPartitionStatus"]
