"""What a Fetch asks of the replica manager, and what it gets back per partition.

`FetchParams` is Kafka's FetchParams: the request-level parameters (who fetches, how long it may
wait, how many bytes, which isolation), built by the Fetch handler. `LogRead` is one partition
of the fetch, Kafka's FetchRequest.PartitionData and LogReadResult in one object: the request's
parameters (copied when the fetch starts, so a later request of the same fetch session cannot
change what a parked fetch reads) and, once `ReplicaManager.read_from_log` ran, what it found.
`FetchInfo` is the shape of a request's partition the handler hands in (its fetch session's
CachedPartition has it).

Isolation (Kafka's FetchIsolation): a consumer reads up to the high watermark (read_uncommitted)
or the last stable offset (read_committed); a follower up to the log end offset.

Concurrency: trio thread only; plain values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pybroker.replication.partition import Partition
    from pybroker.replication.remote_log_reader import RemoteStorageFetchInfo

READ_UNCOMMITTED = 0  # Fetch / ListOffsets isolation_level (Kafka's FetchIsolation.HIGH_WATERMARK)
READ_COMMITTED = 1  # Kafka's FetchIsolation.TXN_COMMITTED: up to the last stable offset
FETCH_LOG_END = -1  # a follower's fetch (Kafka's FetchIsolation.LOG_END): up to the log end offset
ZERO_TOPIC_ID = bytes(16)  # Uuid.ZERO_UUID: a fetch below v13, or a session keyed by names


class FetchParams:
    """A Fetch request's parameters (Kafka's FetchParams). `replica_id` >= 0 is a follower
    (Kafka's isFromFollower). `fetch_only_leader` is false for a consumer that sent client
    metadata (Fetch v11+, KIP-392), which may read from a follower; `client_rack` and
    `listener_name` then choose its preferred read replica. `max_bytes` / `min_bytes` are the
    request's after the broker's caps (fetch.max.bytes, the client quota).
    `hard_max_bytes_limit`: Fetch v0-2, whose first batch is sent even when cut."""

    __slots__ = ("replica_id", "replica_epoch", "max_wait_ms", "min_bytes", "max_bytes", "isolation",
                 "fetch_only_leader", "hard_max_bytes_limit", "client_rack", "listener_name")

    def __init__(self, replica_id: int = -1, replica_epoch: int = -1, max_wait_ms: int = 0, min_bytes: int = 1,
                 max_bytes: int = 2**31 - 1, isolation: int = READ_UNCOMMITTED, fetch_only_leader: bool = True,
                 hard_max_bytes_limit: bool = False, client_rack: str | None = None,
                 listener_name: str = "") -> None:
        self.replica_id = replica_id
        self.replica_epoch = replica_epoch
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.isolation = isolation
        self.fetch_only_leader = fetch_only_leader
        self.hard_max_bytes_limit = hard_max_bytes_limit
        self.client_rack = client_rack
        self.listener_name = listener_name

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    def __repr__(self) -> str:
        return (f"FetchParams(replica={self.replica_id}, max_wait_ms={self.max_wait_ms}, min_bytes={self.min_bytes}, "
                f"max_bytes={self.max_bytes}, isolation={self.isolation}, only_leader={self.fetch_only_leader})")


class FetchInfo(Protocol):
    """One partition of a Fetch request as the handler has it (server/fetch_session.py's
    CachedPartition): `topic` is None only for a topic id the image lacks, which the handler
    answers itself."""

    @property
    def topic(self) -> str | None: ...
    @property
    def topic_id(self) -> bytes: ...
    @property
    def partition(self) -> int: ...
    @property
    def fetch_offset(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def last_fetched_epoch(self) -> int: ...
    @property
    def fetcher_log_start_offset(self) -> int: ...


class LogRead:
    """One partition of a fetch (Kafka's FetchRequest.PartitionData + LogReadResult).

    Request: `topic`, `partition_index`, `topic_id` (ZERO_TOPIC_ID: not checked), `fetch_offset`,
    `max_bytes`, `current_leader_epoch` and `last_fetched_epoch` (-1: none), and the fetching
    follower's `fetcher_log_start_offset`. Result: `partition` is the Partition read, None when
    the partition was refused (`error_code` says why); the offsets are the log's when it was
    read; `regions` the chunks to send (None: no records): FileRegions of local segments, or
    bytes read back from remote storage."""

    __slots__ = ("topic", "partition_index", "topic_id", "fetch_offset", "max_bytes", "current_leader_epoch",
                 "last_fetched_epoch", "fetcher_log_start_offset",
                 "partition", "error_code", "regions", "size", "high_watermark", "last_stable_offset",
                 "log_start_offset", "aborted", "preferred_read_replica", "diverging_epoch", "remote_fetch")

    def __init__(self, partition: Partition | None, fetch_offset: int, max_bytes: int, error_code: int = 0,
                 topic: str | None = None, partition_index: int = -1, topic_id: bytes = ZERO_TOPIC_ID,
                 current_leader_epoch: int = -1, last_fetched_epoch: int = -1,
                 fetcher_log_start_offset: int = -1) -> None:
        if partition is not None and topic is None:
            topic, partition_index = partition.topic, partition.partition
        self.topic = topic if topic is not None else ""
        self.partition_index = partition_index
        self.topic_id = topic_id
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.current_leader_epoch = current_leader_epoch
        self.last_fetched_epoch = last_fetched_epoch
        self.fetcher_log_start_offset = fetcher_log_start_offset
        self.partition = partition
        self.error_code = error_code
        self.regions: list[Any] | None = None  # FileRegions to sendfile
        self.size = 0
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.aborted: list[tuple[int, int]] | None = None  # (producer id, first offset), read_committed
        # KIP-392: set (>= 0) by the leader when a consumer should fetch from that replica; the
        # read is then skipped and answered with the offsets only
        self.preferred_read_replica = -1
        # KIP-320: (epoch, end offset) where the fetcher's log parts from this one
        # (`Partition.diverging_epoch`); the read is then skipped, answered with the offsets
        self.diverging_epoch: tuple[int, int] | None = None
        # tiered storage (KIP-405): the fetch offset is only in remote storage; a consumer's read
        # goes to a DelayedRemoteFetch (replica_manager.fetch_messages), which fills `regions`
        # with the bytes read back (bytes chunks, not FileRegions)
        self.remote_fetch: RemoteStorageFetchInfo | None = None

    def __repr__(self) -> str:
        return (f"LogRead({self.topic}-{self.partition_index}@{self.fetch_offset}, error={self.error_code}, "
                f"size={self.size})")


__all__ = ["FETCH_LOG_END", "READ_COMMITTED", "READ_UNCOMMITTED", "ZERO_TOPIC_ID", "FetchInfo", "FetchParams",
           "LogRead"]
