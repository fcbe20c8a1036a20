"""A Fetch waiting for fetch.min.bytes (Kafka's DelayedFetch).

`ReplicaManager.fetch_messages` parks a fetch that found fewer than min_bytes (and no error,
diverging epoch or preferred read replica) in the fetch purgatory, watched under its partitions.
Every append to one of them (and every high watermark move, leadership change or deletion) tries
it. `try_complete` reads no records: it compares log positions, as Kafka's does with its
LogOffsetMetadata. It answers at once when, for some partition (Kafka's cases):

- this node no longer hosts it, or no longer leads it and the fetch reads only from leaders (A-C);
- the fetch names a current leader epoch that is no longer the partition's (E);
- the fetch offset is on an older segment than the end of what may be read (F; not for a
  follower the leader throttle holds back);

and otherwise once the bytes between the fetch offsets and what may be read (each partition at
most its max_bytes; throttled followers' partitions count nothing) reach min_bytes (G). With
min_bytes 1 (librdkafka's, kafka-python's and the followers' default) the first partition with
anything to read answers it, without a position lookup.

On completion (by data, a change, max_wait_ms, a reset peer or shutdown) `on_complete` runs the
fetch's read once, through `ReplicaManager.read_from_log`, the same entry point the first
attempt used: every partition is decided again (leadership, epochs, diverging epoch, preferred
read replica), without recording a follower's fetch a second time (Kafka's readFromPurgatory).
The handler, awaiting the operation, then answers with those reads.

Concurrency: trio thread only; try_complete runs inside whatever changed the partition (an
append, a follower's fetch), so it only compares offsets and positions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.log.errors import LogError
from pybroker.purgatory.purgatory import DelayedOperation
from pybroker.replication.fetch_params import FETCH_LOG_END, READ_COMMITTED, FetchParams, LogRead

if TYPE_CHECKING:
    from pybroker.replication.replica_manager import ReplicaManager


class DelayedFetch(DelayedOperation):
    """A fetch parked until min_bytes are there (see the module docstring); `total` is the bytes
    its completing read found."""

    def __init__(self, params: FetchParams, reads: list[LogRead], replica_manager: ReplicaManager) -> None:
        super().__init__(params.max_wait_ms)
        self.params = params
        self.reads = reads
        self.replica_manager = replica_manager
        self.total = 0

    def try_complete(self) -> bool:
        rm = self.replica_manager
        params = self.params
        partitions = rm.partitions
        only_leader = params.fetch_only_leader
        isolation = params.isolation
        need = params.min_bytes
        replica_id = params.replica_id
        quota = rm.leader_quota if replica_id >= 0 else None
        have = 0
        for r in self.reads:
            p = r.partition
            if p is None:
                continue
            if partitions.get((p.topic, p.partition)) is not p or (only_leader and p.leader_id != p.local_id):
                return self.force_complete()  # deleted, replaced or no longer led here meanwhile
            epoch = r.current_leader_epoch
            if epoch >= 0 and epoch != p.leader_epoch:
                return self.force_complete()  # the leader epoch moved: the read answers its error
            plog = p.log
            upper = (plog.last_stable_offset if isolation == READ_COMMITTED
                     else plog.log_end_offset if isolation == FETCH_LOG_END else plog.high_watermark)
            offset = r.fetch_offset
            if offset < upper and p.is_remote_offset(offset):
                continue  # only in remote storage (a remote read the fetch quota held back): waits, as Kafka's
            if offset < upper:
                throttled = (quota is not None and quota.is_throttled(p.topic, p.partition)
                             and rm.should_leader_throttle(p, replica_id))
                if throttled:
                    continue
                if need <= 1:
                    return self.force_complete()
                try:
                    start_base, start = plog.offset_position(offset)
                    end_base, end = plog.offset_position(upper)
                except LogError:
                    return self.force_complete()  # the offset became invalid: the read answers why
                if start_base != end_base:
                    return self.force_complete()  # what arrived is on a newer segment (Kafka's case F)
                have += min(end - start, r.max_bytes)
                if have >= need:
                    return self.force_complete()
            # **Deliberate difference:** a fetch offset past what may be read (a consumer ahead of
            # a lagging high watermark: a new leader's, a follower's) waits for it; Kafka's case F
            # answers at once, and the client fetches again at once until the watermark is there
        return False

    def on_complete(self) -> None:
        self.total = self.replica_manager.read_from_log(self.params, self.reads, from_purgatory=True)


__all__ = ["DelayedFetch"]
