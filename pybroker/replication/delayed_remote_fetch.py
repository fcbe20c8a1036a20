"""A consumer's Fetch waiting for a read from remote storage (Kafka's DelayedRemoteFetch).

`ReplicaManager.fetch_messages` makes one when a partition of a consumer's fetch needs
records that exist only in remote storage (the first such partition; others are answered
empty, as Kafka's). The read itself runs on a reader thread (`run`, a trio task started by the
replica manager: RemoteLogReader.read_async); when it finishes it tries the operation through
the "RemoteFetch" purgatory, keyed by the partition. The operation completes (Kafka's cases):

- a: this node no longer leads a partition of the fetch (a consumer reading only from leaders),
- b: this node no longer hosts one,
- c: the remote read finished, with records or an error,
- or after `remote.fetch.max.wait.ms` (Kafka's default 500 ms).

On completion (`on_complete`) the remote partition's LogRead gets the records (one bytes
chunk), the aborted transactions (read_committed: the remote transaction indexes', and the
local log's when the read said the remote ones do not settle it), or the error
(`read_error_code`): an offset the remote tier does not have is OFFSET_OUT_OF_RANGE, metadata
still loading REPLICA_NOT_AVAILABLE, anything else the store failed with UNKNOWN_SERVER_ERROR
(Kafka's answer to a RemoteStorageException). A read that did not finish
in time answers that partition empty, without an error, so the consumer asks again (Kafka's
expiration); the read still running finishes on its thread and its result is dropped. The other
partitions keep what the first read found. The handler, awaiting the operation
(`Connection.park`), then answers with those reads.

Concurrency: trio thread only, except the read itself, which is on a worker thread.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.log.remote.remote_log_metadata_cache import RemoteLogMetadataNotReadyError
from pybroker.protocol.errors import Errors
from pybroker.purgatory.purgatory import DelayedOperation
from pybroker.replication.fetch_params import FetchParams, LogRead
from pybroker.replication.remote_log_reader import (
    RemoteLogReader,
    RemoteLogReadResult,
    RemoteStorageFetchInfo,
)

if TYPE_CHECKING:
    from pybroker.replication.replica_manager import ReplicaManager

log = logging.getLogger("pybroker.remote.fetch")


def read_error_code(error: BaseException) -> int:
    """A failed remote read's error code, as Kafka's Errors.forException answers it: an offset the
    remote tier does not hold OFFSET_OUT_OF_RANGE; the partition's metadata still being loaded
    (ReplicaNotAvailableException) REPLICA_NOT_AVAILABLE; anything else (a RemoteStorageException,
    which is not one of the protocol's exceptions) UNKNOWN_SERVER_ERROR."""
    if isinstance(error, OffsetOutOfRangeError):
        return Errors.OFFSET_OUT_OF_RANGE
    if isinstance(error, RemoteLogMetadataNotReadyError):
        return Errors.REPLICA_NOT_AVAILABLE
    return Errors.UNKNOWN_SERVER_ERROR


class DelayedRemoteFetch(DelayedOperation):
    """See the module docstring; `remote` is the LogRead of `reads` read from remote storage,
    `total` the bytes the whole response carries once completed."""

    def __init__(self, params: FetchParams, reads: list[LogRead], remote: LogRead, info: RemoteStorageFetchInfo,
                 reader: RemoteLogReader, replica_manager: ReplicaManager, max_wait_ms: int) -> None:
        if params.is_from_follower:  # Kafka: a follower gets OFFSET_MOVED_TO_TIERED_STORAGE instead
            raise ValueError(f"a follower's fetch does not read remote storage: {params}")
        super().__init__(max_wait_ms)
        self.params = params
        self.reads = reads
        self.remote = remote
        self.info = info
        self.reader = reader
        self.replica_manager = replica_manager
        self.result: RemoteLogReadResult | None = None
        self.total = 0

    @property
    def key(self) -> tuple[str, int]:
        return self.remote.topic, self.remote.partition_index

    async def run(self) -> None:
        """The read (on a reader thread), then a try through the purgatory."""
        reader = self.reader
        result = None
        ahead = reader.claim_read_ahead(self.info)
        if ahead is not None:  # started when this consumer's previous read finished
            await ahead.done.wait()
            result = ahead.result
            if result is not None and result.error is not None:
                result = None  # failed ahead of time: read again now
        if result is None:
            result = await reader.read_async(self.info)
            reader.record(self.remote.topic, result)  # RemoteFetch{Requests,Bytes,Errors}PerSec
        self.result = result
        p = self.remote.partition
        if result.error is None and result.next_offset >= 0 and p is not None and p.is_remote_offset(result.next_offset):
            # the consumer's next fetch will most likely ask for what follows, with the same limits
            reader.start_read_ahead(replace(self.info, fetch_offset=result.next_offset),
                                    self.replica_manager.spawn)
        if not self.completed:
            self.replica_manager.remote_fetch_purgatory.check_and_complete(self.key)

    def try_complete(self) -> bool:
        partitions = self.replica_manager.partitions
        only_leader = self.params.fetch_only_leader
        for r in self.reads:
            p = r.partition
            if p is None:
                continue
            if partitions.get((p.topic, p.partition)) is not p:
                return self.force_complete()  # case b: deleted or replaced meanwhile
            if only_leader and p.leader_id != p.local_id:
                return self.force_complete()  # case a
        if self.result is not None:
            return self.force_complete()  # case c
        return False

    def on_complete(self) -> None:
        r = self.remote
        r.remote_fetch = None
        result = self.result
        p = r.partition
        if self.expired and result is None:
            self.replica_manager.remote_fetch_expired += 1  # Kafka's DelayedRemoteFetchMetrics ExpiresPerSec
        if result is None or p is None or r.error_code:
            pass  # not finished in time, or no longer served here: answered empty
        elif result.error is not None:
            r.error_code = read_error_code(result.error)
            r.regions = None
            r.aborted = None
            r.size = 0
        elif result.records:
            r.regions = [result.records]
            r.size = len(result.records)
            if result.aborted is not None:
                aborted = {(a.producer_id, a.first_offset) for a in result.aborted}
                if result.local_txn_range is not None:
                    start, upper = result.local_txn_range
                    aborted.update((a.producer_id, a.first_offset) for a in p.log.txn_index.collect(start, upper))
                r.aborted = sorted(aborted, key=lambda a: a[1])
        self.total = sum(x.size for x in self.reads if x.regions and not x.error_code)


__all__ = ["DelayedRemoteFetch"]
