"""Fetching one partition's record batches (what Kafka's Fetcher does for one assignment).

    PartitionFetcher(admin, tp, isolation_level).fetch(offset) -> FetchedData
    committed_batches(data, aborted_tracker) -> [(BatchHeader, memoryview)]

`fetch` sends a Fetch (v4-v12: topic names, isolation level, last stable offset) to the
partition's leader and returns the raw records bytes with the partition's high watermark,
last stable offset and log start offset; it follows a leader change (NOT_LEADER_OR_FOLLOWER
and friends refresh metadata and retry) and raises KafkaError for anything else, e.g.
OFFSET_OUT_OF_RANGE, which the caller turns into data-loss handling.

Under read_committed the broker returns records up to the last stable offset plus the
aborted transactions that overlap them; `AbortedTransactions` skips those producers'
batches from each abort's first offset until that producer's ABORT marker, as Kafka's
consumer does, and control batches are always skipped. Batches are never decoded here:
the caller decodes what it keeps (pybroker._native.arrow_records.RecordColumns).
Concurrency: one thread per fetcher.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Any

from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.connection import BrokerConnectionError
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import FetchRequest
from pybroker.records import BatchHeader, iter_batches

__all__ = ["AbortedTransactions", "FetchedData", "PartitionFetcher", "READ_COMMITTED",
           "READ_UNCOMMITTED", "committed_batches"]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
FETCH_MAX_VERSION = 12  # v13+ name topics by id only
CONTROL_TYPE_ABORT = 0
_CONTROL_KEY = struct.Struct(">hh")  # version, type


@dataclass
class FetchedData:
    records: Any  # bytes-like: zero or more complete batches (a trailing partial one ignored)
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[tuple[int, int]]  # (producer_id, first_offset)


@dataclass
class AbortedTransactions:
    """Kafka's consumer-side abort tracking for one partition under read_committed."""

    pending: list[tuple[int, int]] = field(default_factory=list)  # (first_offset, producer_id)
    aborting: set[int] = field(default_factory=set)

    def add(self, aborted: list[tuple[int, int]]) -> None:
        known = set(self.pending)
        for producer_id, first_offset in aborted:
            if (first_offset, producer_id) not in known:
                self.pending.append((first_offset, producer_id))
        self.pending.sort()

    def skip(self, header: BatchHeader, batch: memoryview) -> bool:
        """True if the batch is not for a read_committed consumer (control or aborted)."""
        while self.pending and self.pending[0][0] <= header.last_offset:
            self.aborting.add(self.pending.pop(0)[1])
        if header.is_control:
            if header.producer_id in self.aborting and _is_abort_marker(header, batch):
                self.aborting.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self.aborting


def _is_abort_marker(header: BatchHeader, batch: memoryview) -> bool:
    from pybroker.records import iter_batch_records

    _, recs = iter_batch_records(batch)
    if not recs or recs[0].key is None or len(recs[0].key) < 4:
        return False
    return _CONTROL_KEY.unpack_from(recs[0].key, 0)[1] == CONTROL_TYPE_ABORT


def committed_batches(data: FetchedData, tracker: AbortedTransactions | None):
    """(header, batch) of each batch in the fetched bytes a consumer should see.

    With a tracker (read_committed), aborted transactional batches and control batches are
    dropped; without one (read_uncommitted) only control batches are.
    """
    if tracker is not None:
        tracker.add(data.aborted)
    for header, batch in iter_batches(data.records):
        if tracker is not None:
            if tracker.skip(header, batch):
                yield header, None
                continue
        elif header.is_control:
            yield header, None
            continue
        yield header, batch


class PartitionFetcher:
    """Fetches one partition from its leader; see the module docstring."""

    def __init__(self, admin: AdminClient, tp: TopicPartition, *, isolation_level: int = READ_UNCOMMITTED,
                 max_bytes: int = 52428800, partition_max_bytes: int = 8388608,
                 max_wait_ms: int = 500, min_bytes: int = 1, retry_deadline_s: float = 60.0) -> None:
        self.admin = admin
        self.tp = tp
        self.isolation_level = isolation_level
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.retry_deadline_s = retry_deadline_s
        self._leader: int | None = None

    def _leader_id(self) -> int:
        if self._leader is None:
            md = self.admin.metadata([self.tp.topic])
            t = md.topics.get(self.tp.topic)
            if t is None or t.error:
                raise KafkaError(t.error if t is not None else Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"topic '{self.tp.topic}'")
            p = next((p for p in t.partitions if p.partition == self.tp.partition), None)
            if p is None:
                raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"partition {self.tp} does not exist")
            if p.leader < 0:
                raise KafkaError(Errors.LEADER_NOT_AVAILABLE, f"partition {self.tp} has no leader")
            self._leader = p.leader
        return self._leader

    def fetch(self, offset: int, max_wait_ms: int | None = None) -> FetchedData:
        deadline = time.monotonic() + self.retry_deadline_s
        delay = 0.05
        while True:
            try:
                return self._fetch_once(offset, self.max_wait_ms if max_wait_ms is None else max_wait_ms)
            except (KafkaError, BrokerConnectionError) as exc:
                retriable = isinstance(exc, BrokerConnectionError) or exc.retriable
                if not retriable or time.monotonic() + delay > deadline:
                    raise
                self._leader = None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _fetch_once(self, offset: int, max_wait_ms: int) -> FetchedData:
        conn = self.admin._node_conn(self._leader_id())
        version = conn.version_for(ApiKey.FETCH, min_version=4, max_version=FETCH_MAX_VERSION)
        req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=self.min_bytes,
                           max_bytes=self.max_bytes, isolation_level=self.isolation_level,
                           session_id=0, session_epoch=-1,
                           topics=[FetchRequest.FetchTopic(topic=self.tp.topic, partitions=[
                               FetchRequest.FetchPartition(partition=self.tp.partition, fetch_offset=offset,
                                                           partition_max_bytes=self.partition_max_bytes)])])
        resp = conn.send(req, version)
        if resp.error_code:
            raise KafkaError(Errors.for_code(resp.error_code), f"fetch of {self.tp}")
        for t in resp.responses:
            for p in t.partitions:
                if t.topic != self.tp.topic or p.partition_index != self.tp.partition:
                    continue
                if p.error_code:
                    raise KafkaError(Errors.for_code(p.error_code), f"fetch of {self.tp} at offset {offset}")
                aborted = [(a.producer_id, a.first_offset) for a in (p.aborted_transactions or [])]
                return FetchedData(p.records if p.records is not None else b"", p.high_watermark,
                                   p.last_stable_offset, p.log_start_offset, aborted)
        raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"no fetch answer for {self.tp}")
