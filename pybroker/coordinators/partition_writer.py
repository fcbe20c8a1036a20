"""What a coordinator needs of the partitions it writes to (Kafka's PartitionWriter).

The group and transaction coordinators keep their state in partitions of their internal
topics (__consumer_offsets, __transaction_state) led by this node: they append batches as
leader, wait for the high watermark to cover them (in the produce purgatory, like an acks=all
produce), read the node's clock and timer, and learn which partitions this node leads.
ReplicaManager is the implementation; unit tests pass small fakes.
Concurrency: trio thread only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pybroker.clock import Clock
    from pybroker.log.log_append_info import LogAppendInfo
    from pybroker.purgatory.purgatory import DelayedOperationPurgatory
    from pybroker.purgatory.timer import SystemTimer
    from pybroker.replication.partition import Partition


class PartitionWriter(Protocol):
    clock: Clock
    timer: SystemTimer
    produce_purgatory: DelayedOperationPurgatory  # where appends wait for the high watermark

    def leader_partitions(self, topic: str) -> dict[int, Partition]:
        """The partitions of `topic` this node leads, by partition index."""
        ...

    def get_partition(self, topic: str, partition: int) -> Partition | None: ...

    def append(self, partition: Partition, batch: bytearray, timestamp_type: str | None = None,
               origin: str = "client", header: tuple | None = None, transaction_version: int = 0) -> LogAppendInfo:
        """Append one batch as leader; raises pybroker.log.errors.LogError subclasses."""
        ...
