"""Log compaction (Kafka's LogCleaner / Cleaner / LogCleanerManager, one cleaner thread).

A log with cleanup.policy containing `compact` keeps at least the latest record per key.

Cleanable range: from the first dirty offset (the `cleaner-offset-checkpoint` entry at the log
dir root, Kafka's format, or the log start offset when missing/out of range) up to the first
uncleanable offset: the base offset of the first segment that is the active segment, reaches
past the last stable offset (the high watermark, or the first offset of an open transaction
when lower: Kafka never cleans beyond the first unstable offset, so no record of an open
transaction is ever looked at), or holds a record younger than min.compaction.lag.ms. The range is
thus whole segments. A log is cleaned when dirty bytes / (clean + dirty bytes) >=
min.cleanable.dirty.ratio, or when its oldest dirty batch is older than max.compaction.lag.ms.

Cleaning (`clean_log`, worker thread): build the offset map (key -> latest offset) over the
dirty section, then rewrite every segment from the first one up to the dirty end, grouped into
output segments of at most segment.bytes (and what the indexes can address). A record is kept
when it has no key, or no newer offset for its key; a tombstone (null value) is also dropped
once delete.retention.ms has passed since its segment was last modified. Transactions (every
one in the cleaned range is complete, see above): records of an aborted transaction (its
producer's transactional batches between the first offset and the ABORT marker of an
`aborted.txnindex` entry) are dropped and never enter the offset map, so they cannot shadow an
older value of their key, as Kafka's cleaner does; committed transactional records are
compacted like any other. Control batches (COMMIT/ABORT markers) are always kept (Kafka drops
a marker once its transaction's data is gone and delete.retention.ms passed; keeping it is
safe: a coordinator replaying it finds nothing pending). A batch whose records all survive is copied verbatim; otherwise the kept records' bytes
are copied into a batch with the original base offset, base timestamp, lastOffsetDelta,
producer id/epoch/base sequence, attributes and codec (record offset deltas are relative to the
base offset, so offsets are preserved and just no longer contiguous). A batch that loses every
record is dropped, except the last batch of a producer still in the producer state, which is
kept as an empty batch (records count 0) so idempotence state survives reloading (Kafka's
RETAIN_EMPTY). Each output is written as `<base>.log.cleaned` (+ indexes), fsynced, given the
newest mtime of its inputs, and renamed `.swap`.

Swap (`swap_in`, event loop): under the log's `_lock` the old segment objects are replaced by
the cleaned one (only if they are all still in the log: retention or truncation may have
changed it meanwhile; then the cleaned files are deleted). The old files are renamed
`.deleted` and the caller removes them after file.delete.delay.ms, so fetch responses holding
their fds finish; the `.swap` files then lose their suffix. A crash leaves `.cleaned` files
(deleted at load) or `.swap` files (the swap is completed at load: UnifiedLog._load).

Concurrency: `cleanable`, `swap_in` and `LogCleaner.clean_logs` run on the event loop;
`clean_log` runs in one worker thread on a snapshot of the segment list. It reads old segments
under each segment's `_lock`, checking it is not closed, so a segment closed by retention or
shutdown meanwhile aborts the clean instead of reading a reused fd. Appends go on meanwhile:
the active segment is never touched.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pybroker._native import records as _records
from pybroker.log.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile, fsync_dir
from pybroker.log.config import LONG_MAX
from pybroker.log.segment import (
    CLEANED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    LogSegment,
)
from pybroker.log.txn_index import AbortedTxn
from pybroker.records import compression as _codecs
from pybroker.records.batch import (
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    CONTROL_FLAG,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_SEQUENCE,
    H_BASE_TIMESTAMP,
    H_BATCH_LENGTH,
    H_LAST_OFFSET_DELTA,
    H_LEADER_EPOCH,
    H_MAX_TIMESTAMP,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    H_RECORDS_COUNT,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
)

if TYPE_CHECKING:
    from pybroker.log.log import UnifiedLog

log = logging.getLogger("pybroker.cleaner")

_READ_BLOCK = 1 << 20
_MAX_RELATIVE_OFFSET = 2**31 - 1


class CleanAborted(Exception):
    """A segment being cleaned was closed or changed under the cleaner; try again later."""


@dataclass
class LogToClean:
    """Kafka's LogToClean: the cleanable range of one log and its dirtiness."""

    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    force: bool = False  # max.compaction.lag.ms exceeded

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


@dataclass
class CleanResult:
    """Output of `clean_log`: (cleaned segment in `.swap` state, the segments it replaces)."""

    end_offset: int
    groups: list[tuple[LogSegment, list[LogSegment]]] = field(default_factory=list)
    records_read: int = 0
    records_kept: int = 0


# -- choosing what to clean (event loop) --------------------------------------------------
def cleanable(log_: UnifiedLog, checkpoint: int | None, now_ms: int) -> LogToClean | None:
    """The cleanable range of a compacted log, or None when there is nothing to clean or the
    dirty ratio is below min.cleanable.dirty.ratio (and max.compaction.lag.ms is not exceeded)."""
    cfg = log_.config
    if not cfg.compact:
        return None
    # no lock: the segment list only changes on this (the event loop) thread, and a worker
    # thread may hold the log's lock across a long fsync
    segments = list(log_.segments)
    first_dirty = checkpoint
    if first_dirty is None or not log_.log_start_offset <= first_dirty <= log_.log_end_offset:
        first_dirty = log_.log_start_offset
    # Segments wholly below the last stable offset, never the active one.
    stable = log_.last_stable_offset
    limit = 0
    for i in range(len(segments) - 1):
        if segments[i + 1].base_offset > stable:
            break
        if cfg.min_compaction_lag_ms > 0 and now_ms - segments[i].largest_timestamp() < cfg.min_compaction_lag_ms:
            break
        limit = i + 1
    if limit == 0:
        return None
    first_uncleanable = segments[limit].base_offset
    if first_dirty >= first_uncleanable:
        return None
    bases = [s.base_offset for s in segments]
    dirty_index = max(bisect.bisect_right(bases, first_dirty) - 1, 0)
    clean_bytes = sum(s.size for s in segments[:dirty_index])
    cleanable_bytes = sum(s.size for s in segments[dirty_index:limit])
    if cleanable_bytes == 0:
        return None
    force = False
    if cfg.max_compaction_lag_ms < LONG_MAX:
        for segment in segments[dirty_index:limit]:
            for _, header in segment.batch_headers(0):
                ts = header[H_MAX_TIMESTAMP]
                if ts < 0:
                    ts = segment.last_modified_ms()
                force = now_ms - ts > cfg.max_compaction_lag_ms
                break
            if force:
                break
    candidate = LogToClean(first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, force)
    if candidate.ratio < cfg.min_cleanable_dirty_ratio and not force:
        return None
    return candidate


# -- reading segments safely from the cleaner thread ---------------------------------------
def _pread(segment: LogSegment, size: int, position: int) -> bytes:
    with segment._lock:
        if segment._closed:
            raise CleanAborted(f"{segment} was closed while being cleaned")
        return os.pread(segment.fd, size, position)


def _segment_batches(segment: LogSegment, end: int) -> Iterator[tuple[tuple, bytes]]:
    """(header, batch bytes) of each complete batch in segment[0:end]."""
    position = 0
    buf = b""
    buf_start = 0
    while position + LOG_OVERHEAD <= end:
        off = position - buf_start
        if off + BATCH_HEADER_SIZE > len(buf):
            buf = _pread(segment, min(_READ_BLOCK, end - position), position)
            buf_start, off = position, 0
            if len(buf) < BATCH_HEADER_SIZE:
                return
        header = _records.read_batch_header(buf, off)
        size = header[H_BATCH_LENGTH] + LOG_OVERHEAD
        if position + size > end:
            return
        if off + size > len(buf):
            buf = _pread(segment, max(size, min(_READ_BLOCK, end - position)), position)
            buf_start, off = position, 0
            if len(buf) < size:
                return
        yield header, buf[off:off + size]
        position += size


def _records_section(batch: bytes, header: tuple) -> bytes:
    section = memoryview(batch)[BATCH_HEADER_SIZE:]
    codec = header[H_ATTRIBUTES] & CODEC_MASK
    return bytes(_codecs.decompress(codec, section) if codec else section)


def _record_spans(section: bytes, count: int) -> list[tuple[int, int]]:
    """[start, end) of each record (varint length prefix included) in a records section."""
    spans = []
    pos = 0
    for _ in range(count):
        start = pos
        raw = shift = 0
        while True:
            b = section[pos]
            pos += 1
            raw |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        length = (raw >> 1) ^ -(raw & 1)
        pos += length
        spans.append((start, pos))
    return spans


# -- cleaning (worker thread) --------------------------------------------------------------
class AbortedRanges:
    """Which transactional batches belong to aborted transactions: producer id -> [(first
    offset, ABORT marker offset)] from the log's aborted-transaction index."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self.by_producer: dict[int, list[tuple[int, int]]] = {}
        for e in aborted:
            self.by_producer.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))

    def is_aborted(self, header: tuple) -> bool:
        attributes = header[H_ATTRIBUTES]
        if not attributes & TRANSACTIONAL_FLAG or attributes & CONTROL_FLAG:
            return False
        ranges = self.by_producer.get(header[H_PRODUCER_ID])
        if not ranges:
            return False
        base = header[H_BASE_OFFSET]
        return any(first <= base <= last for first, last in ranges)


NO_ABORTED = AbortedRanges([])


def build_offset_map(segments: list[LogSegment], sizes: list[int], start: int, end: int,
                     aborted: AbortedRanges = NO_ABORTED) -> dict[bytes, int]:
    """key -> latest offset of the records in [start, end) (Kafka's SkimpyOffsetMap, exact);
    records of aborted transactions are left out."""
    offset_map: dict[bytes, int] = {}
    for segment, size in zip(segments, sizes, strict=True):
        for header, batch in _segment_batches(segment, size):
            base = header[H_BASE_OFFSET]
            if base + header[H_LAST_OFFSET_DELTA] < start or header[H_ATTRIBUTES] & CONTROL_FLAG:
                continue
            if aborted.is_aborted(header):
                continue
            if base >= end:
                break
            section = _records_section(batch, header)
            for _, _, delta, key, _, _ in _records.decode_records(section, 0, len(section),
                                                                  header[H_RECORDS_COUNT]):
                offset = base + delta
                if key is not None and start <= offset < end:
                    offset_map[key] = offset
    return offset_map


def _group_segments(segments: list[LogSegment], sizes: list[int], end: int, max_size: int,
                    max_index_size: int) -> list[list[int]]:
    """Kafka's groupSegmentsBySize: runs of consecutive segments (as indexes) whose total log
    size and index sizes fit one segment and whose offsets fit relative to the first base."""
    groups: list[list[int]] = []
    i = 0
    while i < len(segments):
        group = [i]
        log_size = sizes[i]
        offset_index = segments[i].offset_index.size_in_bytes()
        time_index = segments[i].time_index.size_in_bytes()
        j = i + 1
        while j < len(segments):
            # the next group's last offset is below the following segment's base
            last = (segments[j + 1].base_offset if j + 1 < len(segments) else end) - 1
            if (log_size + sizes[j] > max_size
                    or offset_index + segments[j].offset_index.size_in_bytes() > max_index_size
                    or time_index + segments[j].time_index.size_in_bytes() > max_index_size
                    or last - segments[i].base_offset > _MAX_RELATIVE_OFFSET):
                break
            log_size += sizes[j]
            offset_index += segments[j].offset_index.size_in_bytes()
            time_index += segments[j].time_index.size_in_bytes()
            group.append(j)
            j += 1
        groups.append(group)
        i = j
    return groups


def _filter_batch(header: tuple, batch: bytes, offset_map: dict[bytes, int], drop_tombstones: bool,
                  producer_last_offsets: dict[int, int], aborted: AbortedRanges = NO_ABORTED
                  ) -> tuple[bytes | None, int, int, int]:
    """(batch to write or None, records read, records kept, max timestamp of the output)."""
    count = header[H_RECORDS_COUNT]
    if header[H_ATTRIBUTES] & CONTROL_FLAG:
        return batch, count, count, header[H_MAX_TIMESTAMP]
    base = header[H_BASE_OFFSET]
    section = _records_section(batch, header)
    decoded = _records.decode_records(section, 0, len(section), count)
    kept = []
    discard_all = aborted.is_aborted(header)
    for i, (_, ts_delta, delta, key, value, _) in enumerate(decoded):
        if discard_all:
            break
        if key is not None:
            latest = offset_map.get(key)
            if latest is not None and base + delta < latest:
                continue
            if value is None and drop_tombstones:
                continue
        kept.append((i, ts_delta))
    if len(kept) == count:
        return batch, count, count, header[H_MAX_TIMESTAMP]
    attributes = header[H_ATTRIBUTES]
    producer_id = header[H_PRODUCER_ID]
    last_offset = base + header[H_LAST_OFFSET_DELTA]
    if not kept:
        if producer_id < 0 or producer_last_offsets.get(producer_id) != last_offset:
            return None, count, 0, -1
        new_section = b""  # the producer's last batch stays as an empty batch (its header)
        attributes &= ~CODEC_MASK
        max_ts = header[H_MAX_TIMESTAMP]
    else:
        spans = _record_spans(section, count)
        new_section = b"".join(section[spans[i][0]:spans[i][1]] for i, _ in kept)
        codec = attributes & CODEC_MASK
        if codec:
            new_section = _codecs.compress(codec, new_section)
        if attributes & TIMESTAMP_TYPE_MASK:
            max_ts = header[H_MAX_TIMESTAMP]
        else:
            max_ts = header[H_BASE_TIMESTAMP] + max(ts for _, ts in kept)
    out = _records.build_batch(new_section, base, header[H_LEADER_EPOCH], attributes,
                               header[H_LAST_OFFSET_DELTA], header[H_BASE_TIMESTAMP], max_ts, producer_id,
                               header[H_PRODUCER_EPOCH], header[H_BASE_SEQUENCE], len(kept))
    return out, count, len(kept), max_ts


def clean_log(log_: UnifiedLog, to_clean: LogToClean, now_ms: int,
              producer_last_offsets: dict[int, int], aborted_txns: list[AbortedTxn] | None = None) -> CleanResult:
    """Write cleaned `.swap` segments for every segment below to_clean.first_uncleanable.

    Blocking: run in a worker thread. `producer_last_offsets` (producer id -> last data offset)
    and `aborted_txns` (the log's aborted transactions; None: a snapshot of its txn index) are
    read on the event loop. Raises CleanAborted when a segment was closed meanwhile (nothing is
    left on disk then).
    """
    cfg = log_.config
    end = to_clean.first_uncleanable
    with log_._lock:
        segments = [s for s in log_.segments[:-1] if s.base_offset < end]
    sizes = [s.size for s in segments]
    if aborted_txns is None:
        aborted_txns = list(log_.txn_index.entries)
    aborted = AbortedRanges(aborted_txns)
    offset_map = build_offset_map(segments, sizes, to_clean.first_dirty, end, aborted)
    result = CleanResult(end_offset=end)
    written: list[LogSegment] = []
    try:
        for group in _group_segments(segments, sizes, end, cfg.segment_bytes, cfg.segment_index_bytes):
            olds = [segments[i] for i in group]
            cleaned = _new_cleaned_segment(log_, olds[0].base_offset, now_ms)
            written.append(cleaned)
            mtime_ms = 0
            for i in group:
                segment = segments[i]
                last_modified = _last_modified_ms(segment)
                mtime_ms = max(mtime_ms, last_modified)
                drop_tombstones = last_modified + cfg.delete_retention_ms <= now_ms
                for header, batch in _segment_batches(segment, sizes[i]):
                    out, n_read, n_kept, max_ts = _filter_batch(header, batch, offset_map, drop_tombstones,
                                                                producer_last_offsets, aborted)
                    result.records_read += n_read
                    result.records_kept += n_kept
                    if out is not None:
                        last = header[H_BASE_OFFSET] + header[H_LAST_OFFSET_DELTA]
                        cleaned.append(last, max_ts, last, out)
            cleaned.on_become_inactive()
            cleaned.flush()
            os.utime(cleaned.log_path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
            cleaned.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
            result.groups.append((cleaned, olds))
        fsync_dir(log_.dir)
    except BaseException:
        for segment in written:
            segment.delete()
        raise
    return result


def _last_modified_ms(segment: LogSegment) -> int:
    with segment._lock:
        if segment._closed:
            raise CleanAborted(f"{segment} was closed while being cleaned")
        return segment.last_modified_ms()


def _new_cleaned_segment(log_: UnifiedLog, base_offset: int, now_ms: int) -> LogSegment:
    for suffix in (CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX):  # leftovers of an earlier attempt
        for ext in (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX):
            (log_.dir / f"{base_offset:020d}{ext}{suffix}").unlink(missing_ok=True)
    cfg = log_.config
    return LogSegment(log_.dir, base_offset, index_interval_bytes=cfg.index_interval_bytes,
                      max_index_size=cfg.segment_index_bytes, now_ms=now_ms, file_suffix=CLEANED_FILE_SUFFIX)


# -- swapping in (event loop) ---------------------------------------------------------------
def swap_in(log_: UnifiedLog, result: CleanResult) -> tuple[bool, list[LogSegment]]:
    """Replace each group's old segments by its cleaned one; (all swapped, old segments to
    delete after file.delete.delay.ms). A group whose old segments left the log meanwhile is
    dropped (its cleaned files deleted). Event loop thread."""
    replaced: list[LogSegment] = []
    complete = True
    for cleaned, olds in result.groups:
        if complete and log_.replace_segments(cleaned, olds):
            replaced.extend(olds)
        else:
            complete = False
            cleaned.delete()
    return complete, replaced


def discard(result: CleanResult) -> None:
    """Delete the cleaned files of a result that will not be swapped in (blocking)."""
    for cleaned, _ in result.groups:
        cleaned.delete()


# -- the cleaner and its checkpoint ---------------------------------------------------------
class LogCleaner:
    """Cleans compacted logs one at a time and keeps `cleaner-offset-checkpoint` per log dir.

    `clean_logs` is async (event loop); the rewriting runs in one worker thread. `schedule_deletion`
    (log, old segments) removes replaced files later (LogManager.schedule_segment_deletion).
    """

    def __init__(self, log_manager, schedule_deletion) -> None:
        self.log_manager = log_manager
        self.schedule_deletion = schedule_deletion
        self._checkpoints: dict[Path, dict[tuple[str, int], int]] = {}

    def _checkpoint_file(self, log_dir: Path) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT)

    def checkpoints(self, log_dir: Path) -> dict[tuple[str, int], int]:
        found = self._checkpoints.get(log_dir)
        if found is None:
            try:
                found = self._checkpoint_file(log_dir).read()
            except Exception:  # a corrupt checkpoint means "clean from the start", as in Kafka
                log.warning("ignoring unreadable %s", log_dir / CLEANER_OFFSET_CHECKPOINT)
                found = {}
            self._checkpoints[log_dir] = found
        return found

    def first_dirty_offset(self, log_: UnifiedLog) -> int | None:
        return self.checkpoints(log_.dir.parent).get((log_.topic, log_.partition))

    def _checkpoint_entries(self, log_dir: Path) -> dict[tuple[str, int], int]:
        """The entries of logs still hosted in `log_dir` (deleted partitions drop out). Event loop."""
        hosted = {tp for tp, lg in self.log_manager.logs.items() if lg.dir.parent == log_dir}
        entries = {tp: off for tp, off in self.checkpoints(log_dir).items() if tp in hosted}
        self._checkpoints[log_dir] = entries
        return dict(entries)

    async def clean_logs(self, logs: list[UnifiedLog], now_ms: int) -> int:
        """One pass: clean every compacted log that needs it, dirtiest first. Returns how many
        logs were cleaned."""
        import trio

        candidates = []
        for lg in logs:
            to_clean = cleanable(lg, self.first_dirty_offset(lg), now_ms)
            if to_clean is not None:
                candidates.append((to_clean.ratio, lg))
        candidates.sort(key=lambda c: -c[0])
        cleaned = 0
        for _, lg in candidates:
            to_clean = cleanable(lg, self.first_dirty_offset(lg), now_ms)  # may have changed
            if to_clean is None:
                continue
            producers = {pid: e.last_data_offset for pid, e in lg.producer_state.producers.items()}
            aborted = list(lg.txn_index.entries)
            try:
                result = await trio.to_thread.run_sync(clean_log, lg, to_clean, now_ms, producers, aborted)
            except CleanAborted as exc:
                log.info("cleaning %s aborted: %s", lg, exc)
                continue
            except OSError:
                log.exception("cleaning %s failed", lg)
                continue
            if self.log_manager.get_log(lg.topic, lg.partition) is not lg:  # deleted meanwhile
                await trio.to_thread.run_sync(discard, result)
                continue
            complete, replaced = swap_in(lg, result)
            self.schedule_deletion(lg, replaced)
            if complete:
                self.checkpoints(lg.dir.parent)[(lg.topic, lg.partition)] = result.end_offset
                entries = self._checkpoint_entries(lg.dir.parent)
                await trio.to_thread.run_sync(self._checkpoint_file(lg.dir.parent).write, entries)
                cleaned += 1
                log.info("cleaned %s up to offset %d: kept %d of %d records", lg, result.end_offset,
                         result.records_kept, result.records_read)
        return cleaned
