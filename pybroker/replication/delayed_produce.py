"""An acks=all Produce waiting for its ISR (Kafka's DelayedProduce + ProducePartitionStatus).

`ReplicaManager.append_records` answers each partition of a Produce with a
`ProducePartitionStatus` (Kafka's PartitionResponse: error, base offset, log append time, log
start offset, per-record errors). With acks=all, the partitions it appended to wait in the
produce purgatory as one `DelayedProduce`, watched under their (topic, partition): each is done
when its partition's `check_enough_replicas_reach_offset` says so, i.e. the high watermark
passed its last offset (the whole maximal ISR has the batch), or says why not
(NOT_LEADER_OR_FOLLOWER: the leadership moved; NOT_ENOUGH_REPLICAS_AFTER_APPEND: the batch is in
the log but the ISR is below min.insync.replicas). A partition's answer is settled the moment it
is done, as in Kafka. The operation completes when every partition is done; one still waiting at
its timeout (or at shutdown, which forces it) answers REQUEST_TIMED_OUT, never acknowledged.

Concurrency: trio thread only; try_complete runs wherever the high watermark or the
partition's registration changes (ReplicaManager), on_complete once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pybroker.errors import Errors
from pybroker.purgatory.purgatory import DelayedOperation

if TYPE_CHECKING:
    from pybroker.replication.replica_manager import ReplicaManager


class ProducePartitionStatus:
    """One partition of a Produce as the replica manager answers it (Kafka's
    ProducePartitionStatus and its PartitionResponse). `record_errors`: (batch index, message)
    per record the validator refused (Produce v8+ carries them). `required_offset`: the offset the
    high watermark must reach for acks=all (the appended batch's last offset + 1); `acks_pending`
    while an acks=all produce waits for it."""

    __slots__ = ("topic", "partition", "error_code", "error_message", "base_offset", "log_append_time_ms",
                 "log_start_offset", "record_errors", "required_offset", "acks_pending")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.error_code = 0
        self.error_message: str | None = None
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.log_start_offset = -1
        self.record_errors: list[tuple[int, str | None]] | None = None
        self.required_offset = -1
        self.acks_pending = False

    def fail(self, code: int, message: str | None = None,
             record_errors: list[tuple[int, str | None]] | None = None) -> None:
        self.error_code = int(code)
        self.error_message = message
        self.base_offset = -1
        self.record_errors = record_errors

    def __repr__(self) -> str:
        return (f"ProducePartitionStatus({self.topic}-{self.partition}, error={self.error_code}, "
                f"base_offset={self.base_offset}, required={self.required_offset}, pending={self.acks_pending})")


class DelayedProduce(DelayedOperation):
    """Waits until every appended partition's ISR has its batch (see the module docstring)."""

    def __init__(self, delay_ms: int, statuses: Sequence[ProducePartitionStatus],
                 replica_manager: ReplicaManager) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self.replica_manager = replica_manager
        for s in statuses:  # Kafka: REQUEST_TIMED_OUT until the acks come
            s.acks_pending = s.error_code == 0

    def try_complete(self) -> bool:
        partitions = self.replica_manager.partitions
        pending = False
        for s in self.statuses:
            if not s.acks_pending:
                continue
            p = partitions.get((s.topic, s.partition))
            if p is None:  # deleted meanwhile (Kafka's getPartitionOrError)
                done, error = False, self.replica_manager.not_hosted_error(s.topic, s.partition)
            else:
                done, error = p.check_enough_replicas_reach_offset(s.required_offset)
            if error:
                s.acks_pending = False
                if error == Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND and p is not None:
                    s.error_code = error
                    s.error_message = (f"The size of the current ISR {len(p.maximal_isr)} is insufficient to "
                                       f"satisfy the min.isr requirement of {p.effective_min_isr}")
                else:
                    s.fail(error)
            elif done:
                s.acks_pending = False
            else:
                pending = True
        if pending:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        for s in self.statuses:
            if s.acks_pending:  # expired, or forced at shutdown: not acknowledged
                s.acks_pending = False
                s.fail(Errors.REQUEST_TIMED_OUT, "Timed out waiting for the in-sync replicas")


__all__ = ["DelayedProduce", "ProducePartitionStatus"]
