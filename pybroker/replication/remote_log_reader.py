"""Reading a partition's records back from remote storage (Kafka's RemoteLogManager.read,
findOffsetByTimestamp and RemoteLogReader, with its fetch quota, RLMQuotaManager).

Concurrency first: `read` and `find_offset_by_timestamp` block (the remote storage manager and
the index cache do network and disk I/O); the event loop calls them through `read_async` /
`find_offset_by_timestamp_async`, which run them on worker threads, at most
`remote.log.reader.threads` at once (a trio CapacityLimiter: Kafka's reader thread pool), with
at most `remote.log.reader.max.pending.tasks` waiting for a thread (more: Kafka's
RejectedExecutionException, the caller answers an error). The partition's leader epochs are
snapshotted on the event loop (`RemoteStorageFetchInfo.epochs`), so a worker thread never
reads the live log. The quota and the counters are guarded by a lock.

A read (Kafka's RemoteLogManager.read), for a consumer's fetch offset in
[log start offset, local log start offset) of a tiered partition:
1. the leader epoch of the offset from the epoch snapshot (Kafka's epochForOffset), then the
   COPY_SEGMENT_FINISHED segment holding it from the RemoteLogMetadataManager; none is
   OFFSET_OUT_OF_RANGE (Kafka's OffsetOutOfRangeException);
2. the position to start from: the remote offset index's entry at or below the offset
   (RemoteIndexCache), or, when the previous read of this segment ended exactly there, that
   position (a consumer reading on reads sequentially);
3. the segment's bytes from there through the RSM (`fetch_log_segment`, a byte range), in
   windows of the bytes wanted plus some slack, skipping the batches that end below the fetch
   offset; a segment that has none (a compacted one) moves on to the next remote segment;
4. whole batches up to `min(fetch max bytes, partition max bytes)`, the first one whole even
   when larger (minOneMessage), or nothing for a later partition of the response whose first
   batch does not fit (Fetch v3+; v0-2's hard limit gets the cut batch, as locally);
5. read_committed: the aborted transactions overlapping what is returned, from this segment's
   remote transaction index and the next remote segments' until one's entries pass the end
   of what is returned (Kafka's collectAbortedTransactions); when the remote ones do not
   settle it, `local_txn_range` asks the caller (on the event loop) to add the local log's.

**Deliberate difference:** as locally (Partition.read_records), a read cut by the byte limit
ends at the last whole batch, where Kafka's ends with a cut batch the client drops.

Quota (remote.log.manager.fetch.max.bytes.per.second, Kafka's RLMQuotaManager with a
SimpleRate over remote.log.manager.fetch.quota.window.num windows of
remote.log.manager.fetch.quota.window.size.seconds): every read's bytes are recorded; while the
rate is over the quota `throttle_time_ms` is positive and the replica manager schedules no
remote read (the partition is answered empty, without an error, as Kafka's does).

Errors: OffsetOutOfRangeError (-> OFFSET_OUT_OF_RANGE), RemoteStorageError (the store failed:
the fetch's partition gets UNKNOWN_SERVER_ERROR, Kafka's answer to a RemoteStorageException).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from pybroker._native import records as _records
from pybroker.config import BrokerConfig
from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.log.fetch_data_info import TimestampAndOffset
from pybroker.log.remote.remote_log_metadata_manager import RemoteLogMetadataManager
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from pybroker.log.remote.remote_storage_manager import RemoteStorageError, RemoteStorageManager
from pybroker.log.txn_index import AbortedTxn
from pybroker.metrics.stats import SimpleRate
from pybroker.records.batch import (
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_TIMESTAMP,
    H_LAST_OFFSET_DELTA,
    H_LEADER_EPOCH,
    H_MAX_TIMESTAMP,
    H_RECORDS_COUNT,
    TIMESTAMP_TYPE_MASK,
    records_section,
)
from pybroker.replication.remote_index_cache import RemoteIndexCache, collect_aborted_txns

log = logging.getLogger("pybroker.remote.reader")

LOG_OVERHEAD = _records.LOG_OVERHEAD
_SLACK_BYTES = 16 * 1024  # read past the wanted bytes: the index entry lies before the batch
_MIN_WINDOW = 64 * 1024  # the smallest range asked of the store (a round trip costs more than bytes)
_SEQUENTIAL_HINTS = 4096  # (segment, next offset) -> position remembered from previous reads

# Kafka's RemoteLogManagerConfig defaults
DEFAULT_READER_THREADS = 10
DEFAULT_READER_MAX_PENDING_TASKS = 100
DEFAULT_FETCH_MAX_BYTES_PER_SECOND = 2**63 - 1
DEFAULT_FETCH_QUOTA_WINDOW_NUM = 11
DEFAULT_FETCH_QUOTA_WINDOW_SIZE_SECONDS = 1

Epochs = Sequence[tuple[int, int]]  # (leader epoch, start offset), ascending


def epoch_for_offset(epochs: Epochs, offset: int) -> int | None:
    """The epoch of the latest entry starting at or below `offset` (Kafka's epochForOffset)."""
    found = None
    for epoch, start in epochs:
        if start > offset:
            break
        found = epoch
    return found


def next_epoch(epochs: Epochs, epoch: int) -> int | None:
    """The epoch after `epoch` in the cache (Kafka's nextEpoch)."""
    for e, _ in epochs:
        if e > epoch:
            return e
    return None


def record_timestamps(batch: bytes) -> list[tuple[int, int]]:
    """(timestamp, offset) of each record of one batch (LogAppendTime: the batch's max
    timestamp; a batch that cannot be decoded answers at batch granularity, as the local
    log's search does)."""
    header = _records.read_batch_header(batch, 0)
    base = header[H_BASE_OFFSET]
    if header[H_ATTRIBUTES] & TIMESTAMP_TYPE_MASK:
        return [(header[H_MAX_TIMESTAMP], base + d) for d in range(header[H_LAST_OFFSET_DELTA] + 1)]
    try:
        if header[H_ATTRIBUTES] & CODEC_MASK:
            section = records_section(batch)
            decoded = _records.decode_records(section, 0, len(section), header[H_RECORDS_COUNT])
        else:
            decoded = _records.decode_records(batch, BATCH_HEADER_SIZE, len(batch), header[H_RECORDS_COUNT])
    except Exception:  # a codec error must not fail ListOffsets
        return [(header[H_MAX_TIMESTAMP], base)]
    return [(header[H_BASE_TIMESTAMP] + r[1], base + r[2]) for r in decoded]


_READ_AHEAD_ENTRIES = 64  # read-aheads kept waiting for their fetch (each at most one read's bytes)
_READ_AHEAD_MAX_BYTES = 8 * 1024 * 1024


def _ahead_key(info: RemoteStorageFetchInfo) -> tuple[object, ...]:
    return (info.tp, info.fetch_offset, info.max_bytes, info.fetch_max_bytes, info.min_one_message,
            info.hard_max_bytes_limit, info.read_committed)


class _ReadAhead:
    """A read started ahead of its fetch: `done` is set once `result` is there (None: failed)."""

    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: RemoteLogReadResult | None = None


class RemoteLogReaderRejected(RemoteStorageError):
    """Kafka's RejectedExecutionException: too many remote reads are waiting for a thread."""


@dataclass(slots=True)
class RemoteStorageFetchInfo:
    """One partition's remote read (Kafka's RemoteStorageFetchInfo): `fetch_max_bytes` is what
    is left of the request's bytes, `max_bytes` the partition's; `epochs` the leader epoch
    cache as the fetch found it."""

    tp: TopicIdPartition
    fetch_offset: int
    max_bytes: int
    fetch_max_bytes: int
    min_one_message: bool
    hard_max_bytes_limit: bool
    read_committed: bool
    epochs: tuple[tuple[int, int], ...]


@dataclass(slots=True)
class RemoteLogReadResult:
    """What a read found (Kafka's RemoteLogReadResult + FetchDataInfo): `records` whole batches
    (may be empty); `aborted` the aborted transactions (read_committed only); when
    `local_txn_range` is set the remote transaction indexes did not settle them and the
    caller adds the local log's in [start, upper)."""

    records: bytes | memoryview = b""  # a view of the bytes the store returned: no copy
    aborted: list[AbortedTxn] | None = None
    local_txn_range: tuple[int, int] | None = None
    segment: RemoteLogSegmentMetadata | None = None
    error: BaseException | None = None
    next_offset: int = -1  # the offset after the last record returned (-1: none returned)


@dataclass(slots=True)
class _Window:
    """Bytes of one remote segment from `start` (a position in it)."""

    metadata: RemoteLogSegmentMetadata
    start: int
    data: bytes | bytearray = b""  # the store's bytes as returned; a bytearray once extended

    @property
    def end(self) -> int:
        return self.start + len(self.data)


class RemoteFetchQuota:
    """Kafka's RLMQuotaManager for fetches: bytes per second over sampled windows."""

    def __init__(self, bytes_per_second: int, num_windows: int = DEFAULT_FETCH_QUOTA_WINDOW_NUM,
                 window_seconds: int = DEFAULT_FETCH_QUOTA_WINDOW_SIZE_SECONDS) -> None:
        self.bytes_per_second = bytes_per_second
        self._rate = SimpleRate(num_windows, window_seconds * 1000)
        self._lock = threading.Lock()

    def record(self, value: int, now_ms: int | None = None) -> None:
        with self._lock:
            self._rate.record(value, now_ms if now_ms is not None else _monotonic_ms())

    def throttle_time_ms(self, now_ms: int | None = None) -> int:
        """0 while within the quota; else how long until the rate is back at it (Kafka's
        QuotaUtils.throttleTime: (rate - quota) / quota * window)."""
        if self.bytes_per_second >= DEFAULT_FETCH_MAX_BYTES_PER_SECOND:
            return 0
        now = now_ms if now_ms is not None else _monotonic_ms()
        with self._lock:
            rate = self._rate.measure(now)
            if rate <= self.bytes_per_second:
                return 0
            window_ms = self._rate.window_size(now)
        return max(1, int((rate - self.bytes_per_second) / self.bytes_per_second * window_ms))


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class RemoteLogReader:
    """See the module docstring."""

    def __init__(self, rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, index_cache: RemoteIndexCache,
                 reader_threads: int = DEFAULT_READER_THREADS,
                 max_pending_tasks: int = DEFAULT_READER_MAX_PENDING_TASKS,
                 quota: RemoteFetchQuota | None = None) -> None:
        self.rsm = rsm
        self.rlmm = rlmm
        self.index_cache = index_cache
        self.limiter = trio.CapacityLimiter(max(1, reader_threads))
        self.max_pending_tasks = max_pending_tasks
        self.quota = quota if quota is not None else RemoteFetchQuota(DEFAULT_FETCH_MAX_BYTES_PER_SECOND)
        self._pending = 0  # event loop only
        self._lock = threading.Lock()
        self._hints: OrderedDict[tuple[bytes, int], int] = OrderedDict()
        # totals of the reads (any thread, under the lock)
        self.fetch_bytes = 0
        self.fetch_requests = 0
        self.fetch_errors = 0
        # Kafka's BrokerTopicMetrics RemoteFetchRequestsPerSec, RemoteFetchBytesPerSec,
        # RemoteFetchErrorsPerSec per topic: [requests, bytes, errors] (event loop only, `record`)
        self.topic_meters: dict[str, list[int]] = {}
        # read-ahead (event loop only): the next read of a consumer reading on, started when its
        # previous one finished, by what it will ask (`_ahead_key`)
        self._ahead: OrderedDict[tuple[object, ...], _ReadAhead] = OrderedDict()
        self.read_ahead_hits = 0

    # ------------------------------------------------------------------ the event loop's side

    async def _run(self, fn: Callable[..., RemoteLogReadResult | TimestampAndOffset | None],
                   *args: object) -> RemoteLogReadResult | TimestampAndOffset | None:
        if self._pending >= self.max_pending_tasks + self.limiter.total_tokens:
            raise RemoteLogReaderRejected("too many remote log reads are waiting "
                                          f"(remote.log.reader.max.pending.tasks {self.max_pending_tasks})")
        self._pending += 1
        try:
            return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter, abandon_on_cancel=True)
        finally:
            self._pending -= 1

    def record(self, topic: str, result: RemoteLogReadResult) -> None:
        """Count a finished read in the topic's meters (event loop; an offset the remote tier
        does not hold is not a failed read, as in Kafka's RemoteLogReader)."""
        meters = self.topic_meters.get(topic)
        if meters is None:
            meters = self.topic_meters[topic] = [0, 0, 0]
        meters[0] += 1
        meters[1] += len(result.records)
        if result.error is not None and not isinstance(result.error, OffsetOutOfRangeError):
            meters[2] += 1

    def claim_read_ahead(self, info: RemoteStorageFetchInfo) -> _ReadAhead | None:
        """The read-ahead started for exactly this read, if any (taken out of the map)."""
        ahead = self._ahead.pop(_ahead_key(info), None)
        if ahead is not None:
            self.read_ahead_hits += 1
        return ahead

    def start_read_ahead(self, info: RemoteStorageFetchInfo, spawn: Callable[..., object]) -> None:
        """Read `info` now, on a reader thread, for the fetch that will ask it next (a consumer
        reading on asks for the offset after what it got, with the same limits): the store's
        round trip then overlaps the client's. At most `_READ_AHEAD_ENTRIES` wait (the oldest
        go); none while the fetch quota is exceeded or for reads larger than
        `_READ_AHEAD_MAX_BYTES`."""
        key = _ahead_key(info)
        if key in self._ahead or min(info.max_bytes, info.fetch_max_bytes) > _READ_AHEAD_MAX_BYTES \
                or self.quota.throttle_time_ms() > 0:
            return
        ahead = self._ahead[key] = _ReadAhead()
        while len(self._ahead) > _READ_AHEAD_ENTRIES:
            self._ahead.popitem(last=False)
        spawn(self._read_ahead, info, ahead)

    async def _read_ahead(self, info: RemoteStorageFetchInfo, ahead: _ReadAhead) -> None:
        try:
            ahead.result = await self.read_async(info)
            self.record(info.tp.topic, ahead.result)
        finally:
            ahead.done.set()

    async def read_async(self, info: RemoteStorageFetchInfo) -> RemoteLogReadResult:
        """`read` on a reader thread; the error, if any, is in the result (Kafka's RemoteLogReader)."""
        try:
            result = await self._run(self.read, info)
        except RemoteLogReaderRejected as exc:
            return RemoteLogReadResult(error=exc)
        assert isinstance(result, RemoteLogReadResult)
        return result

    async def find_offset_by_timestamp_async(self, tp: TopicIdPartition, timestamp: int, starting_offset: int,
                                             epochs: Epochs, local_start_offset: int) -> TimestampAndOffset | None:
        result = await self._run(self.find_offset_by_timestamp, tp, timestamp, starting_offset, tuple(epochs),
                                 local_start_offset)
        assert result is None or isinstance(result, TimestampAndOffset)
        return result

    # ------------------------------------------------------------------ reads (worker threads)

    def read(self, info: RemoteStorageFetchInfo) -> RemoteLogReadResult:
        """Kafka's RemoteLogReader.call around RemoteLogManager.read: never raises."""
        with self._lock:
            self.fetch_requests += 1
        try:
            result = self._read(info)
        except OffsetOutOfRangeError as exc:
            return RemoteLogReadResult(error=exc)
        except Exception as exc:  # the store failed (or a bug): this partition's fetch gets an error
            with self._lock:
                self.fetch_errors += 1
            log.error("reading %s at offset %d from remote storage failed: %s", info.tp, info.fetch_offset, exc)
            return RemoteLogReadResult(error=exc)
        size = len(result.records)
        with self._lock:
            self.fetch_bytes += size
        self.quota.record(size)
        return result

    def segment_for(self, tp: TopicIdPartition, epochs: Epochs, offset: int) -> RemoteLogSegmentMetadata | None:
        """The finished remote segment holding `offset`: through the epoch of the offset, as
        Kafka's fetchRemoteLogSegmentMetadata. **Difference:** when the epoch cache does not
        place the offset (a cache trimmed by an older local retention), the segments listed
        for the partition are searched, so the bytes are still found."""
        epoch = epoch_for_offset(epochs, offset)
        if epoch is not None:
            found = self.rlmm.remote_log_segment_metadata(tp, epoch, offset)
            if found is not None:
                return found
        if epoch is None or not epochs:
            for md in self.rlmm.list_remote_log_segments(tp):
                if (md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                        and md.start_offset <= offset <= md.end_offset):
                    return md
        return None

    def _read(self, info: RemoteStorageFetchInfo) -> RemoteLogReadResult:
        offset = info.fetch_offset
        max_bytes = min(info.fetch_max_bytes, info.max_bytes)
        md = self.segment_for(info.tp, info.epochs, offset)
        if md is None:
            epoch = epoch_for_offset(info.epochs, offset)
            raise OffsetOutOfRangeError(
                f"Received request for offset {offset} for leader epoch "
                f"{epoch if epoch is not None else 'NOT AVAILABLE'} and partition {info.tp} which does not "
                "exist in remote tier.")
        found = None
        while found is None:
            found = self._first_batch(md, offset, max_bytes)
            if found is None:  # nothing at or past the offset here (compaction): the next segment
                nxt = self.segment_for(info.tp, info.epochs, md.end_offset + 1)
                if nxt is None or nxt.start_offset <= md.start_offset:
                    return RemoteLogReadResult(aborted=[] if info.read_committed else None, segment=md)
                md = nxt
        window, first, first_size = found
        if first_size > max_bytes and not info.min_one_message:
            if not info.hard_max_bytes_limit:
                return RemoteLogReadResult(aborted=[] if info.read_committed else None, segment=md)
            cut = memoryview(window.data)[first:first + max_bytes]  # Fetch v0-2: the cut batch
            return RemoteLogReadResult(cut, [] if info.read_committed else None, segment=md)
        limit = max(max_bytes, first_size)
        end, last_offset = self._whole_batches(window, first, limit)
        data = memoryview(window.data)[first:end]
        first_base = int.from_bytes(window.data[first:first + 8], "big", signed=True)
        self._hint(md, last_offset + 1, window.start + end)
        result = RemoteLogReadResult(data, segment=md, next_offset=last_offset + 1)
        if info.read_committed:
            self._aborted(info, md, first_base, last_offset + 1, result)
        return result

    def _fetch(self, window: _Window, want: int) -> bool:
        """Append up to `want` more bytes of the segment to `window`; False at its end."""
        size = window.metadata.segment_size_in_bytes
        if window.end >= size:
            return False
        want = max(want, _MIN_WINDOW)
        last = min(size, window.end + want) - 1
        data = self.rsm.fetch_log_segment(window.metadata, window.end, last)
        if not data:
            return False
        if not window.data:
            window.data = data
        else:
            if not isinstance(window.data, bytearray):
                window.data = bytearray(window.data)
            window.data += data
        return True

    def _first_batch(self, md: RemoteLogSegmentMetadata, offset: int,
                     max_bytes: int) -> tuple[_Window, int, int] | None:
        """The window holding the whole first batch that ends at or past `offset`, its index in
        the window and its size; None when the segment has none (Kafka's findFirstBatch)."""
        with self._lock:
            hinted = self._hints.pop((md.remote_log_segment_id.id, offset), None)
        position = hinted if hinted is not None else self.index_cache.lookup_offset(md, offset)
        window = _Window(md, position)
        pos = 0
        self._fetch(window, max_bytes + _SLACK_BYTES)
        while True:
            entries, valid_end, _err = _records.scan_batches(window.data, pos, -1, False)
            for at, base, last_delta, _ts, size in entries:
                if base + last_delta >= offset:
                    return window, at, size
                pos = at + size
            pos = max(pos, valid_end)
            need = max_bytes + _SLACK_BYTES
            if len(window.data) - pos >= LOG_OVERHEAD:  # a cut batch: at least the rest of it
                length = int.from_bytes(window.data[pos + 8:pos + 12], "big", signed=True)
                if length <= 0:
                    return None  # not a batch: the segment's data ends here
                need = max(need, pos + LOG_OVERHEAD + length - len(window.data))
            # forget what was skipped, so a long skip does not hold the segment in memory
            if pos:
                window.data = window.data[pos:]
                window.start += pos
                pos = 0
            if not self._fetch(window, need):
                return None

    def _whole_batches(self, window: _Window, first: int, limit: int) -> tuple[int, int]:
        """(end index in the window, last offset) of the whole batches from `first` within
        `limit` bytes (the first always), reading more of the segment when the window ends
        before the limit does."""
        pos = first
        last_offset = -1
        while True:
            entries, valid_end, _err = _records.scan_batches(window.data, pos, -1, False)
            for at, base, last_delta, _ts, size in entries:
                if at + size - first > limit:
                    return pos, last_offset
                pos = at + size
                last_offset = base + last_delta
            if valid_end > pos or pos - first >= limit:  # a batch the scan rejected, or full
                return pos, last_offset
            # the window ends inside the next batch: its header says whether it fits, so a batch
            # past the limit is never read only to be dropped
            need = limit - (pos - first)
            if len(window.data) - pos >= LOG_OVERHEAD:
                length = int.from_bytes(window.data[pos + 8:pos + 12], "big", signed=True)
                if length <= 0 or pos + LOG_OVERHEAD + length - first > limit:
                    return pos, last_offset
                need = pos + LOG_OVERHEAD + length - len(window.data)
            if not self._fetch(window, need):
                return pos, last_offset

    def _hint(self, md: RemoteLogSegmentMetadata, next_offset: int, position: int) -> None:
        if next_offset > md.end_offset:
            return
        with self._lock:
            self._hints[(md.remote_log_segment_id.id, next_offset)] = position
            while len(self._hints) > _SEQUENTIAL_HINTS:
                self._hints.popitem(last=False)

    def _aborted(self, info: RemoteStorageFetchInfo, md: RemoteLogSegmentMetadata, start: int, upper: int,
                 result: RemoteLogReadResult) -> None:
        """Kafka's addAbortedTransactions / collectAbortedTransactions over the remote segments
        from `md` on; the local log's part is left to the caller (`local_txn_range`)."""
        found: dict[tuple[int, int], AbortedTxn] = {}
        segment: RemoteLogSegmentMetadata | None = md
        while segment is not None:
            entries = self.index_cache.get_index_entry(segment).txn_entries
            matched, complete = collect_aborted_txns(entries, start, upper)
            for e in matched:
                found[(e.producer_id, e.first_offset)] = e
            if complete:
                result.aborted = list(found.values())
                return
            nxt = self.segment_for(info.tp, info.epochs, segment.end_offset + 1)
            segment = nxt if nxt is not None and nxt.start_offset > segment.start_offset else None
        result.aborted = list(found.values())
        result.local_txn_range = (start, upper)

    # ------------------------------------------------------------------ ListOffsets by timestamp

    def find_offset_by_timestamp(self, tp: TopicIdPartition, timestamp: int, starting_offset: int,
                                 epochs: Epochs, local_start_offset: int) -> TimestampAndOffset | None:
        """Kafka's findOffsetByTimestamp, remote part: the first record at or after `timestamp`
        and `starting_offset` in a finished remote segment that lies below the local log
        (`local_start_offset`), searched epoch by epoch from the epoch of the starting offset;
        None when the remote segments below the local log do not have one (the caller then
        searches the local log). Raises RemoteStorageError."""
        epoch = epoch_for_offset(epochs, starting_offset)
        if epoch is None and epochs:
            epoch = epochs[0][0]
        seen: set[bytes] = set()
        while epoch is not None:
            for md in self.rlmm.list_remote_log_segments(tp, epoch):
                if md.remote_log_segment_id.id in seen:
                    continue
                seen.add(md.remote_log_segment_id.id)
                if (md.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED and md.max_timestamp_ms >= timestamp
                        and md.end_offset >= starting_offset):
                    if md.start_offset >= local_start_offset:
                        return None  # the local log has this segment: searched there
                    found = self._lookup_timestamp(md, timestamp, starting_offset)
                    if found is not None:
                        return found
            epoch = next_epoch(epochs, epoch)
        return None

    def _lookup_timestamp(self, md: RemoteLogSegmentMetadata, timestamp: int,
                          starting_offset: int) -> TimestampAndOffset | None:
        """Kafka's lookupTimestamp: from the time index's position, the first record with a
        timestamp at or past `timestamp` and an offset at or past `starting_offset`."""
        position = self.index_cache.lookup_timestamp(md, timestamp, starting_offset)
        window = _Window(md, position)
        pos = 0
        while self._fetch(window, _MIN_WINDOW * 4):
            entries, valid_end, _err = _records.scan_batches(window.data, pos, -1, False)
            for at, base, last_delta, max_ts, size in entries:
                if max_ts >= timestamp and base + last_delta >= starting_offset:
                    batch = bytes(window.data[at:at + size])
                    epoch = _records.read_batch_header(batch, 0)[H_LEADER_EPOCH]
                    for record_ts, record_offset in record_timestamps(batch):
                        if record_ts >= timestamp and record_offset >= starting_offset:
                            return TimestampAndOffset(record_ts, record_offset, epoch if epoch >= 0 else None)
                pos = at + size
            if valid_end > pos:
                return None
            window.data = window.data[pos:]
            window.start += pos
            pos = 0
        return None


def remote_log_reader(config: BrokerConfig, rsm: RemoteStorageManager,
                      rlmm: RemoteLogMetadataManager) -> RemoteLogReader:
    """A node's reader from its broker config (Kafka's RemoteLogManager constructor): the index
    cache under the first log dir (remote.log.index.file.cache.total.size.bytes),
    remote.log.reader.threads and .max.pending.tasks, and the fetch quota
    (remote.log.manager.fetch.max.bytes.per.second over .fetch.quota.window.num windows of
    .fetch.quota.window.size.seconds)."""
    cache = RemoteIndexCache(config["remote.log.index.file.cache.total.size.bytes"], rsm, config.log_dirs[0])
    quota = RemoteFetchQuota(config["remote.log.manager.fetch.max.bytes.per.second"],
                             config["remote.log.manager.fetch.quota.window.num"],
                             config["remote.log.manager.fetch.quota.window.size.seconds"])
    return RemoteLogReader(rsm, rlmm, cache, config["remote.log.reader.threads"],
                           config["remote.log.reader.max.pending.tasks"], quota)


# (index in RemoteLogReader.topic_meters' lists, Kafka's meter name), in export order
REMOTE_FETCH_METERS: tuple[tuple[int, str], ...] = ((0, "RemoteFetchRequestsPerSec"), (1, "RemoteFetchBytesPerSec"),
                                                    (2, "RemoteFetchErrorsPerSec"))

__all__ = ["REMOTE_FETCH_METERS", "RemoteFetchQuota", "RemoteLogReadResult", "RemoteLogReader",
           "RemoteLogReaderRejected", "RemoteStorageFetchInfo", "epoch_for_offset", "next_epoch",
           "remote_log_reader"]
