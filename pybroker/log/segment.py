"""One segment of a partition log (Kafka's LogSegment): a .log file plus its two indexes.

Files, named by the segment's base offset (the first offset it may hold) in 20 digits:
`00000000000000001500.log` (record batches back to back, exactly as received, with offsets
assigned), `.index` (OffsetIndex), `.timeindex` (TimeIndex). Aborted transactions are kept per
log, not per segment (txn_index.py), so no `<offset>.txnindex` is written. The suffixes of
every segment file state (Kafka's LogFileUtils) are defined here: `.cleaned` (being written by
the cleaner), `.swap` (cleaned, about to replace its inputs), `.deleted` (detached, removed
after file.delete.delay.ms).

Append path: `append()` pwrites to the page cache at the end of the file (no fsync) and adds
index entries every index.interval.bytes. Durability is `flush()`'s job (fsync of the log and
msync of the indexes), which the partition log schedules off the event loop.

Reads: `read()` finds the first batch whose last offset >= the target via the offset index and a
forward scan of batch headers (61 bytes each, read in 64 KiB blocks), and returns file regions.

Recovery: `recover()` re-walks the file with the compiled `recovery.recover_segment` (CRC
checked, no GIL), rewrites both indexes exactly as the append path would have written them,
truncates the first torn or corrupt batch and everything after it, and returns the number of
bytes removed.

Concurrency: append/truncate/roll are called only from the partition's append path (the event
loop thread). Reads run on the same thread. `flush()` may run in a worker thread concurrently
with appends; `_lock` orders it against `close()`/`delete()` so an fsync never hits a closed fd.
A follower's truncation may leave the file's cut to a worker thread (`truncate_to(...,
defer_ftruncate=True)`, then `complete_truncation()`): the segment's size and indexes change at
once, every read is bounded by them, so the bytes past the cut are never read; an append, a
roll (`on_become_inactive`) or a close completes a cut still pending first, on the calling
thread, so nothing is written past the cut before it is made or left behind on disk.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pybroker._native import records, recovery
from pybroker._native.errors import RecordError
from pybroker.log.errors import IndexOffsetError
from pybroker.log.fetch_data_info import FetchDataInfo, TimestampAndOffset
from pybroker.log.offset_index import OffsetIndex
from pybroker.log.time_index import TimeIndex
from pybroker.protocol.chunks import FileRegion
from pybroker.records.batch import (
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_TIMESTAMP,
    H_BATCH_LENGTH,
    H_LAST_OFFSET_DELTA,
    H_LEADER_EPOCH,
    H_MAX_TIMESTAMP,
    H_RECORDS_COUNT,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    records_section,
)

if TYPE_CHECKING:
    from pybroker.log.leader_epoch_cache import LeaderEpochFileCache

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
DELETED_FILE_SUFFIX = ".deleted"

_READ_BLOCK = 64 * 1024
_MAP_AT_LEAST = 1024 * 1024  # recovery reads smaller .log ranges, maps larger ones
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_RECENT_BATCHES = 128
_MIN_BATCH_SIZE = 49 + LOG_OVERHEAD


def filename_prefix(offset: int) -> str:
    """Kafka's 20-digit zero-padded file name prefix."""
    return f"{offset:020d}"


def log_file(dir: Path, base_offset: int, suffix: str = "") -> Path:
    return dir / (filename_prefix(base_offset) + LOG_FILE_SUFFIX + suffix)


def offset_index_file(dir: Path, base_offset: int, suffix: str = "") -> Path:
    return dir / (filename_prefix(base_offset) + INDEX_FILE_SUFFIX + suffix)


def time_index_file(dir: Path, base_offset: int, suffix: str = "") -> Path:
    return dir / (filename_prefix(base_offset) + TIME_INDEX_FILE_SUFFIX + suffix)


class LogSegment:
    def __init__(self, dir: str | os.PathLike[str], base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10 * 1024 * 1024, roll_jitter_ms: int = 0, now_ms: int = 0,
                 file_suffix: str = "") -> None:
        """file_suffix names the files `<base>.log<suffix>` etc.: the cleaner writes `.cleaned`
        segments and renames them with `change_file_suffixes`."""
        self.dir = Path(dir)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = now_ms
        self._lock = threading.Lock()
        self.log_path = log_file(self.dir, base_offset, file_suffix)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(offset_index_file(self.dir, base_offset, file_suffix), base_offset,
                                        max_index_size)
        self.time_index = TimeIndex(time_index_file(self.dir, base_offset, file_suffix), base_offset,
                                    max_index_size)
        self._bytes_since_last_index_entry = 0
        # base offset -> (position, size) of the most recently appended batches: a consumer at
        # the tail fetches exactly at the next batch's base offset, so its read needs neither
        # the index nor a header scan. Cleared whenever the file is cut.
        self._recent: dict[int, tuple[int, int]] = {}
        self._max_ts_and_offset: tuple[int, int] | None = None  # None: not read from the time index yet
        self._rolling_based_timestamp: int | None = None
        self._closed = False
        # a cut of the file left to a worker thread (truncate_to(defer_ftruncate=True)): the file
        # position to ftruncate at, None when the file ends at `_size`
        self._pending_truncate: int | None = None
        self.recovery_error: str | None = None  # why the last recover() cut the file
        # True once recover() found no batch with a producer id: the producer state has
        # nothing to replay in this segment (appends clear it)
        self.producer_free = False

    # -- basic properties ------------------------------------------------------------------
    @property
    def fd(self) -> int:
        return self._fd

    @property
    def size(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size})"

    @property
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(largest batch max timestamp so far, last offset of that batch); (-1, base) if none."""
        if self._max_ts_and_offset is None:
            self._max_ts_and_offset = self.time_index.last_entry
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset[0]

    def last_modified_ms(self) -> int:
        return int(os.fstat(self._fd).st_mtime * 1000)

    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime when no batch carries one (retention)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms()

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return self.offset_index.can_append_offset(offset)

    # -- append ----------------------------------------------------------------------------
    def append(self, largest_offset: int, largest_timestamp: int, offset_of_max_timestamp: int,
               records_buf: bytes | bytearray | memoryview) -> None:
        """Write batches (offsets already assigned) at the end of the file; page cache only."""
        n = len(records_buf)
        if n == 0:
            return
        if self._pending_truncate is not None:
            self.complete_truncation()  # the cut first, or it would drop what is written now
        physical_position = self._size
        if physical_position == 0:
            self._rolling_based_timestamp = largest_timestamp
        if not self.can_convert_to_relative_offset(largest_offset):
            raise IndexOffsetError(f"offset {largest_offset} overflows segment {self.base_offset}")
        view = memoryview(records_buf).cast("B")
        written = 0
        while written < n:
            written += os.pwrite(self._fd, view[written:], physical_position + written)
        self._size = physical_position + n
        self.producer_free = False
        if n >= BATCH_HEADER_SIZE and int.from_bytes(view[8:12], "big") + LOG_OVERHEAD == n:
            recent = self._recent
            recent[int.from_bytes(view[0:8], "big")] = (physical_position, n)
            if len(recent) > _RECENT_BATCHES:
                del recent[next(iter(recent))]
        if largest_timestamp > self.max_timestamp_so_far:
            self._max_ts_and_offset = (largest_timestamp, offset_of_max_timestamp)
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, physical_position)
            self.time_index.maybe_append(*self.max_timestamp_and_offset)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += n

    # -- scanning --------------------------------------------------------------------------
    def batch_headers(self, position: int = 0, end: int | None = None) -> Iterator[tuple[int, tuple]]:
        """(position, BatchHeader) of each complete batch in [position, end); stops at a torn one."""
        end = self._size if end is None else end
        buf = b""
        buf_start = position
        while position + LOG_OVERHEAD <= end:
            off = position - buf_start
            if off + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(self._fd, _READ_BLOCK, position)
                buf_start, off = position, 0
                if len(buf) < BATCH_HEADER_SIZE:
                    return
            header = records.read_batch_header(buf, off)
            batch_size = header[H_BATCH_LENGTH] + LOG_OVERHEAD
            if batch_size < _MIN_BATCH_SIZE or position + batch_size > end:
                return
            yield position, header
            position += batch_size

    def translate_offset(self, offset: int, starting_position: int = 0) -> tuple[int, int, tuple] | None:
        """(position, batch size, header) of the first batch whose last offset >= `offset`."""
        _, index_position = self.offset_index.lookup(offset)
        for position, header in self.batch_headers(max(index_position, starting_position)):
            if header[H_BASE_OFFSET] + header[H_LAST_OFFSET_DELTA] >= offset:
                return position, header[H_BATCH_LENGTH] + LOG_OVERHEAD, header
        return None

    def position_of(self, offset: int) -> int:
        """File position of the batch holding `offset`, the end of the file when no batch here
        does (UnifiedLog.offset_position): the recent batches first, then translate_offset."""
        hit = self._recent.get(offset)
        if hit is not None:
            return hit[0]
        found = self.translate_offset(offset)
        return found[0] if found is not None else self._size

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo | None:
        """Batches from the one containing `start_offset`, at most max_size bytes (or the whole
        first batch when min_one_message), never past max_position; None when start_offset is
        beyond the last batch of this segment."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size}")
        hit = self._recent.get(start_offset)
        if hit is not None:  # fast path: a tailing consumer asks for the next batch exactly
            position, batch_size = hit
            first_base = start_offset
        else:
            found = self.translate_offset(start_offset)
            if found is None:
                return None
            position, batch_size, header = found
            first_base = header[H_BASE_OFFSET]
        if max_position is None:
            max_position = self._size
        adjusted = max(max_size, batch_size) if min_one_message else max_size
        info = FetchDataInfo(fetch_offset=start_offset, segment_base_offset=self.base_offset,
                             position=position)
        if adjusted == 0:
            return info
        fetch_size = min(max_position - position, adjusted)
        if fetch_size > 0:
            info.regions.append(FileRegion(self._fd, position, fetch_size))
            info.size = fetch_size
            info.first_batch_offset = first_base
            info.first_entry_incomplete = adjusted < batch_size
        return info

    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def read_next_offset(self) -> int:
        """The offset after the last batch (base_offset when empty); scans from the last index entry."""
        _, position = self.offset_index.lookup(self.offset_index.last_offset)
        next_offset = self.base_offset
        for _, header in self.batch_headers(position):
            next_offset = header[H_BASE_OFFSET] + header[H_LAST_OFFSET_DELTA] + 1
        return next_offset

    # -- timestamps ------------------------------------------------------------------------
    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> TimestampAndOffset | None:
        """First record with timestamp >= `timestamp` and offset >= starting_offset (ListOffsets).

        Kafka's LogSegment.findOffsetByTimestamp: start from the time index's lower bound, scan
        batches whose max timestamp reaches the target, then records inside that batch.
        """
        _, ts_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(ts_offset, starting_offset))
        for pos, header in self.batch_headers(position):
            if header[H_MAX_TIMESTAMP] < timestamp:
                continue
            epoch = header[H_LEADER_EPOCH] if header[H_LEADER_EPOCH] >= 0 else None
            for record_ts, record_offset in self._record_timestamps(pos, header):
                if record_ts >= timestamp and record_offset >= starting_offset:
                    return TimestampAndOffset(record_ts, record_offset, epoch)
        return None

    def offset_of_max_timestamp(self) -> TimestampAndOffset | None:
        """(max timestamp, first record carrying it, epoch) of this segment (ListOffsets -3)."""
        max_ts, last_offset = self.max_timestamp_and_offset
        _, position = self.offset_index.lookup(last_offset)
        for pos, header in self.batch_headers(position):
            if header[H_MAX_TIMESTAMP] == max_ts:
                epoch = header[H_LEADER_EPOCH] if header[H_LEADER_EPOCH] >= 0 else None
                for record_ts, record_offset in self._record_timestamps(pos, header):
                    if record_ts == max_ts:
                        return TimestampAndOffset(max_ts, record_offset, epoch)
                return None
        return None

    def _record_timestamps(self, position: int, header: tuple) -> Iterator[tuple[int, int]]:
        base = header[H_BASE_OFFSET]
        attributes = header[H_ATTRIBUTES]
        if attributes & TIMESTAMP_TYPE_MASK:
            # every record of a LogAppendTime batch reads as the batch's max timestamp
            for delta in range(header[H_LAST_OFFSET_DELTA] + 1):
                yield header[H_MAX_TIMESTAMP], base + delta
            return
        batch_size = header[H_BATCH_LENGTH] + LOG_OVERHEAD
        data = self.read_bytes(position, batch_size)
        decoded = _decode_batch_records(data, header)
        if decoded is None:
            # Undecodable (compressed without a codec available): answer at batch granularity.
            yield header[H_MAX_TIMESTAMP], base
            return
        for timestamp_delta, offset_delta in decoded:
            yield header[H_BASE_TIMESTAMP] + timestamp_delta, base + offset_delta

    # -- roll ------------------------------------------------------------------------------
    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None and self._size > 0:
            for _, header in self.batch_headers(0):
                self._rolling_based_timestamp = header[H_MAX_TIMESTAMP]
                break

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """ms since the first batch's timestamp (or since creation when batches carry none)."""
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(self, *, messages_size: int, max_timestamp_in_messages: int,
                    max_offset_in_messages: int, now_ms: int, segment_bytes: int, segment_ms: int) -> bool:
        """Kafka's LogSegment.shouldRoll: size, age (minus jitter), full index, or offset overflow."""
        reached_roll_ms = self.time_waited_for_roll(now_ms, max_timestamp_in_messages) > segment_ms - self.roll_jitter_ms
        return (self._size > segment_bytes - messages_size
                or (self._size > 0 and reached_roll_ms)
                or self.offset_index.is_full() or self.time_index.is_full()
                or not self.can_convert_to_relative_offset(max_offset_in_messages))

    def on_become_inactive(self) -> None:
        """On roll: record the final max timestamp and trim both indexes to their entries."""
        if self._pending_truncate is not None:
            self.complete_truncation()  # a sealed segment's file is its content (future logs copy it)
        self.time_index.maybe_append(*self.max_timestamp_and_offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # -- recovery and truncation -----------------------------------------------------------
    def sanity_check(self) -> None:
        """Raise CorruptIndexError when either index cannot be trusted (the caller recovers)."""
        self.offset_index.sanity_check(self._size)
        self.time_index.sanity_check()

    def recover(self, leader_epoch_cache: LeaderEpochFileCache | None = None, *, active: bool = False) -> int:
        """Rebuild the indexes from the .log file and cut it at the first bad batch (Kafka's
        LogSegment.recover).

        One compiled walk (`recovery.recover_segment`, without the GIL) checks every batch's
        CRC and offsets and computes both indexes as the append path would have written them;
        each index file is then rewritten in one go. leader_epoch_cache, when given, is fed
        the epoch of every valid batch that starts a newer epoch, in order (the producer state
        is rebuilt afterwards by the log, from its snapshot). `active`: the log's last segment,
        whose preallocated index files keep their size (they grow back for appends anyway) and
        whose final max-timestamp entry stays in memory until it rolls or closes, as for any
        active segment (so a small partition's recovery writes no file at all).
        Returns the number of bytes truncated; `recovery_error` says why the walk stopped early
        (None when it did not).
        """
        latest = leader_epoch_cache.latest_epoch() if leader_epoch_cache is not None else None
        with self._file_view(0, self._size) as buf:
            try:
                (valid, _next_offset, offset_entries, time_entries, max_ts, max_ts_offset, last_index_entry,
                 epochs, producer_batches, error) = recovery.recover_segment(
                    buf, self.base_offset, self.index_interval_bytes, -1 if latest is None else latest,
                    self.offset_index.preallocated_entries, self.time_index.preallocated_entries,
                    not active)
            except ValueError as exc:  # more entries than the index can hold: never written so
                raise IndexOffsetError(f"cannot recover {self.log_path}: {exc}") from None
        if leader_epoch_cache is not None:
            for epoch, start_offset in epochs:
                leader_epoch_cache.assign(epoch, start_offset)
        truncated = self._size - valid
        self._recent.clear()
        if truncated:
            os.ftruncate(self._fd, valid)
            self._size = valid
        self.recovery_error = error if truncated else None
        self.offset_index.rebuild(offset_entries, keep_preallocated=active)
        self.time_index.rebuild(time_entries, keep_preallocated=active)
        self._max_ts_and_offset = (max_ts, max_ts_offset)
        self._bytes_since_last_index_entry = valid - last_index_entry
        self.producer_free = producer_batches == 0
        return truncated

    @contextlib.contextmanager
    def _file_view(self, start: int, end: int) -> Iterator[bytes | mmap.mmap]:
        """The bytes [start, end) of the .log file: read for a small range, mapped (populated at
        once: one call instead of a page fault per 4 KiB) for a large one."""
        if end - start <= _MAP_AT_LEAST or start:
            yield os.pread(self._fd, end - start, start) if end > start else b""
            return
        mm = mmap.mmap(self._fd, end, flags=mmap.MAP_SHARED | _MAP_POPULATE, prot=mmap.PROT_READ)
        try:
            yield mm
        finally:
            mm.close()

    def producer_batches(self, position: int, start_offset: int) -> list[tuple[int, tuple]]:
        """(position, header) of the batches from `position` that carry a producer id and end at or
        after `start_offset` (what rebuilding the producer state replays); stops at a torn batch."""
        if self.producer_free or position >= self._size:
            return []
        if self._size - position <= _MAP_AT_LEAST:
            data = os.pread(self._fd, self._size - position, position)
            return [(position + p, h) for p, h in recovery.producer_batches(data, 0, len(data), start_offset)]
        mm = mmap.mmap(self._fd, self._size, access=mmap.ACCESS_READ)
        try:
            return recovery.producer_batches(mm, position, self._size, start_offset)
        finally:
            mm.close()

    def truncate_to(self, offset: int, now_ms: int | None = None, *, defer_ftruncate: bool = False) -> int:
        """Remove batches from the one containing `offset` on; returns bytes removed.
        `defer_ftruncate`: leave the file's cut to `complete_truncation` (a worker thread)."""
        mapping = self.translate_offset(offset)
        self._recent.clear()
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.resize_indexes(self.offset_index.max_index_size)
        truncated = 0
        if mapping is not None:
            position = mapping[0]
            truncated = self._size - position
            if defer_ftruncate:
                with self._lock:  # a worker may be completing an earlier cut
                    pending = self._pending_truncate
                    self._pending_truncate = position if pending is None else min(pending, position)
            elif self._pending_truncate is not None:
                with self._lock:  # this cut is at or below the pending one, which must not follow it
                    os.ftruncate(self._fd, position)
                    self._pending_truncate = None
            else:
                os.ftruncate(self._fd, position)  # no worker cuts this file: no lock (a flush holds it)
            self._size = position
        if self._size == 0:
            if now_ms is not None:
                self.created_ms = now_ms
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        self._max_ts_and_offset = self._read_largest_timestamp()
        return truncated

    def _read_largest_timestamp(self) -> tuple[int, int]:
        last_ts, last_offset = self.time_index.last_entry
        _, position = self.offset_index.lookup(last_offset)
        best = (last_ts, last_offset)
        for _, header in self.batch_headers(position):
            if header[H_MAX_TIMESTAMP] > best[0]:
                best = (header[H_MAX_TIMESTAMP], header[H_BASE_OFFSET] + header[H_LAST_OFFSET_DELTA])
        return best

    # -- durability and lifecycle ----------------------------------------------------------
    def flush(self) -> None:
        """fsync the log and msync both indexes; safe from a worker thread."""
        with self._lock:
            if self._closed:
                return
            os.fsync(self._fd)
            self.offset_index.flush()
            self.time_index.flush()

    @property
    def truncation_pending(self) -> bool:
        return self._pending_truncate is not None

    def complete_truncation(self) -> None:
        """Make a deferred cut of the file (blocking; any thread). Nothing to do when none is
        pending, or the segment was closed meanwhile (a close makes the cut; a deletion needs
        none)."""
        with self._lock:
            self._complete_truncation_locked()

    def _complete_truncation_locked(self) -> None:
        position = self._pending_truncate
        if position is not None and not self._closed:
            os.ftruncate(self._fd, position)
        self._pending_truncate = None

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._complete_truncation_locked()  # a clean shutdown trusts the file's size
            self._closed = True
            if self._max_ts_and_offset is not None:
                self.time_index.maybe_append(*self._max_ts_and_offset, skip_full_check=True)
            self.offset_index.close()
            self.time_index.close()
            os.close(self._fd)

    def close_handlers(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.offset_index.close_handler()
            self.time_index.close_handler()
            os.close(self._fd)

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the log and index files from `...<old_suffix>` to `...<new_suffix>` (Kafka's
        changeFileSuffixes); open fds and index maps stay valid."""
        def renamed(path: Path) -> Path:
            name = path.name[:len(path.name) - len(old_suffix)] if old_suffix else path.name
            return path.with_name(name + new_suffix)

        new_log = renamed(self.log_path)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        for index in (self.offset_index, self.time_index):
            index.rename(renamed(index.path))

    def delete(self) -> None:
        """Close and remove the segment's files."""
        self.close_handlers()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            path.unlink(missing_ok=True)


def _decode_batch_records(data: bytes, header: tuple) -> list[tuple[int, int]] | None:
    """(timestamp_delta, offset_delta) of each record, or None when the batch cannot be decoded."""
    count = header[H_RECORDS_COUNT]
    codec = header[H_ATTRIBUTES] & CODEC_MASK
    if codec == 0:
        try:
            return [(r[1], r[2]) for r in records.decode_records(data, BATCH_HEADER_SIZE, len(data), count)]
        except RecordError:
            return None
    try:
        section = records_section(data)
        return [(r[1], r[2]) for r in records.decode_records(section, 0, len(section), count)]
    except Exception:  # a codec error here must not fail ListOffsets; fall back to the batch
        return None
