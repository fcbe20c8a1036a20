"""The share partitions a broker leads, and the ShareFetch / ShareAcknowledge work on them
(Kafka's SharePartitionManager and DelayedShareFetch).

Format: `partitions` maps (group id, topic id, partition) to a SharePartition, created lazily on
this partition's leader by the first share fetch naming it, at the leader epoch it has then; it
loads its state from the Persister (`maybe_initialize`). A partition that is no longer led here,
or led at another epoch, is closed and dropped when next touched, so a new leader loads the
persisted state again. Without a persister (`persister` None) every partition answers
COORDINATOR_NOT_AVAILABLE, as a SharePartition whose persister cannot be reached.

ShareFetch (`fetch`): the acknowledgements piggybacked on the request are applied first
(`acknowledge`); then, for each partition that can acquire, the log is read from the
partition's next fetch offset through the replica manager (ReplicaManager.read_from_log, as a
consumer fetch at the group's share.isolation.level), the batch headers are read from the file
regions, the records are acquired (SharePartition.acquire) and the response carries the log's
batches covering the acquired ranges (Kafka's ShareFetchUtils slicing), as file regions.
A partition whose next fetch offset lies only in remote storage (a tiered partition's
[log start offset, local log start offset)) is left out of that synchronous pass: the read
names it (`LogRead.remote_fetch`), `acquire` hands the first such partition back, and the
handler reads it through the node's RemoteLogReader on a reader thread
(`acquire_remote`, Kafka's DelayedShareFetch.processRemoteFetchOrException, one partition per
fetch), bounded by remote.fetch.max.wait.ms, then acquires from the returned bytes by the same
SharePartition.acquire rules (locks, delivery counts, max record locks, read_committed, acquire
mode) and answers them as one bytes chunk. While that read runs, the share partition is skipped
by other fetches (Kafka's share-partition fetch lock), so two members never read the same remote
range to acquire it once; when it ends the parked fetches on the partition are woken. A failed
read is the partition's error as Kafka's Errors.forException answers it (OFFSET_OUT_OF_RANGE,
UNKNOWN_SERVER_ERROR for the store); one that did not finish in time answers the partition
empty, without an error.
When nothing is acquired and MaxWaitMs > 0, the fetch parks as a DelayedShareFetch in the
replica manager's fetch purgatory, watched on the partitions' (topic, partition) keys, which a
log append checks; a share partition whose records became available again (a release, a lock
timeout) checks the same keys. Each check acquires for it; it completes once it got records,
or at MaxWaitMs after one more attempt. **Difference:** Kafka's DelayedShareFetch completes once
MinBytes are acquired; here any acquired record completes it (a share consumer sends MinBytes 1).

Concurrency: trio thread only. Acquisition never awaits between reading the log and acquiring, so
two fetches cannot acquire the same record; the one await, a remote read, is followed by a
check that the share partition still wants the offset it read before anything is acquired.
Persister calls and remote reads await.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import trio

from pybroker.controller.features import SHARE_VERSION
from pybroker.controller.group_configs import GROUP_KEY_BY_NAME, RESOURCE_GROUP, defaults, parse
from pybroker.protocol.chunks import FileRegion
from pybroker.protocol.errors import Errors
from pybroker.purgatory.purgatory import DelayedOperation
from pybroker.purgatory.timer import SystemTimer
from pybroker.replication.delayed_remote_fetch import read_error_code
from pybroker.replication.fetch_params import READ_COMMITTED, READ_UNCOMMITTED, FetchParams, LogRead
from pybroker.replication.remote_log_reader import RemoteLogReadResult, RemoteStorageFetchInfo
from pybroker.share.persister import Persister
from pybroker.share.share_group_metrics import ShareGroupMetrics
from pybroker.share.share_partition import (
    ACTIVE,
    FAILED,
    FENCED,
    AcquiredRecords,
    FetchedBatch,
    SharePartition,
    ShareSettings,
)
from pybroker.share.share_session import ShareSession, ShareSessionCache

if TYPE_CHECKING:
    from pybroker.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

SPKey = tuple[str, bytes, int]  # (group id, topic id, partition)
_HEADER = 61  # a v2 record batch header
_HEADER_CHUNK = 64 * 1024
_EARLIEST, _LATEST = -2, -1  # ListOffsets timestamps


@dataclass
class PartitionFetch:
    """One partition of a share fetch: its share partition (or the error that refused it), what
    was acquired, and the file regions of the batches that cover it."""

    topic_id: bytes
    partition: int
    topic: str | None
    error: int = 0
    acknowledge_error: int = 0
    has_ack: bool = False
    acquired: list[AcquiredRecords] = field(default_factory=list)
    records: list[FileRegion | memoryview] = field(default_factory=list)


@dataclass
class RemoteShareFetch:
    """A partition of a share fetch whose next fetch offset is only in remote storage: what the
    log read asked of the remote tier (`info`) at `fetch_offset`, to be read by `acquire_remote`."""

    pf: PartitionFetch
    sp: SharePartition
    fetch_offset: int
    info: RemoteStorageFetchInfo


def bytes_batch_headers(chunk: bytes | bytearray | memoryview) -> list[tuple[FetchedBatch, int, int]]:
    """The whole batches in `chunk` (record batches v2 back to back, as a remote read returns
    them): each batch's header fields and its (start, end) in the chunk. A batch cut short at
    the end (a byte limit) or a length that is not a batch's ends the list."""
    out = []
    view = memoryview(chunk)
    end = len(view)
    pos = 0
    while pos + _HEADER <= end:
        head = bytes(view[pos:pos + _HEADER])
        base = int.from_bytes(head[0:8], "big", signed=True)
        size = 12 + int.from_bytes(head[8:12], "big", signed=True)
        if pos + size > end or size < _HEADER:
            break
        attributes = int.from_bytes(head[21:23], "big")
        last_delta = int.from_bytes(head[23:27], "big", signed=True)
        producer_id = int.from_bytes(head[43:51], "big", signed=True)
        out.append((FetchedBatch(base, base + last_delta, producer_id, bool(attributes & 0x10),
                                 bool(attributes & 0x20)), pos, pos + size))
        pos += size
    return out


def read_batch_headers(regions: Sequence[FileRegion | bytes | bytearray | memoryview]
                       ) -> list[tuple[FetchedBatch, FileRegion | memoryview]]:
    """The batches in `regions` (a log read): their headers, and each batch's own region (a
    FileRegion of the log file, or a memoryview slice of a bytes chunk a remote read returned).
    A batch cut short at the end of a region (a byte limit) is left out. From a file the headers
    are read in chunks of up to _HEADER_CHUNK bytes (one pread for a run of small batches, one
    short read per large batch), from the page cache the read just warmed."""
    out: list[tuple[FetchedBatch, FileRegion | memoryview]] = []
    for region in regions:
        if not isinstance(region, FileRegion):
            view = memoryview(region)
            out.extend((b, view[start:stop]) for b, start, stop in bytes_batch_headers(view))
            continue
        fd, pos, end = region.fd, region.position, region.position + region.length
        buf = b""
        buf_start = pos
        while pos + _HEADER <= end:
            if pos + _HEADER > buf_start + len(buf):
                buf_start = pos
                buf = os.pread(fd, min(end - pos, _HEADER_CHUNK), pos)
                if len(buf) < _HEADER:
                    break
            at = pos - buf_start
            head = buf[at:at + _HEADER]
            base = int.from_bytes(head[0:8], "big", signed=True)
            size = 12 + int.from_bytes(head[8:12], "big", signed=True)
            if pos + size > end or size < _HEADER:
                break
            attributes = int.from_bytes(head[21:23], "big")
            last_delta = int.from_bytes(head[23:27], "big", signed=True)
            producer_id = int.from_bytes(head[43:51], "big", signed=True)
            out.append((FetchedBatch(base, base + last_delta, producer_id, bool(attributes & 0x10),
                                     bool(attributes & 0x20)), FileRegion(fd, pos, size)))
            pos += size
    return out


def share_settings(config: Any, image: Any, group_id: str) -> ShareSettings:
    """The group's share.* configs now: the dynamic group config over the group.share.* defaults."""
    stored = image.configs.get((RESOURCE_GROUP, group_id), {}) if image is not None else {}
    base = defaults(config)

    def value(name: str) -> Any:
        raw = stored.get(name)
        if raw is None:
            return base[name]
        try:
            return parse(GROUP_KEY_BY_NAME[name], raw)
        except Exception:  # validated when it was set; a bad value falls back to the default
            return base[name]

    return ShareSettings(record_lock_duration_ms=int(value("share.record.lock.duration.ms")),
                         delivery_count_limit=int(value("share.delivery.count.limit")),
                         max_record_locks=int(value("share.partition.max.record.locks")),
                         read_committed=str(value("share.isolation.level")) == "read_committed",
                         auto_offset_reset=str(value("share.auto.offset.reset")),
                         renew_enabled=bool(value("share.renew.acknowledge.enable")))


class DelayedShareFetch(DelayedOperation):
    """A share fetch that acquired nothing, parked (Kafka's DelayedShareFetch): each check of its
    keys (an append, a release, a lock timeout) acquires for it, and it completes once something
    was acquired, so the other parked members keep waiting instead of answering empty; at
    MaxWaitMs it completes and the handler acquires once more (Kafka's onComplete)."""

    def __init__(self, delay_ms: int, ready: Callable[[], bool], attempt: Callable[[], int],
                 remote_wanted: Callable[[], bool] = lambda: False) -> None:
        super().__init__(delay_ms)
        self._ready = ready
        self._attempt = attempt
        self._remote_wanted = remote_wanted

    def try_complete(self) -> bool:
        # runs inside whoever checked the key (an append, another request): a fault here answers
        # this fetch, never theirs. A fetch whose attempt found a partition to read from remote
        # storage completes too: its handler runs that read (it cannot run here, synchronously).
        try:
            done = self._ready() and (self._attempt() > 0 or self._remote_wanted())
        except Exception:
            log.exception("a parked share fetch failed to acquire")
            done = True
        return self.force_complete() if done else False


class SharePartitionManager:
    def __init__(self, config: Any, replica_manager: ReplicaManager, image: Any, timer: SystemTimer,
                 nursery: trio.Nursery, persister: Persister | None, wall_ms: Callable[[], int]) -> None:
        self.config = config
        self.rm = replica_manager
        self.image = image
        self.timer = timer
        self.nursery = nursery
        self.persister = persister
        self.wall_ms = wall_ms
        self.partitions: dict[SPKey, SharePartition] = {}
        self.metrics = ShareGroupMetrics()
        self._load_started: dict[SPKey, float] = {}  # share partitions not loaded yet: trio time created
        # share partitions with a remote read in flight (Kafka's share-partition fetch lock): other
        # fetches skip them until it has been acquired from
        self._remote_busy: set[SPKey] = set()
        max_sessions = config.get("group.share.max.share.sessions", 2000) if config is not None else 2000
        self.sessions = ShareSessionCache(int(max_sessions or 2000))

    def settings(self, group_id: str) -> ShareSettings:
        return share_settings(self.config, self.image, group_id)

    # ------------------------------------------------------------------ share partitions

    def share_partition(self, group_id: str, topic_id: bytes, topic: str, partition: int) -> SharePartition | int:
        """The share partition on this leader, created if needed; else the error code."""
        key = (group_id, topic_id, partition)
        p = self.rm.leader_partition(topic, partition)
        sp = self.partitions.get(key)
        if isinstance(p, int):
            if sp is not None:
                self._drop(key, sp)
            return p
        if p.topic_id != topic_id:
            return Errors.UNKNOWN_TOPIC_ID
        if sp is not None and (sp.leader_epoch != p.leader_epoch or sp.state in (FAILED, FENCED)):
            self._drop(key, sp)
            sp = None
        if sp is None:
            if self.persister is None:
                return Errors.COORDINATOR_NOT_AVAILABLE
            tp = (topic, partition)
            sp = SharePartition(group_id, uuid.UUID(bytes=topic_id), topic, partition, p.leader_epoch,
                                self.persister, self.timer, self.nursery, lambda: self.settings(group_id),
                                lambda s: self._offset_for_reset(topic, partition, s),
                                lambda: self._on_change(tp), self.wall_ms)
            self.partitions[key] = sp
            self._load_started[key] = trio.current_time()
        return sp

    def _loaded(self, key: SPKey) -> None:
        """A share partition's first load finished: its PartitionLoadTimeMs."""
        started = self._load_started.pop(key, None)
        if started is not None:
            self.metrics.partition_loaded((trio.current_time() - started) * 1000.0)

    def on_metadata(self) -> None:
        """A metadata change: the share partitions of a partition no longer led here, led at
        another epoch, or deleted, are closed and dropped at once (Kafka's SharePartitionListener:
        onBecomingFollower, onDeleted), so their locks stop and a new leader loads them.
        share.version finalized below 1 turns share groups off: every share session and share
        partition leaves the caches (Kafka's onShareVersionToggle); their state stays with the
        share coordinator for when share groups are turned on again."""
        features = getattr(self.image, "features", None)
        if features is not None and int(features.get(SHARE_VERSION, 0)) < 1:
            for session_key in list(self.sessions.sessions):
                self.sessions.remove(session_key)
            for key, sp in list(self.partitions.items()):
                self._drop(key, sp)
            return
        for key, sp in list(self.partitions.items()):
            p = self.rm.leader_partition(sp.topic, sp.partition)
            if isinstance(p, int) or p.leader_epoch != sp.leader_epoch or p.topic_id != key[1]:
                self._drop(key, sp)

    def _drop(self, key: SPKey, sp: SharePartition) -> None:
        sp.close()
        self._load_started.pop(key, None)
        if self.partitions.get(key) is sp:
            del self.partitions[key]

    def _on_change(self, tp: tuple[str, int]) -> None:
        self.rm.fetch_purgatory.check_and_complete(tp)

    def _offset_for_reset(self, topic: str, partition: int, strategy: str | int) -> int:
        p = self.rm.get_partition(topic, partition)
        if p is None:
            return 0
        if strategy == "earliest":
            return int(p.log.log_start_offset)
        if strategy == "latest":
            return int(p.log.high_watermark)
        _code, offset, _ts, _epoch = self.rm.fetch_offset(topic, partition, int(strategy), READ_UNCOMMITTED)
        return int(offset) if offset >= 0 else int(p.log.high_watermark)

    # ------------------------------------------------------------------ ShareFetch

    async def acknowledge(self, group_id: str, member_id: str, pf: PartitionFetch,
                          batches: list[tuple[int, int, list[int]]]) -> int:
        """Acknowledge in a share partition this leader has (Kafka's SharePartitionManager.acknowledge:
        one it never fetched is UNKNOWN_TOPIC_OR_PARTITION; a partition led elsewhere now is
        NOT_LEADER_OR_FOLLOWER)."""
        if pf.topic is None:
            return Errors.UNKNOWN_TOPIC_ID
        key = (group_id, pf.topic_id, pf.partition)
        p = self.rm.leader_partition(pf.topic, pf.partition)
        sp = self.partitions.get(key)
        if isinstance(p, int):
            if sp is not None:
                self._drop(key, sp)
            return p
        if sp is None or sp.leader_epoch != p.leader_epoch:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        code = await sp.maybe_initialize()
        if code:
            return code
        self._loaded(key)
        code = await sp.acknowledge(member_id, batches)
        if code == 0:
            self.metrics.record_acknowledgements(batches)
        if sp.state == FENCED:
            self._drop(key, sp)
        return code

    async def prepare(self, group_id: str, parts: list[PartitionFetch]) -> list[tuple[PartitionFetch, SharePartition]]:
        """The share partitions of a fetch, initialized; refused partitions get their error."""
        out = []
        failed = 0
        for pf in parts:
            if pf.error:
                continue
            if pf.topic is None:
                pf.error = Errors.UNKNOWN_TOPIC_ID
                failed += 1
                continue
            sp = self.share_partition(group_id, pf.topic_id, pf.topic, pf.partition)
            if isinstance(sp, int):
                pf.error = sp
                failed += 1
                continue
            code = await sp.maybe_initialize()
            if code:
                pf.error = code
                failed += 1
                continue
            self._loaded((group_id, pf.topic_id, pf.partition))
            out.append((pf, sp))
        # BrokerTopicMetrics' TotalShareFetchRequestsPerSec: once per topic of the request
        self.metrics.share_fetch(len({pf.topic for pf in parts if pf.topic is not None}), failed)
        return out

    def acquirable(self, targets: list[tuple[PartitionFetch, SharePartition]]) -> bool:
        """Whether some partition has records a fetch could acquire now."""
        busy = self._remote_busy
        for pf, sp in targets:
            if sp.state != ACTIVE or not sp.can_acquire_records():
                continue
            if busy and (sp.group_id, pf.topic_id, sp.partition) in busy:
                continue
            nxt = sp.next_fetch_offset()
            if nxt <= sp.end_offset:
                return True
            p = self.rm.get_partition(sp.topic, sp.partition)
            if p is None:
                continue
            upper = p.log.last_stable_offset if sp.settings().read_committed else p.log.high_watermark
            if upper > nxt:
                return True
        return False

    def acquire(self, member_id: str, targets: list[tuple[PartitionFetch, SharePartition]], max_bytes: int,
                max_records: int, batch_size: int, mode: int, remote: list[RemoteShareFetch] | None = None) -> int:
        """Read and acquire (synchronously: no other fetch runs in between). The request's bytes
        are shared evenly by the partitions that can acquire (Kafka's uniform
        PartitionMaxBytesStrategy), each read returning at least one batch. Returns the records
        acquired. The first partition whose next fetch offset is only in remote storage is
        appended to `remote` (when given and empty) for `acquire_remote`; the others are
        answered empty, as Kafka's DelayedShareFetch reads one remote partition at a time."""
        total_bytes = 0
        remaining = max_records
        readable = []
        busy = self._remote_busy
        for pf, sp in targets:
            if sp.state != ACTIVE:
                continue
            if busy and (sp.group_id, pf.topic_id, sp.partition) in busy:
                continue  # a remote read of this share partition is in flight
            p = self.rm.get_partition(sp.topic, sp.partition)
            if p is not None and p.log.log_start_offset > sp.start_offset:
                sp.update_cache_and_offsets(p.log.log_start_offset)  # retention passed the start offset
            if sp.can_acquire_records():
                readable.append((pf, sp))
        if not readable:
            return 0
        per_partition = max(1, max_bytes // len(readable))
        for pf, sp in readable:
            if remaining <= 0 or total_bytes >= max_bytes:
                break
            settings = sp.settings()
            isolation = READ_COMMITTED if settings.read_committed else READ_UNCOMMITTED
            limit = min(per_partition, max_bytes - total_bytes)
            params = FetchParams(-1, -1, 0, 0, limit, isolation)
            fetch_offset = sp.next_fetch_offset()
            read = LogRead(None, fetch_offset, limit, 0, sp.topic, sp.partition, pf.topic_id)
            self.rm.read_from_log(params, [read])
            if read.error_code:
                if read.error_code == Errors.OFFSET_OUT_OF_RANGE:
                    log.info("share partition %s %s-%d: fetch offset %d out of range", sp.group_id, sp.topic,
                             sp.partition, read.fetch_offset)
                pf.error = read.error_code
                continue
            if not read.regions:
                if read.remote_fetch is not None and remote is not None and not remote:
                    remote.append(RemoteShareFetch(pf, sp, fetch_offset, read.remote_fetch))
                continue
            batches = read_batch_headers(read.regions)
            acquired = sp.acquire(member_id, [b for b, _ in batches], remaining, batch_size, mode,
                                  read.aborted if settings.read_committed else None, fetch_offset)
            if not acquired:
                continue
            pf.acquired = acquired
            lo, hi = acquired[0].first_offset, acquired[-1].last_offset
            regions = [r for b, r in batches if b.last_offset >= lo and b.base_offset <= hi]
            local = _coalesce(regions)  # type: ignore[arg-type]  # a local read: file regions only
            pf.records = local  # type: ignore[assignment]
            total_bytes += sum(r.length for r in local)
            remaining -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
        return max_records - remaining

    async def acquire_remote(self, member_id: str, rf: RemoteShareFetch, max_records: int, batch_size: int,
                             mode: int) -> int:
        """Read `rf`'s partition from remote storage on a reader thread (at most
        remote.fetch.max.wait.ms), then acquire from the bytes (Kafka's DelayedShareFetch
        completeRemoteStorageShareFetchRequest). Returns the records acquired; `rf.pf` gets them
        and their bytes, or the read's error. Nothing is acquired when the share partition moved
        on meanwhile (closed, fenced, or its next fetch offset is no longer the one read)."""
        reader = self.rm.remote_log_reader
        pf, sp = rf.pf, rf.sp
        key = (sp.group_id, pf.topic_id, sp.partition)
        if reader is None or key in self._remote_busy or max_records <= 0:
            return 0
        self._remote_busy.add(key)
        try:
            result = await self._read_remote(reader, rf)
            return self._acquire_read(member_id, rf, result, max_records, batch_size, mode)
        finally:
            self._remote_busy.discard(key)
            self._on_change((sp.topic, sp.partition))  # the parked fetches skipped it meanwhile

    async def _read_remote(self, reader: Any, rf: RemoteShareFetch) -> RemoteLogReadResult | None:
        """The remote read (a read-ahead started for it, else a new one); None when it did not
        finish within remote.fetch.max.wait.ms (it finishes on its thread, the result dropped)."""
        info = rf.info
        result: RemoteLogReadResult | None = None
        with trio.move_on_after(max(0, int(self.config["remote.fetch.max.wait.ms"])) / 1000):
            ahead = reader.claim_read_ahead(info)
            if ahead is not None:
                await ahead.done.wait()
                result = ahead.result if ahead.result is not None and ahead.result.error is None else None
            if result is None:
                result = await reader.read_async(info)
                reader.record(info.tp.topic, result)  # RemoteFetch{Requests,Bytes,Errors}PerSec
        if result is None:
            self.rm.remote_fetch_expired += 1  # Kafka's DelayedRemoteFetchMetrics ExpiresPerSec
            return None
        p = self.rm.get_partition(rf.sp.topic, rf.sp.partition)
        if (result.error is None and result.next_offset >= 0 and p is not None
                and p.is_remote_offset(result.next_offset)):
            # the next fetch of this share partition most likely asks for what follows
            reader.start_read_ahead(replace(info, fetch_offset=result.next_offset), self.rm.spawn)
        return result

    def _acquire_read(self, member_id: str, rf: RemoteShareFetch, result: RemoteLogReadResult | None,
                      max_records: int, batch_size: int, mode: int) -> int:
        pf, sp = rf.pf, rf.sp
        if result is None:
            return 0  # not in time: empty, without an error; the client asks again
        if result.error is not None:
            pf.error = read_error_code(result.error)
            return 0
        if (sp.state != ACTIVE or self.partitions.get((sp.group_id, pf.topic_id, sp.partition)) is not sp
                or sp.next_fetch_offset() != rf.fetch_offset or not result.records):
            return 0
        p = self.rm.get_partition(sp.topic, sp.partition)
        settings = sp.settings()
        aborted = None
        if settings.read_committed:
            found = {(a.producer_id, a.first_offset) for a in result.aborted or ()}
            if result.local_txn_range is not None and p is not None:
                start, upper = result.local_txn_range
                found.update((a.producer_id, a.first_offset) for a in p.log.txn_index.collect(start, upper))
            aborted = sorted(found, key=lambda a: a[1])
        chunk = memoryview(result.records)
        batches = bytes_batch_headers(chunk)
        acquired = sp.acquire(member_id, [b for b, _, _ in batches], max_records, batch_size, mode, aborted,
                              rf.fetch_offset)
        if not acquired:
            return 0
        pf.acquired = acquired
        lo, hi = acquired[0].first_offset, acquired[-1].last_offset
        covering = [(start, stop) for b, start, stop in batches if b.last_offset >= lo and b.base_offset <= hi]
        pf.records = [chunk[covering[0][0]:covering[-1][1]]]  # contiguous batches of one read: one slice
        return sum(a.last_offset - a.first_offset + 1 for a in acquired)

    def delayed(self, targets: list[tuple[PartitionFetch, SharePartition]], max_wait_ms: int,
                attempt: Callable[[], int], remote_wanted: Callable[[], bool] = lambda: False
                ) -> DelayedShareFetch | None:
        """Park a fetch that acquired nothing (None: it may answer now); `attempt` acquires for
        it and returns how many records it got; `remote_wanted` says whether its last attempt
        found a partition to read from remote storage (it then completes, for its handler to
        read it)."""
        if max_wait_ms <= 0 or not targets:
            return None
        op = DelayedShareFetch(max_wait_ms, lambda: self.acquirable(targets), attempt, remote_wanted)
        keys = {(sp.topic, sp.partition) for _, sp in targets}
        if self.rm.fetch_purgatory.try_complete_else_watch(op, keys):
            return None
        return op

    # ------------------------------------------------------------------ sessions

    def release_session(self, session: ShareSession) -> None:
        """A session closed or was replaced: release its member's acquired records in its
        partitions at once (in the background)."""
        group_id, member_id = session.key
        for topic_id, partition in list(session.partitions):
            key = (group_id, topic_id, partition)
            sp = self.partitions.get(key)
            if sp is not None and sp.state == ACTIVE:
                self.nursery.start_soon(self._release, key, sp, member_id)

    async def _release(self, key: SPKey, sp: SharePartition, member_id: str) -> None:
        try:
            code = await sp.release_acquired_records(member_id)
        except Exception:  # a background task of the broker's nursery: never let it take the node down
            log.exception("share partition %s %s-%d: releasing member %s's records failed", sp.group_id, sp.topic,
                          sp.partition, member_id)
            return
        if code:
            log.info("share partition %s %s-%d: releasing member %s's records failed: error %d", sp.group_id,
                     sp.topic, sp.partition, member_id, code)
            return
        # the last session of the group in this partition is gone: the share partition leaves the
        # cache (Kafka's ShareGroupListener.onGroupEmpty), so the next fetch loads the state the
        # share coordinator holds, which an admin may have changed meanwhile (AlterShareGroupOffsets
        # and DeleteShareGroupOffsets need an empty group); everything it had is persisted
        group_id, topic_id, partition = key
        if self.partitions.get(key) is sp and not any(
                s.key[0] == group_id and (topic_id, partition) in s.partitions for s in self.sessions.sessions.values()):
            self._drop(key, sp)

    def connection_closed(self, connection: object) -> None:
        for s in self.sessions.connection_closed(connection):
            self.release_session(s)

    def shutdown(self) -> None:
        for sp in self.partitions.values():
            sp.close()
        self.partitions.clear()


def _coalesce(regions: list[FileRegion]) -> list[FileRegion]:
    out: list[FileRegion] = []
    for r in regions:
        if out and out[-1].fd == r.fd and out[-1].position + out[-1].length == r.position:
            prev = out.pop()
            out.append(FileRegion(prev.fd, prev.position, prev.length + r.length))
        else:
            out.append(r)
    return out
