"""The log of one partition (Kafka's UnifiedLog, local part only).

Directory `<log dir>/<topic>-<partition>/` holding segments (see segment.py), producer-state
snapshots (`<offset>.snapshot`), `leader-epoch-checkpoint` and `partition.metadata`
("version: 0\\ntopic_id: <Kafka Uuid string>\\n").

Offsets: log_start_offset <= every readable offset < log_end_offset (LEO). The recovery point is
the offset below which everything is known to be fsynced; recovery after a crash scans only the
segments at or above it.

Append (`append_as_leader`): one magic-2 batch per call. A client's batch is validated first
(`validate=True`: log_validator.py, Kafka's LogValidator, which may recompress it); the node's
own writers (coordinators, transaction markers) hand in batches they built. Producer-state
checks run next (a duplicate returns the original offsets and writes nothing), then offsets are
assigned in place (base_offset = LEO, partitionLeaderEpoch), LogAppendTime is stamped if
configured, the active segment is rolled if needed, the batch is pwritten, and indexes,
producer state and the leader epoch cache are updated. No fsync happens here.

Flush policy: flush.messages (unflushed message count) and flush.ms (time since last flush) are
evaluated by `needs_flush(now_ms)`; a roll also asks for a flush of the now-inactive segments, as
Kafka schedules one. The server then runs `flush(offset)` in a worker thread.

DeleteRecords (`increment_log_start_offset`) raises the log start offset and detaches the
segments wholly below it without touching a file; `mark_segments_deleted` renames their files
`*.deleted` and `delete_segment_files` removes them later, both in a worker thread
(`delete_records_before` does both steps at once, for callers off the loop).

Follower truncation (`truncate_to_deferred`) changes the log on the event loop and leaves the
slow file work to worker threads: the removal of the segments above the cut (renamed
`*.deleted` at once) and the cut of the last segment's file (DeferredTruncation).

Tiered storage (KIP-405, Kafka's UnifiedLog remote parts; `remote_log_enabled`: the node has
remote.log.storage.system.enable and the topic remote.storage.enable, not compacted, not an
internal topic): the log start offset is then the start of the whole log, remote part included,
and may be below `local_log_start_offset` (the first offset still on this disk); reads here
serve only [local_log_start_offset, LEO) and raise OffsetOutOfRangeError below it, which the
replica manager turns into a remote read. `highest_offset_in_remote_storage` (-1: nothing) is
set by the remote log manager (pybroker/replication/remote_log_manager.py) as copies finish (on
a follower, from the remote metadata). Local retention (local.retention.ms/bytes, -2 = the total
retention.*) removes only segments wholly copied (or below the log start offset) and moves the
local log start offset only; the total retention of the remote part is the remote log manager's,
which raises the log start offset (`increment_log_start_offset`) as remote segments expire.
With remote.log.copy.disable (KIP-950) local retention falls back to retention.* and moves the
log start offset. On restart the log start offset comes from the log-start-offset checkpoint
(written for every tiered log), the local one from the first segment.

Concurrency: appends, reads, roll, truncate, increment_log_start_offset and close run on the event
loop thread. `flush()` may run concurrently in one worker thread: it snapshots the segment list
under `_lock` (which roll, truncate, increment_log_start_offset and close also take when they
change the list) and fsyncs outside it; each segment's own lock orders its fsync against its
close.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import shutil
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from pybroker._native import records
from pybroker.log.config import LogConfig
from pybroker.log.errors import (
    CorruptIndexError,
    InconsistentTopicIdError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from pybroker.log.fetch_data_info import FetchDataInfo, TimestampAndOffset
from pybroker.log.leader_epoch_cache import LeaderEpochFileCache
from pybroker.log.log_append_info import LogAppendInfo
from pybroker.log.log_validator import validate_records
from pybroker.log.meta_properties import uuid_from_str, uuid_to_str
from pybroker.log.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    CompletedTxn,
    ProducerStateManager,
    increment_sequence,
)
from pybroker.log.segment import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    LogSegment,
)
from pybroker.log.txn_index import AbortedTxn, TransactionIndex
from pybroker.records.batch import (
    CONTROL_FLAG,
    H_ATTRIBUTES,
    H_BASE_SEQUENCE,
    H_BATCH_LENGTH,
    H_LAST_OFFSET_DELTA,
    H_MAX_TIMESTAMP,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    H_RECORDS_COUNT,
    LOG_OVERHEAD,
    TRANSACTIONAL_FLAG,
)
from pybroker.records.end_txn_marker import read_end_txn_marker

logger = logging.getLogger("pybroker.log")

PARTITION_METADATA_FILE = "partition.metadata"

# Kafka's Topic.isInternal plus the metadata topic: never tiered (UnifiedLog.isRemoteLogEnabled)
REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
_NEVER_TIERED = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state",
                           REMOTE_LOG_METADATA_TOPIC})

# ListOffsets special timestamps (Kafka's ListOffsetsRequest)
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # KIP-1023, ListOffsets v11

_DIR_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def log_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_log_dir_name(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a "<topic>-<partition>" dir; None for deleted/future/stray dirs."""
    match = _DIR_NAME.match(name)
    if match is None or "." in name.rsplit("-", 1)[1]:
        return None
    return match["topic"], int(match["partition"])


def write_partition_metadata(dir: Path, topic_id: bytes, *, sync: bool = True, sync_dir: bool = True) -> None:
    from pybroker.log.checkpoint import atomic_write

    atomic_write(dir / PARTITION_METADATA_FILE,
                 f"version: 0\ntopic_id: {uuid_to_str(topic_id)}\n".encode("ascii"), sync=sync, sync_dir=sync_dir)


def read_partition_metadata(dir: Path) -> bytes | None:
    try:
        text = (dir / PARTITION_METADATA_FILE).read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        if fields["version"].strip() != "0":
            raise KafkaStorageError(f"{dir / PARTITION_METADATA_FILE}: unknown version {fields['version']!r}")
        return uuid_from_str(fields["topic_id"].strip())
    except (KeyError, ValueError) as exc:
        raise KafkaStorageError(f"{dir / PARTITION_METADATA_FILE} is malformed: {exc}") from None


class UnifiedLog:
    def __init__(self, dir: str | os.PathLike[str], config: LogConfig, *, topic: str, partition: int,
                 log_start_offset: int = 0, recovery_point: int = 0, topic_id: bytes | None = None,
                 clean_shutdown: bool = False, now_ms: int = 0,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 names: list[str] | None = None, remote_storage_system_enable: bool = False) -> None:
        """Open (creating if needed) and load the partition dir; recovery runs here, so call this
        from a worker thread for existing logs. `names`: a listing of the dir, when the caller
        (the log manager, loading) has one. `remote_storage_system_enable`: the node's
        remote.log.storage.system.enable (tiered storage, see the module docstring)."""
        self.dir = Path(dir)
        self.topic = topic
        self.partition = partition
        self.remote_storage_system_enable = remote_storage_system_enable
        # (checkpointed, clamped) start offsets when loading moved a checkpointed log start below
        # the first segment up to it: the topic's config, known only later, may make it tiered
        self._clamped_start: tuple[int, int] | None = None
        self._config = config
        # the last offset copied to remote storage (inclusive), -1 when nothing is (Kafka's
        # _highestOffsetInRemoteStorage): set by the remote log manager only
        self.highest_offset_in_remote_storage = -1
        self._lock = threading.Lock()
        # called (on the changing thread) when partition.metadata or the leader epoch checkpoint
        # fall behind memory: the log manager's background flusher then writes them
        self.on_metadata_dirty: Callable[[UnifiedLog], None] | None = None
        self._topic_id_dirty = False
        self._metadata_lock = threading.Lock()  # one writer of the small checkpoints at a time
        self.dir.mkdir(parents=True, exist_ok=True)
        self.topic_id = self._init_topic_id(topic_id)
        # through a weak reference: a log must not be part of a reference cycle, so that a deleted
        # one is freed at once even when the node froze its heap (gc.freeze)
        this = weakref.ref(self)

        def on_dirty() -> None:
            plog = this()
            if plog is not None:
                plog._note_metadata_dirty()

        self.leader_epoch_cache = LeaderEpochFileCache(self.dir, on_dirty=on_dirty)
        self.producer_state = ProducerStateManager(self.dir, producer_id_expiration_ms)
        self.txn_index = TransactionIndex(self.dir)
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.log_end_offset = 0
        self.last_flush_ms = now_ms
        self.high_watermark = 0  # maintained by replication; the log only clamps it
        self.recovered_segments = 0  # what loading had to recover (the log manager reports it)
        self.recovered_bytes = 0
        self._load(clean_shutdown, now_ms, names)

    # -- loading ---------------------------------------------------------------------------
    def _init_topic_id(self, topic_id: bytes | None) -> bytes | None:
        stored = read_partition_metadata(self.dir)
        if stored is not None and topic_id is not None and stored != topic_id:
            raise InconsistentTopicIdError(
                f"{self.dir}: partition.metadata has topic id {uuid_to_str(stored)} but "
                f"{uuid_to_str(topic_id)} was requested")
        if stored is None and topic_id is not None:
            self._topic_id_dirty = True  # written by flush_metadata (Kafka's PartitionMetadataFile.record)
        return stored or topic_id

    def assign_topic_id(self, topic_id: bytes) -> None:
        """Give a log found without partition.metadata its topic id (Kafka's assignTopicId): it
        is recorded at once and written by the next metadata flush."""
        if self.topic_id is None:
            self.topic_id = topic_id
            self._topic_id_dirty = True
            self._note_metadata_dirty()

    def _note_metadata_dirty(self) -> None:
        if self.on_metadata_dirty is not None:
            self.on_metadata_dirty(self)

    @property
    def metadata_dirty(self) -> bool:
        """Whether partition.metadata or leader-epoch-checkpoint are behind memory."""
        return self._topic_id_dirty or self.leader_epoch_cache.dirty

    def flush_partition_metadata(self, *, sync_dir: bool = True) -> bool:
        """Write partition.metadata if it is behind (tmp file, fsync, rename, fsync of the dir
        unless the caller does it); True if it wrote. Blocking: a worker thread. A dir renamed
        away meanwhile (deleted) writes nothing."""
        if not self._topic_id_dirty or self.topic_id is None:
            return False
        with self._metadata_lock:
            return self._write_partition_metadata(sync_dir)

    def _write_partition_metadata(self, sync_dir: bool) -> bool:
        if not self._topic_id_dirty or self.topic_id is None:
            return False
        self._topic_id_dirty = False
        try:
            write_partition_metadata(self.dir, self.topic_id, sync_dir=sync_dir)
        except FileNotFoundError:
            if self.dir.is_dir():
                self._topic_id_dirty = True
                raise
            return False
        except BaseException:
            self._topic_id_dirty = True
            raise
        return True

    def mark_metadata_dirty(self) -> None:
        """Both small checkpoints may not be durable (a copied log dir): rewrite them soon."""
        self._topic_id_dirty = self.topic_id is not None
        self.leader_epoch_cache.mark_dirty()
        self._note_metadata_dirty()

    def flush_metadata(self) -> None:
        """Write partition.metadata and leader-epoch-checkpoint if they are behind, each to a
        fsynced temporary file renamed into place, then fsync the dir once for both. Blocking."""
        from pybroker.log.checkpoint import fsync_dir

        if not self.metadata_dirty:
            return
        with self._metadata_lock:  # the background flusher and the creating thread may both call
            wrote = self._write_partition_metadata(False)
            wrote = self.leader_epoch_cache.flush(sync_dir=False) or wrote
            if wrote:
                try:
                    fsync_dir(self.dir)
                except FileNotFoundError:
                    pass  # deleted meanwhile

    def _new_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        return LogSegment(self.dir, base_offset, index_interval_bytes=self.config.index_interval_bytes,
                          max_index_size=self.config.segment_index_bytes,
                          roll_jitter_ms=self.config.segment_jitter_ms, now_ms=now_ms)

    def _load(self, clean_shutdown: bool, now_ms: int, names: list[str] | None) -> None:
        if names is None:
            names = os.listdir(self.dir)
        # Leftovers of an interrupted write/rename (Kafka: .cleaned/.deleted) are removed; a
        # `.log.swap` is a finished cleaned segment whose swap was cut short: complete it.
        swaps = []
        for name in names:
            if name.endswith((".tmp", DELETED_FILE_SUFFIX, CLEANED_FILE_SUFFIX)):
                (self.dir / name).unlink(missing_ok=True)
            elif name.endswith(LOG_FILE_SUFFIX + SWAP_FILE_SUFFIX) and name.split(".")[0].isdigit():
                swaps.append(int(name.split(".")[0]))
        if swaps:
            for base in sorted(swaps):
                self._complete_swap(base, now_ms)
            for name in os.listdir(self.dir):
                if name.endswith(SWAP_FILE_SUFFIX):  # index .swap files without their .log
                    (self.dir / name).unlink(missing_ok=True)
            names = os.listdir(self.dir)
        present = set(names)
        bases = sorted(int(name[:-len(LOG_FILE_SUFFIX)]) for name in names
                       if name.endswith(LOG_FILE_SUFFIX) and name[:-len(LOG_FILE_SUFFIX)].isdigit())
        known = {f"{base:020d}" for base in bases}
        for name in names:
            # An index without its .log is an orphan from a deleted segment.
            stem, dot, suffix = name.partition(".")
            if dot and "." + suffix in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX) and stem.isdigit() \
                    and stem not in known:
                (self.dir / name).unlink(missing_ok=True)
        for base in bases:
            self.segments.append(self._new_segment(base, now_ms))
            self._bases.append(base)
        # After an unclean shutdown every segment from the one holding the recovery point on is
        # recovered below, so their indexes are not checked here (Kafka's LogSegment.sanityCheck
        # skips them for the same reason); the others are trusted unless a check fails.
        recover_from = len(self.segments) if clean_shutdown else self._recovery_start()
        for segment in self.segments[:recover_from]:
            if self._index_missing(segment, present):
                segment.recover()
                continue
            try:
                segment.sanity_check()
            except CorruptIndexError:
                segment.recover()

        if not self.segments:
            start = max(self.log_start_offset, 0)
            self.segments.append(self._new_segment(start, now_ms))
            self._bases.append(start)
        elif not clean_shutdown:
            self._recover_segments(now_ms)

        active = self.segments[-1]
        # The active segment's indexes were trimmed on close: grow them back for appends (the
        # files grow when first written).
        active.resize_indexes(self.config.segment_index_bytes)
        self.log_end_offset = active.read_next_offset()
        checkpointed = self.log_start_offset
        if not self.remote_log_enabled:
            # tiered: the checkpointed start of the whole log stays, below the local segments
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            if self.remote_storage_system_enable and checkpointed < self.log_start_offset:
                self._clamped_start = (checkpointed, self.log_start_offset)
        self.recovery_point = min(max(self.recovery_point, self.log_start_offset), self.log_end_offset)
        if clean_shutdown:
            self.recovery_point = self.log_end_offset
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        # (a log that may turn out tiered keeps the epochs of its remote part until it is known)
        self.leader_epoch_cache.truncate_from_start(
            self._clamped_start[0] if self._clamped_start is not None else self.log_start_offset)
        # the listing still holds: loading removed no snapshot file and made none
        self._rebuild_producer_state(now_ms, names)
        self.high_watermark = min(max(self.high_watermark, self.log_start_offset), self.log_end_offset)

    def _recovery_start(self) -> int:
        """Index of the segment holding the recovery point: recovery starts there."""
        return max(bisect.bisect_right(self._bases, self.recovery_point) - 1, 0)

    def _index_missing(self, segment: LogSegment, present: set[str]) -> bool:
        """An index file that a segment of this size must have is absent (deleted by hand, or
        never written by a crashed node): recover the segment. Index files are made on their
        first entry, so a small segment has no .index, and one whose batches carry no timestamp
        no .timeindex; recovering those by mistake only costs a short scan."""
        if segment.size == 0:
            return False
        stem = f"{segment.base_offset:020d}"
        return (stem + TIME_INDEX_FILE_SUFFIX not in present
                or (stem + INDEX_FILE_SUFFIX not in present and segment.size > self.config.index_interval_bytes))

    def _complete_swap(self, base: int, now_ms: int) -> None:
        """Kafka's LogLoader swap handling: the old segments whose base offsets fall inside the
        cleaned segment's offset range go, then the `.swap` files lose their suffix. The swap
        file was fsynced before it got its name, so it is whole; its indexes are rebuilt."""
        swap = LogSegment(self.dir, base, index_interval_bytes=self.config.index_interval_bytes,
                          max_index_size=self.config.segment_index_bytes, now_ms=now_ms,
                          file_suffix=SWAP_FILE_SUFFIX)
        try:
            swap.recover()
            next_offset = swap.read_next_offset()
            for path in list(self.dir.iterdir()):
                stem = path.name.split(".")[0]
                if path.suffix in (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX) \
                        and stem.isdigit() and base <= int(stem) < max(next_offset, base + 1):
                    path.unlink()
            swap.change_file_suffixes(SWAP_FILE_SUFFIX, "")
        finally:
            swap.close()

    def replace_segments(self, new_segment: LogSegment, old_segments: list[LogSegment]) -> bool:
        """Swap a cleaned segment (files named `*.swap`) in for the consecutive, non-active
        `old_segments` (Kafka's replaceSegments); False, changing nothing, when they are no
        longer all in the log. The old files are renamed `*.deleted`: hand the old segments to
        `delete_segment_files` after file.delete.delay.ms. Event loop thread."""
        with self._lock:
            i = next((k for k, s in enumerate(self.segments) if s is old_segments[0]), None)
            n = len(old_segments)
            if (i is None or i + n >= len(self.segments)
                    or any(a is not b for a, b in zip(self.segments[i:i + n], old_segments, strict=True))
                    or any(s._closed for s in old_segments)):
                return False
            self.segments[i:i + n] = [new_segment]
            self._bases[i:i + n] = [new_segment.base_offset]
        for segment in old_segments:
            _rename_to_deleted(segment)
        new_segment.change_file_suffixes(SWAP_FILE_SUFFIX, "")
        return True

    def _recover_segments(self, now_ms: int) -> None:
        """Recover every segment from the one holding the recovery point on (unclean shutdown)."""
        i = self._recovery_start()
        self.recovered_segments = len(self.segments) - i
        while i < len(self.segments):
            segment = self.segments[i]
            truncated = segment.recover(leader_epoch_cache=self.leader_epoch_cache,
                                        active=i == len(self.segments) - 1)
            self.recovered_bytes += segment.size + truncated
            if truncated > 0:
                logger.warning("%s: found an invalid batch (%s) in segment %d at byte %d; %d bytes truncated",
                            self, segment.recovery_error, segment.base_offset, segment.size, truncated)
            if truncated > 0 and i < len(self.segments) - 1:
                # Everything after a corrupt batch is unreachable: drop later segments.
                for later in self.segments[i + 1:]:
                    later.delete()
                del self.segments[i + 1:]
                del self._bases[i + 1:]
            i += 1
        # An empty non-first trailing segment is fine (it is the active one).

    def _rebuild_producer_state(self, now_ms: int, names: list[str] | None = None) -> None:
        """Load the newest producer snapshot and replay the batches after it (`names`: a fresh
        listing of the log dir, when the caller has one). Snapshots above the log end go."""
        psm = self.producer_state
        start = psm.load(self.log_start_offset, self.log_end_offset, now_ms, names)
        start = max(start, self.log_start_offset)
        if start < self.log_end_offset:
            i = max(bisect.bisect_right(self._bases, start) - 1, 0)
            for segment in self.segments[i:]:
                if segment.producer_free:
                    continue  # recovery saw no batch with a producer id here
                found = segment.translate_offset(start) if segment.base_offset <= start else (0, 0, None)
                if found is None:
                    continue
                # only batches with a producer id change the state: a compiled walk finds them
                for position, header in segment.producer_batches(found[0], start):
                    marker = None
                    if header[H_ATTRIBUTES] & CONTROL_FLAG and header[H_PRODUCER_ID] >= 0:
                        try:
                            marker = read_end_txn_marker(
                                segment.read_bytes(position, header[H_BATCH_LENGTH] + LOG_OVERHEAD), header)
                        except ValueError:  # RecordError, or a malformed marker value
                            pass  # replay_batch still ends the transaction
                    completed = psm.replay_batch(header, marker)
                    if completed is not None:
                        # re-indexes an aborted transaction whose entry did not reach the disk
                        self._complete_txn(completed)
        psm.update_map_end_offset(self.log_end_offset)  # (load removed the snapshots above it)

    # -- basic queries ---------------------------------------------------------------------
    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    def __repr__(self) -> str:
        return (f"UnifiedLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch()

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch."""
        return self.leader_epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)

    def maybe_assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """On becoming leader: the new epoch starts at the current LEO (Kafka's Partition.makeLeader)."""
        self.leader_epoch_cache.assign(leader_epoch, start_offset)

    def _segment_index_for(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    # -- tiered storage (KIP-405; Kafka's UnifiedLog remote parts) --------------------------
    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, value: LogConfig) -> None:
        """A log loaded before its topic's config was known (start-up opens logs with the
        defaults) gets its checkpointed start offset back when the config makes it tiered."""
        self._config = value
        clamped = self._clamped_start
        if clamped is None:
            return
        self._clamped_start = None
        checkpointed, loaded = clamped
        if self.remote_log_enabled and self.log_start_offset == loaded:
            self.log_start_offset = checkpointed
        else:
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    @property
    def remote_log_enabled(self) -> bool:
        """Kafka's UnifiedLog.isRemoteLogEnabled: the node's remote.log.storage.system.enable
        and the topic's remote.storage.enable; never a compacted or internal topic."""
        return (self.remote_storage_system_enable and self.config.remote_storage_enable
                and not self.config.compact and self.topic not in _NEVER_TIERED)

    @property
    def remote_log_copy_enabled(self) -> bool:
        """Kafka's remoteLogEnabledAndRemoteCopyEnabled: tiered and remote.log.copy.disable unset."""
        return self.remote_log_enabled and not self.config.remote_log_copy_disable

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on this disk (Kafka's localLogStartOffset): the first segment's base
        offset, or the log start offset when DeleteRecords moved it inside that segment. Equal
        to the log start offset unless part of the log is only in remote storage."""
        return max(self.log_start_offset, self.segments[0].base_offset)

    def retention_roll_due(self, now_ms: int) -> bool:
        """Kafka's deletableSegments roll for a tiered log: its only segment (the active one) is
        non-empty, wholly below the high watermark and older than the local retention.ms, so
        it is rolled to be copied and then removed (otherwise a quiet topic would keep it until
        segment.ms)."""
        if not self.remote_log_enabled or not self.config.delete or len(self.segments) != 1:
            return False
        active = self.active_segment
        if active.size == 0 or self.high_watermark < self.log_end_offset:
            return False
        cfg = self.config
        retention_ms = cfg.local_retention_ms_effective if self.remote_log_copy_enabled else cfg.retention_ms
        return retention_ms >= 0 and now_ms - active.largest_timestamp() > retention_ms

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """Kafka's updateHighestOffsetInRemoteStorage: only ever rises, only on a tiered log."""
        if self.remote_log_enabled and offset > self.highest_offset_in_remote_storage:
            self.highest_offset_in_remote_storage = offset

    def only_local_segments(self) -> list[LogSegment]:
        """The segments not yet (wholly) in remote storage (Kafka's onlyLocalLogSegmentsSize/Count
        count these): RemoteCopyLagBytes/Segments sum them, the active one excluded by the caller."""
        highest = self.highest_offset_in_remote_storage
        return [s for s in self.segments if s.base_offset >= highest]

    def increment_local_log_start_offset(self, new_local_log_start_offset: int) -> list[LogSegment]:
        """Local retention of a tiered log (Kafka's maybeIncrementLocalLogStartOffset followed by
        removeAndDeleteSegments): detach the segments wholly below `new_local_log_start_offset`
        (a segment base offset) and return them for `LogManager.schedule_segment_deletion`; the
        log start offset does not move (those offsets are still readable, from remote storage).
        Event loop thread. The active segment always stays."""
        keep_from = bisect.bisect_right(self._bases, new_local_log_start_offset) - 1
        if keep_from <= 0:
            return []
        with self._lock:
            doomed = self.segments[:keep_from]
            del self.segments[:keep_from]
            del self._bases[:keep_from]
        self.recovery_point = max(self.recovery_point, self.segments[0].base_offset)
        return doomed

    # -- transactions ----------------------------------------------------------------------
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, or None."""
        return self.producer_state.first_unstable_offset()

    @property
    def last_stable_offset(self) -> int:
        """min(high watermark, first unstable offset): the end of what read_committed sees."""
        first = self.producer_state.first_unstable_offset()
        hw = self.high_watermark
        return hw if first is None or hw < first else first

    def _complete_txn(self, completed: CompletedTxn) -> None:
        """Kafka's UnifiedLog append tail for a marker: an aborted transaction goes to the
        transaction index with the LSO it leaves behind (Kafka's LogSegment.updateTxnIndex),
        then it stops holding back the first unstable offset."""
        psm = self.producer_state
        if completed.is_aborted:
            self.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                                             psm.last_stable_offset(completed)))
        psm.complete_txn(completed)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (Kafka's
        UnifiedLog.removeExpiredProducers); returns how many went. Event loop thread."""
        return self.producer_state.remove_expired_producers(now_ms)

    # -- append ----------------------------------------------------------------------------
    def append_as_leader(self, batch: bytes | bytearray | memoryview, leader_epoch: int, now_ms: int,
                         timestamp_type: str | None = None, origin: str = "client",
                         header: tuple | None = None, transaction_version: int = 0,
                         validate: bool = False) -> LogAppendInfo:
        """Append one magic-2 batch (offsets are assigned in place: a writable buffer, copied
        when it is not and `validate` is set).

        `validate`: a client's Produce data, first checked and maybe recompressed by the
        LogValidator (log_validator.py, as Kafka's appendAsLeader does with origin CLIENT) against
        this log's config at `now_ms`; it raises CorruptRecordError, InvalidRecordError or
        RecordValidationError. Without it the batch is the node's own (a coordinator's records, a
        marker) and `header` its parsed header when the caller has one. origin "coordinator" (Kafka's
        AppendOrigin.COORDINATOR: a coordinator's own transactional records, every batch at base
        sequence 0) checks the producer epoch only: no duplicate detection, no sequence check.
        A control batch is an end-transaction marker: it completes its producer's transaction;
        `transaction_version` is the marker's (WriteTxnMarkers v2, KIP-1228), 2 making its epoch check
        strict (ProducerStateManager.check_end_txn_marker).

        Raises RecordTooLargeError (10), RecordBatchTooLargeError (18),
        InvalidProducerEpochError (47), OutOfOrderSequenceError (45),
        TransactionCoordinatorFencedError (52: a marker from an older coordinator epoch).
        """
        if validate:
            # the request's own buffer when it may be written (a frame's memoryview), else a copy
            writable = batch
            if not isinstance(writable, bytearray) and (not isinstance(writable, memoryview) or writable.readonly):
                writable = bytearray(writable)
            validated = validate_records(writable, self.config, now_ms, self.topic, self.partition)
            batch, header = validated.batch, validated.header
        view = memoryview(batch).cast("B") if not isinstance(batch, bytearray) else batch
        size = len(view)
        if header is None:
            header = records.read_batch_header(view, 0)
        if size > self.config.max_message_bytes:
            raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes "
                                      f"{self.config.max_message_bytes}")
        if size > self.config.segment_bytes:
            raise RecordBatchTooLargeError(f"batch of {size} bytes exceeds segment.bytes "
                                           f"{self.config.segment_bytes}")
        last_offset_delta = header[H_LAST_OFFSET_DELTA]
        producer_id = header[H_PRODUCER_ID]
        producer_epoch = header[H_PRODUCER_EPOCH]
        base_sequence = header[H_BASE_SEQUENCE]
        last_sequence = increment_sequence(base_sequence, last_offset_delta) if base_sequence >= 0 else -1
        first_offset = self.log_end_offset
        last_offset = first_offset + last_offset_delta

        psm = self.producer_state
        is_control = header[H_ATTRIBUTES] & CONTROL_FLAG
        marker = None
        if producer_id >= 0:
            if is_control:
                # only the transaction coordinator writes control batches: one marker record
                marker = read_end_txn_marker(view, header)
                psm.check_end_txn_marker(producer_id, producer_epoch, marker.coordinator_epoch, transaction_version)
            else:
                duplicate = psm.prepare(producer_id, producer_epoch, base_sequence, last_sequence, first_offset,
                                        origin)
                if duplicate is not None:
                    return LogAppendInfo(first_offset=duplicate.first_offset, last_offset=duplicate.last_offset,
                                         log_append_time=-1, log_start_offset=self.log_start_offset,
                                         duplicate=True)

        records.assign_offsets(view, 0, first_offset, leader_epoch)
        use_append_time = (timestamp_type or self.config.message_timestamp_type) == "LogAppendTime"
        if use_append_time:
            records.set_log_append_time(view, 0, now_ms)
            max_timestamp = now_ms
            log_append_time = now_ms
        else:
            max_timestamp = header[H_MAX_TIMESTAMP]
            log_append_time = -1

        segment = self._maybe_roll(size, max_timestamp, last_offset, now_ms)
        segment.append(last_offset, max_timestamp, last_offset, view)

        if leader_epoch >= 0:
            latest = self.leader_epoch_cache.latest_epoch()
            if latest is None or leader_epoch > latest:
                self.leader_epoch_cache.assign(leader_epoch, first_offset)
        if marker is not None:
            completed = psm.append_end_txn_marker(producer_id, producer_epoch, marker, first_offset, max_timestamp)
            if completed is not None:
                self._complete_txn(completed)
        elif producer_id >= 0:
            psm.update(producer_id, producer_epoch, last_sequence, first_offset, last_offset, max_timestamp,
                       bool(header[H_ATTRIBUTES] & TRANSACTIONAL_FLAG))
        psm.update_map_end_offset(last_offset + 1)
        self.log_end_offset = last_offset + 1
        return LogAppendInfo(first_offset=first_offset, last_offset=last_offset,
                             log_append_time=log_append_time, log_start_offset=self.log_start_offset,
                             max_timestamp=max_timestamp, offset_of_max_timestamp=last_offset,
                             num_messages=header[H_RECORDS_COUNT], valid_bytes=size)

    def append_as_follower(self, batch: bytes | bytearray | memoryview, now_ms: int) -> LogAppendInfo:
        """Append one batch whose offsets and partitionLeaderEpoch are already assigned (Kafka's
        appendAsFollower; also the KRaft leader's path, which assigns them itself).

        The batch must start at the LEO and its CRC must match. No producer checks: its producer
        state is replayed as recovery does, so a follower that becomes leader keeps deduplicating;
        a transaction marker (a control batch with a producer id) completes its transaction and
        indexes an abort, as on the leader; other control batches (KRaft's LeaderChange and
        snapshot records) are taken as they are. Page cache only.
        Raises CorruptRecordError / InvalidRecordError (bad batch), OffsetOutOfRangeError
        (not at the LEO), RecordBatchTooLargeError (18).
        """
        view = memoryview(batch).cast("B")
        size = len(view)
        records.validate_batch(view, 0, size)
        header = records.read_batch_header(view, 0)
        first_offset = header[0]
        if first_offset != self.log_end_offset:
            raise OffsetOutOfRangeError(f"batch at offset {first_offset} does not start at the log end "
                                        f"offset {self.log_end_offset} of {self.topic}-{self.partition}")
        if size > self.config.segment_bytes:
            raise RecordBatchTooLargeError(f"batch of {size} bytes exceeds segment.bytes "
                                           f"{self.config.segment_bytes}")
        last_offset = first_offset + header[H_LAST_OFFSET_DELTA]
        max_timestamp = header[H_MAX_TIMESTAMP]
        segment = self._maybe_roll(size, max_timestamp, last_offset, now_ms)
        segment.append(last_offset, max_timestamp, last_offset, view)
        leader_epoch = header[2]
        if leader_epoch >= 0:
            latest = self.leader_epoch_cache.latest_epoch()
            if latest is None or leader_epoch > latest:
                self.leader_epoch_cache.assign(leader_epoch, first_offset)
        marker = None
        if header[H_ATTRIBUTES] & CONTROL_FLAG and header[H_PRODUCER_ID] >= 0:
            try:  # a transaction marker replicated from a partition leader
                marker = read_end_txn_marker(view, header)
            except ValueError:
                pass  # replay_batch still ends the transaction
        completed = self.producer_state.replay_batch(header, marker)
        if completed is not None:  # the follower indexes aborted transactions as the leader did
            self._complete_txn(completed)
        self.producer_state.update_map_end_offset(last_offset + 1)
        self.log_end_offset = last_offset + 1
        return LogAppendInfo(first_offset=first_offset, last_offset=last_offset, log_append_time=-1,
                             log_start_offset=self.log_start_offset, max_timestamp=max_timestamp,
                             offset_of_max_timestamp=last_offset,
                             num_messages=header[H_RECORDS_COUNT], valid_bytes=size)

    def _maybe_roll(self, messages_size: int, max_timestamp: int, max_offset: int, now_ms: int) -> LogSegment:
        segment = self.active_segment
        if segment.should_roll(messages_size=messages_size, max_timestamp_in_messages=max_timestamp,
                               max_offset_in_messages=max_offset, now_ms=now_ms,
                               segment_bytes=self.config.segment_bytes, segment_ms=self.config.segment_ms):
            return self.roll(now_ms)
        return segment

    def roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the LEO (no-op when the active one is empty)."""
        active = self.active_segment
        new_base = self.log_end_offset
        if active.base_offset == new_base and active.size == 0:
            return active  # Kafka reuses an empty active segment at the same offset
        self.producer_state.update_map_end_offset(new_base)
        self.producer_state.take_snapshot(sync=False)
        active.on_become_inactive()
        segment = self._new_segment(new_base, now_ms)
        with self._lock:
            self.segments.append(segment)
            self._bases.append(new_base)
        return segment

    # -- flush -----------------------------------------------------------------------------
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    def needs_flush(self, now_ms: int) -> bool:
        """True when flush.messages or flush.ms is due, or inactive segments are unflushed."""
        if self.log_end_offset <= self.recovery_point:
            return False
        return (self.unflushed_messages() >= self.config.flush_messages
                or now_ms - self.last_flush_ms >= self.config.flush_ms
                or self.recovery_point < self.active_segment.base_offset)

    def flush(self, offset: int | None = None, now_ms: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery_point, offset); thread-safe.

        offset None flushes to the LEO read at call time. Moves the recovery point to `offset`.
        """
        # the checkpoints first: an epoch entry for data below the recovery point is never
        # rebuilt by recovery, so it must be on disk before the recovery point passes the data
        self.flush_metadata()
        with self._lock:
            target = self.log_end_offset if offset is None else offset
            if target <= self.recovery_point:
                return
            start = self.recovery_point
            segments = [s for i, s in enumerate(self.segments)
                        if s.base_offset < target and
                        (i + 1 == len(self.segments) or self.segments[i + 1].base_offset > start)]
        for segment in segments:
            segment.flush()
        # Snapshots written at roll were not fsynced; the dir fsync makes new files durable.
        from pybroker.log.checkpoint import fsync_dir

        fsync_dir(self.dir)
        with self._lock:
            if target > self.recovery_point:
                self.recovery_point = target
            if now_ms is not None:
                self.last_flush_ms = now_ms

    # -- read ------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo:
        """Batches from the one containing `offset`, below max_offset (the high watermark, or the
        LEO when None); raises OffsetOutOfRangeError (1) outside [local_log_start, LEO] (a tiered
        log's offsets below its local start are read from remote storage by the caller)."""
        end = self.log_end_offset
        start = self.local_log_start_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is out of range [{start}, "
                                        f"{end}] for {self.topic}-{self.partition}")
        upper = end if max_offset is None else min(max_offset, end)
        if offset >= upper:
            return FetchDataInfo(fetch_offset=offset)
        upper_index, upper_position = self._position_of(upper)
        i = self._segment_index_for(offset)
        while i < len(self.segments) and i <= upper_index:
            segment = self.segments[i]
            max_position = upper_position if i == upper_index else segment.size
            info = segment.read(offset, max_bytes, max_position, min_one_message)
            if info is not None:
                return info
            i += 1
        return FetchDataInfo(fetch_offset=offset)

    def offset_position(self, offset: int) -> tuple[int, int]:
        """Where `offset` is in the log (Kafka's LogOffsetMetadata): (base offset of its segment,
        file position of the batch holding it); the log end offset is the active segment's end.
        Two of them on one segment give the bytes between, which is how a parked fetch counts
        what arrived without reading it (Kafka's DelayedFetch). The segment's recent batches
        answer a tailing fetch's offsets; an older one costs an index lookup and a header scan.
        Raises OffsetOutOfRangeError outside [log start offset, log end offset]."""
        if offset >= self.log_end_offset:
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(f"offset {offset} is beyond the log end offset {self.log_end_offset} "
                                            f"of {self.topic}-{self.partition}")
            active = self.segments[-1]
            return active.base_offset, active.size
        if offset < self.local_log_start_offset:
            raise OffsetOutOfRangeError(f"offset {offset} is below the local log start offset "
                                        f"{self.local_log_start_offset} of {self.topic}-{self.partition}")
        segment = self.segments[self._segment_index_for(offset)]
        return segment.base_offset, segment.position_of(offset)

    def _position_of(self, offset: int) -> tuple[int, int]:
        """(segment index, file position) where the batch holding `offset` starts."""
        if offset >= self.log_end_offset:
            return len(self.segments) - 1, self.active_segment.size
        i = self._segment_index_for(offset)
        found = self.segments[i].translate_offset(offset)
        return i, (found[0] if found is not None else self.segments[i].size)

    # -- ListOffsets ---------------------------------------------------------------------
    def fetch_offset_by_timestamp(self, target_timestamp: int) -> TimestampAndOffset | None:
        """Kafka's UnifiedLog.fetchOffsetByTimestamp, incl. -1 latest, -2 earliest, -3 max, and the
        tiered ones: -4 earliest local (the local log start offset; -2's answer on a log that
        is not tiered), -5 latest tiered (the highest offset in remote storage, -1 when nothing
        is), -6 earliest pending upload (KIP-1023: the first offset not yet copied, the log
        start offset while nothing is; offset -1 when a new leader does not know yet what is
        remote). On a log that is not tiered -5 and -6 are "no offset" (offset -1, leader epoch
        -1), as Kafka answers. A timestamp search covers the local segments only (a tiered
        log's remote part is searched by the caller)."""
        if target_timestamp == EARLIEST_TIMESTAMP or (target_timestamp == EARLIEST_LOCAL_TIMESTAMP
                                                     and not self.remote_log_enabled):
            earliest = self.leader_epoch_cache.earliest_entry()
            epoch = earliest[0] if earliest is not None and earliest[1] <= self.log_start_offset else None
            return TimestampAndOffset(-1, self.log_start_offset, epoch)
        if target_timestamp == EARLIEST_LOCAL_TIMESTAMP:
            local = self.local_log_start_offset
            return TimestampAndOffset(-1, local, self.leader_epoch_cache.epoch_for_offset(local))
        if target_timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_end_offset, self.leader_epoch_cache.latest_epoch())
        if target_timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP) \
                and not self.remote_log_enabled:
            return TimestampAndOffset(-1, -1, -1)
        if target_timestamp == LATEST_TIERED_TIMESTAMP:
            highest = self.highest_offset_in_remote_storage
            epoch = self.leader_epoch_cache.epoch_for_offset(highest)
            return TimestampAndOffset(-1, highest, -1 if epoch is None and highest == -1 else epoch)
        if target_timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
            highest = self.highest_offset_in_remote_storage
            if highest == -1:
                if self.local_log_start_offset == self.log_start_offset:  # nothing copied yet
                    return self.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
                return TimestampAndOffset(-1, -1, -1)  # this leader does not know yet what is remote
            pending = max(highest + 1, self.log_start_offset)
            return TimestampAndOffset(-1, pending, self.leader_epoch_cache.epoch_for_offset(pending))
        if target_timestamp == MAX_TIMESTAMP:
            best = self.segments[0]
            for segment in self.segments[1:]:
                if segment.max_timestamp_so_far > best.max_timestamp_so_far:
                    best = segment
            if best.max_timestamp_so_far < 0:
                return None
            return best.offset_of_max_timestamp()
        for segment in list(self.segments):
            if segment.largest_timestamp() >= target_timestamp:
                return segment.find_offset_by_timestamp(target_timestamp, self.local_log_start_offset)
        return None

    # -- DeleteRecords ---------------------------------------------------------------------
    def increment_log_start_offset(self, new_log_start_offset: int) -> list[LogSegment]:
        """DeleteRecords on the leader (and a follower following the leader's start): Kafka's
        maybeIncrementLogStartOffset followed by deleteLogStartOffsetBreachedSegments, in memory
        only. Event loop thread; no file is touched.

        Raises OffsetOutOfRangeError (1) when the offset is negative or above the high watermark.
        An offset at or below the current log start offset changes nothing. Otherwise the log
        start offset moves (reads below it are then OFFSET_OUT_OF_RANGE) and every segment whose
        successor starts at or below it is detached and returned. The detached segments keep
        their fds open for fetch responses still being sent. The caller renames their files with
        `mark_segments_deleted` (a restart finishes removing `*.deleted` files, so the deletion
        survives a crash before the log-start-offset checkpoint is written) and removes them with
        `delete_segment_files` once file.delete.delay.ms has passed, both in a worker thread
        (LogManager.schedule_segment_deletion). The active segment always stays.
        """
        if new_log_start_offset < 0:
            raise OffsetOutOfRangeError(f"The offset {new_log_start_offset} for partition "
                                        f"{self.topic}-{self.partition} is not valid")
        if new_log_start_offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {new_log_start_offset} of partition "
                f"{self.topic}-{self.partition} since it is larger than the high watermark "
                f"{self.high_watermark}")
        if new_log_start_offset <= self.log_start_offset:
            return []
        self.log_start_offset = new_log_start_offset
        self.recovery_point = max(self.recovery_point, new_log_start_offset)
        # The epoch cache only needs rewriting when a whole epoch falls below the new start:
        # otherwise its first entry already names the epoch of the first readable batch. Kafka
        # rewrites it asynchronously; here the (rare) rewrite is a small checkpoint file, which
        # the background flusher writes (truncate_from_start only marks it dirty).
        starts = [start for _, start in self.leader_epoch_cache.entries()]
        if bisect.bisect_right(starts, new_log_start_offset) >= 2:
            self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
        keep_from = bisect.bisect_right(self._bases, new_log_start_offset) - 1
        if keep_from <= 0:
            return []
        with self._lock:
            doomed = self.segments[:keep_from]
            del self.segments[:keep_from]
            del self._bases[:keep_from]
        return doomed

    def delete_records_before(self, new_log_start_offset: int) -> list[LogSegment]:
        """`increment_log_start_offset`, then `mark_segments_deleted` on what it detached, in the
        caller's thread (blocking: tests, and callers already off the event loop)."""
        doomed = self.increment_log_start_offset(new_log_start_offset)
        mark_segments_deleted(doomed)
        return doomed

    def retention_start_offset(self, now_ms: int) -> int | None:
        """Kafka's deleteRetentionMsBreachedSegments + deleteRetentionSizeBreachedSegments:
        the base offset of the first segment retention keeps, or None when nothing goes.

        Only with cleanup.policy containing delete. Candidates are the oldest segments whose
        successor starts at or below the high watermark (never the active segment, never
        unreplicated data). By time: a segment goes when its largest timestamp is older than
        retention.ms (< 0: forever). By size: the oldest segments go while the log stays at or
        above retention.bytes without them (< 0: unbounded). Hand the result to
        `increment_log_start_offset`.

        A tiered log copying to remote storage (`remote_log_copy_enabled`) applies its local
        retention instead (local.retention.ms/bytes, -2 meaning retention.*) and a segment is a
        candidate only once wholly copied (its last offset at or below
        highest_offset_in_remote_storage) or below the log start offset (Kafka's
        isSegmentEligibleForDeletion): hand the result to `increment_local_log_start_offset`.
        """
        cfg = self.config
        if not cfg.delete:
            return None
        tiered = self.remote_log_copy_enabled
        retention_ms = cfg.local_retention_ms_effective if tiered else cfg.retention_ms
        retention_bytes = cfg.local_retention_bytes_effective if tiered else cfg.retention_bytes
        segments = self.segments
        candidates = 0
        for i in range(len(segments) - 1):
            upper = segments[i + 1].base_offset
            if upper > self.high_watermark:
                break
            if tiered and not (upper - 1 <= self.highest_offset_in_remote_storage or self.log_start_offset >= upper):
                break  # not in remote storage yet: the local copy is the only one
            candidates = i + 1
        drop = 0
        if retention_ms >= 0:
            while drop < candidates and now_ms - segments[drop].largest_timestamp() > retention_ms:
                drop += 1
        if retention_bytes >= 0:
            excess = sum(s.size for s in segments[drop:]) - retention_bytes
            while drop < candidates and excess - segments[drop].size >= 0:
                excess -= segments[drop].size
                drop += 1
        return segments[drop].base_offset if drop else None

    def delete_segment_files(self, segments: list[LogSegment], snapshots: bool = True) -> None:
        """Close and remove segments detached by `increment_log_start_offset` (or a truncation),
        with their producer snapshots unless `snapshots` is False (blocking: a worker thread)."""
        from pybroker.log.producer_state import snapshot_file

        for segment in segments:
            segment.delete()
            if snapshots:
                snapshot_file(self.dir, segment.base_offset).unlink(missing_ok=True)

    # -- truncation, lifecycle -------------------------------------------------------------
    def truncate_to(self, target_offset: int, now_ms: int) -> bool:
        """Remove everything at and above target_offset (follower truncation); True if it did.
        Blocking: the segment files are removed and the last one cut here."""
        return self._truncate(target_offset, now_ms, defer=False).truncated

    def truncate_to_deferred(self, target_offset: int, now_ms: int) -> DeferredTruncation:
        """`truncate_to`, leaving the slow file work to the caller (a follower's fetcher, on the
        event loop): the log reads as truncated when this returns, the segments above the cut are
        detached and renamed `*.deleted` (their base offsets may come back), and what is left is
        in the DeferredTruncation (see there)."""
        return self._truncate(target_offset, now_ms, defer=True)

    def _truncate(self, target_offset: int, now_ms: int, defer: bool) -> DeferredTruncation:
        if target_offset < 0:
            raise ValueError(f"cannot truncate to negative offset {target_offset}")
        if target_offset >= self.log_end_offset:
            # the epoch cache still loses an entry starting at the log end: a replica that led an
            # epoch and appended nothing before another leader took over holds one, and would
            # otherwise keep fetching with that epoch, which the leader answers with a diverging
            # epoch again and again (Kafka's UnifiedLog.truncateTo does the same)
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return DeferredTruncation(False, [], None)
        if target_offset < self.segments[0].base_offset:
            return self._truncate_fully(target_offset, now_ms, defer)
        with self._lock:
            keep = bisect.bisect_right(self._bases, target_offset)
            doomed = self.segments[keep:]
            del self.segments[keep:]
            del self._bases[keep:]
        _discard_segments(doomed, defer)
        active = self.active_segment
        active.truncate_to(target_offset, now_ms, defer_ftruncate=defer)
        # A target inside a batch drops the whole batch: the LEO is what the file now ends at.
        self.log_end_offset = active.read_next_offset()
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.producer_state.delete_snapshots_after(self.log_end_offset)
        self.txn_index.truncate_to(self.log_end_offset)
        self._rebuild_producer_state(now_ms)
        return DeferredTruncation(True, doomed if defer else [], active if active.truncation_pending else None)

    def truncate_fully_and_start_at(self, new_offset: int, now_ms: int) -> None:
        """Drop every segment and start an empty log at `new_offset` (blocking)."""
        self._truncate_fully(new_offset, now_ms, defer=False)

    def truncate_fully_and_start_at_deferred(self, new_offset: int, now_ms: int) -> DeferredTruncation:
        """`truncate_fully_and_start_at`, the old segments renamed `*.deleted` and left to the caller."""
        return self._truncate_fully(new_offset, now_ms, defer=True)

    def _truncate_fully(self, new_offset: int, now_ms: int, defer: bool) -> DeferredTruncation:
        with self._lock:
            doomed = list(self.segments)
            self.segments.clear()
            self._bases.clear()
        _discard_segments(doomed, defer)
        segment = self._new_segment(new_offset, now_ms)
        with self._lock:
            self.segments.append(segment)
            self._bases.append(new_offset)
        self.log_start_offset = self.log_end_offset = self.recovery_point = new_offset
        self.high_watermark = new_offset
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(new_offset)
        self.txn_index.truncate_to(0)
        return DeferredTruncation(True, doomed if defer else [], None)

    def close(self) -> None:
        """Clean close: write the checkpoints and a producer snapshot at the LEO, close segments
        (trims indexes)."""
        self.flush_metadata()
        self.producer_state.update_map_end_offset(self.log_end_offset)
        self.producer_state.take_snapshot(sync=True)
        with self._lock:
            segments = list(self.segments)
        for segment in segments:
            segment.close()

    def close_handlers(self) -> None:
        with self._lock:
            segments = list(self.segments)
        for segment in segments:
            segment.close_handlers()

    def delete(self) -> None:
        """Close and remove the partition directory (blocking; run off the event loop)."""
        self.close_handlers()
        shutil.rmtree(self.dir, ignore_errors=True)


class DeferredTruncation(NamedTuple):
    """What `UnifiedLog.truncate_to_deferred` left to do, blocking file work for worker threads:

    - `segments`: detached from the log and renamed `*.deleted` (so a segment made later at the
      same base offset never meets their files); remove them after file.delete.delay.ms, as
      retention's, but not the producer snapshots named by their base offsets (the truncation
      removed those above the cut already; a later one of the same name is the live log's);
    - `active`: the log's last segment, whose file still extends past the cut
      (`LogSegment.complete_truncation`; an append to it or a close makes the cut first).

    Nothing of it is visible meanwhile: reads go through the segment list and each segment's
    size and indexes, which changed before this was returned."""

    truncated: bool
    segments: list[LogSegment]
    active: LogSegment | None


def _discard_segments(segments: list[LogSegment], defer: bool) -> None:
    """Segments just detached by a truncation: removed now, or (defer) renamed `*.deleted` for
    a later removal (a few renames: they must precede any new segment at the same offsets)."""
    for segment in segments:
        if defer:
            _rename_to_deleted(segment)
        else:
            segment.delete()


def mark_segments_deleted(segments: list[LogSegment]) -> None:
    """Rename detached segments' files to `*.deleted` (Kafka's asyncDeleteSegment). Blocking:
    a worker thread, or a caller already off the loop. Idempotent: a segment already renamed
    (a cleaner's replaced one) is left as it is."""
    for segment in segments:
        _rename_to_deleted(segment)


def _rename_to_deleted(segment: LogSegment) -> None:
    """Rename a detached segment's files to `*.deleted`; open fds and index maps stay valid, so
    in-flight reads finish. `segment.delete()` then removes the renamed files."""
    if segment.log_path.name.endswith(DELETED_FILE_SUFFIX):
        return
    deleted = Path(str(segment.log_path) + DELETED_FILE_SUFFIX)
    try:
        os.replace(segment.log_path, deleted)
    except FileNotFoundError:
        pass
    segment.log_path = deleted
    for index in (segment.offset_index, segment.time_index):
        if index.path.name.endswith(DELETED_FILE_SUFFIX):
            continue
        try:
            index.rename(Path(str(index.path) + DELETED_FILE_SUFFIX))
        except FileNotFoundError:
            pass
