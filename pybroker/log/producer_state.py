"""Idempotent-producer state of one partition (Kafka's ProducerStateManager).

Per producer id it keeps the epoch, the metadata of the last 5 appended batches (first/last
sequence, first/last offset, max timestamp), the coordinator epoch and the first offset of the
ongoing transaction. Kafka's ProducerAppendInfo is split in two around the write: `prepare()`
(a data batch) and `check_end_txn_marker()` (a marker) apply Kafka's checks without mutating
anything; once the batch is on disk `update()` records a data batch and
`append_end_txn_marker()` a marker, which returns the CompletedTxn the log then indexes
(UnifiedLog._complete_txn: `last_stable_offset(completed)`, then `complete_txn(completed)`).
Recovery replays batches through the same two (`replay_batch`), unchecked.

Transactions: the first transactional data batch of a producer opens its transaction
(current_txn_first_offset, also kept in `ongoing_txns`); its COMMIT/ABORT marker closes it, and
the marker's epoch and coordinator epoch become the producer's. The first unstable offset is
the smallest first offset of an open transaction.

Rules (origin "client"; "coordinator" checks the epoch only; producer_id == -1 skips everything):
- a batch whose (first_seq, last_seq) equals one of the producer's cached 5, same epoch, is a
  duplicate: the original offsets are returned and nothing is appended;
- epoch lower than the current one -> INVALID_PRODUCER_EPOCH (47) (Kafka >= 2.7 answers this
  instead of PRODUCER_FENCED for data batches);
- a new (higher) epoch must start at sequence 0, unless the producer has no epoch yet ->
  OUT_OF_ORDER_SEQUENCE_NUMBER (45);
- same epoch: base_sequence must be last_seq + 1, wrapping from INT32_MAX to 0 (45). A producer
  with no state (unknown, or expired) is accepted at any sequence, as in Kafka since KIP-360.

Snapshots: `<20-digit offset>.snapshot` in the partition dir, Kafka's layout byte for byte:
version i16 (1), crc u32 (CRC-32C of everything after the crc field), then an array (i32 count)
of 46-byte entries: producer_id i64, epoch i16, last_sequence i32, last_offset i64,
offset_delta i32, timestamp i64, coordinator_epoch i32, current_txn_first_offset i64 (-1 none).
Like Kafka, a snapshot holds only each producer's *last* batch, so after a reload duplicate
detection covers one batch until new appends refill the cache. The snapshot's offset is the map
end offset: the state reflects every batch below it.

Expiry: a producer without an ongoing transaction expires when
now_ms - last_timestamp >= producer.id.expiration.ms (default 86400000); last_timestamp is the
batch max timestamp, as in Kafka.

Concurrency: one partition's append path (event loop thread) owns the instance; snapshot writes
on roll do not fsync (a torn snapshot fails its CRC and is ignored on load).
"""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from pybroker._native import crc32c as _crc32c
from pybroker.log.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from pybroker.records.batch import (
    CONTROL_FLAG,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_SEQUENCE,
    H_LAST_OFFSET_DELTA,
    H_MAX_TIMESTAMP,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    TRANSACTIONAL_FLAG,
)
from pybroker.records.end_txn_marker import COMMIT, EndTransactionMarker

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

SNAPSHOT_FILE_SUFFIX = ".snapshot"
PRODUCER_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # after version (2) and crc (4)


def _crc32c_of(data: bytes | memoryview) -> int:
    return int(_crc32c.crc32c(data))


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence: sequences wrap at INT32_MAX."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def increment_sequence(sequence: int, increment: int) -> int:
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker (Kafka's CompletedTxn): its producer, first data offset,
    the marker's offset, and whether it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batch_metadata: deque[BatchMetadata] = field(default_factory=deque)

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batch_metadata:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def maybe_update_producer_epoch(self, producer_epoch: int) -> None:
        """A new epoch starts a fresh sequence: the cached batches of the old one go."""
        if producer_epoch != self.producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = producer_epoch

    def add_batch(self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        if len(self.batch_metadata) == NUM_BATCHES_TO_RETAIN:
            self.batch_metadata.popleft()
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp


def snapshot_file(dir: Path, offset: int) -> Path:
    return dir / f"{offset:020d}{SNAPSHOT_FILE_SUFFIX}"


def offset_from_snapshot_file(path: Path) -> int | None:
    name = path.name
    if not name.endswith(SNAPSHOT_FILE_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_FILE_SUFFIX)]
    return int(stem) if stem.isdigit() else None


def write_snapshot(path: Path, entries: dict[int, ProducerStateEntry], *, sync: bool) -> None:
    body = bytearray(struct.pack(">i", len(entries)))
    for producer_id, entry in entries.items():
        body += _SNAPSHOT_ENTRY.pack(
            producer_id, entry.producer_epoch, entry.last_seq, entry.last_data_offset,
            entry.last_offset_delta, entry.last_timestamp, entry.coordinator_epoch,
            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset)
    crc = _crc32c_of(bytes(body))
    data = struct.pack(">hI", PRODUCER_SNAPSHOT_VERSION, crc) + bytes(body)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    data = path.read_bytes()
    if len(data) < _SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"snapshot {path} is {len(data)} bytes, shorter than its header")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot {path} has unknown version {version}")
    computed = _crc32c_of(data[_CRC_START:])
    if crc != computed:
        raise CorruptSnapshotError(f"snapshot {path} is corrupt: stored crc {crc}, computed {computed}")
    if count < 0 or len(data) != _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"snapshot {path} declares {count} entries but is {len(data)} bytes")
    out = []
    for i in range(count):
        (producer_id, epoch, seq, offset, offset_delta, timestamp, coordinator_epoch,
         txn_first) = _SNAPSHOT_ENTRY.unpack_from(data, _SNAPSHOT_HEADER.size + i * _SNAPSHOT_ENTRY.size)
        entry = ProducerStateEntry(producer_id, epoch, coordinator_epoch, timestamp,
                                   txn_first if txn_first >= 0 else None)
        if offset >= 0:
            entry.batch_metadata.append(BatchMetadata(seq, offset, offset_delta, timestamp))
        out.append(entry)
    return out


class ProducerStateManager:
    def __init__(self, dir: str | os.PathLike[str],
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.dir = Path(dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.map_end_offset = 0
        self.last_snapshot_offset = 0

    # -- validation (before the write; no mutation) ----------------------------------------
    def prepare(self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int,
                first_offset: int = -1, origin: str = "client") -> BatchMetadata | None:
        """Check a data batch; returns the cached batch a client batch duplicates, else None.

        Origin "client": duplicate detection, then epoch and sequence checks; "coordinator"
        (a coordinator's own transactional records): the epoch check only, as in Kafka.
        Raises InvalidProducerEpochError or OutOfOrderSequenceError.
        """
        if producer_id == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            return None  # unknown producer: any epoch and sequence are accepted
        client = origin == "client"
        if client:
            duplicate = entry.find_duplicate(producer_epoch, base_sequence, last_sequence)
            if duplicate is not None:
                return duplicate
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"epoch {producer_epoch} of producer {producer_id} at offset {first_offset} is "
                f"older than the current epoch {entry.producer_epoch}")
        if not client:
            return None
        if producer_epoch != entry.producer_epoch:
            if base_sequence != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} started epoch {producer_epoch} at sequence "
                    f"{base_sequence} (expected 0; current epoch {entry.producer_epoch})")
        else:
            if not (entry.producer_epoch == NO_PRODUCER_EPOCH or in_sequence(entry.last_seq, base_sequence)):
                raise OutOfOrderSequenceError(
                    f"out of order sequence for producer {producer_id} at offset {first_offset}: "
                    f"{base_sequence} (incoming), {entry.last_seq} (current end sequence)")
        return None

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """The producer has an open transaction here at this epoch (Kafka's
        UnifiedLog.hasOngoingTransaction: its coordinator need not be asked again)."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.producer_epoch == producer_epoch and entry.current_txn_first_offset is not None

    def check_end_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int = -1,
                             transaction_version: int = 0) -> None:
        """A marker's epoch may not be older than the producer's, nor its coordinator epoch older
        than the last marker's (Kafka's appendEndTxnMarker / checkCoordinatorEpoch: a coordinator
        that lost its __transaction_state partition is fenced). A transaction version 2 marker
        (KIP-1228: the coordinator bumped the epoch to end the transaction) must be newer than the
        producer's epoch, not merely as new: one at the current epoch is late or a duplicate.
        Raises InvalidProducerEpochError or TransactionCoordinatorFencedError."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch or (transaction_version >= 2 and producer_epoch == entry.producer_epoch):
            relation = "not newer than" if transaction_version >= 2 else "older than"
            raise InvalidProducerEpochError(
                f"marker epoch {producer_epoch} of producer {producer_id} is {relation} {entry.producer_epoch} "
                f"(TV{transaction_version})")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"coordinator epoch {coordinator_epoch} of a marker for producer {producer_id} is older than "
                f"{entry.coordinator_epoch}")

    # -- recording (after the write) -------------------------------------------------------
    def update(self, producer_id: int, producer_epoch: int, last_sequence: int, first_offset: int,
               last_offset: int, max_timestamp: int, is_transactional: bool = False) -> None:
        """Record an appended data batch (also used when replaying the log)."""
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        entry.add_batch(producer_epoch, last_sequence, last_offset, last_offset - first_offset, max_timestamp)
        if is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self.ongoing_txns[producer_id] = first_offset

    def append_end_txn_marker(self, producer_id: int, producer_epoch: int, marker: EndTransactionMarker,
                              offset: int, timestamp: int) -> CompletedTxn | None:
        """Record a marker appended at `offset` (Kafka's ProducerAppendInfo.appendEndTxnMarker):
        the marker's epoch and coordinator epoch become the producer's (a bumped epoch starts
        again at sequence 0) and its transaction is over. Returns the CompletedTxn when a
        transaction was open (an empty one leaves no trace); the caller indexes it and then
        calls `complete_txn`."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        first = entry.current_txn_first_offset
        entry.maybe_update_producer_epoch(producer_epoch)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = timestamp
        entry.current_txn_first_offset = None
        if first is None:
            return None
        return CompletedTxn(producer_id, first, offset, marker.is_abort)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """Where the LSO stands once `completed` is done (Kafka's lastStableOffset(CompletedTxn)):
        the first offset of another open transaction, else the offset after the marker."""
        others = [first for pid, first in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """The transaction no longer holds back the first unstable offset."""
        self.ongoing_txns.pop(completed.producer_id, None)

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an open transaction, or None."""
        ongoing = self.ongoing_txns
        return min(ongoing.values()) if ongoing else None

    def replay_batch(self, header: tuple, marker: EndTransactionMarker | None = None) -> CompletedTxn | None:
        """Apply a batch read from the log (recovery), unchecked like Kafka's REPLICATION origin.
        A control batch needs its decoded `marker`; its CompletedTxn is returned for the log to
        index and complete, as on append."""
        producer_id = header[H_PRODUCER_ID]
        last_offset = header[H_BASE_OFFSET] + header[H_LAST_OFFSET_DELTA]
        completed = None
        if producer_id != NO_PRODUCER_ID:
            if header[H_ATTRIBUTES] & CONTROL_FLAG:
                if marker is None:  # undecodable: end the transaction all the same, as a commit
                    entry = self.producers.get(producer_id)
                    marker = EndTransactionMarker(COMMIT, entry.coordinator_epoch if entry else -1)
                completed = self.append_end_txn_marker(producer_id, header[H_PRODUCER_EPOCH], marker,
                                                       header[H_BASE_OFFSET], header[H_MAX_TIMESTAMP])
            else:
                base_sequence = header[H_BASE_SEQUENCE]
                last_offset_delta = header[H_LAST_OFFSET_DELTA]
                last_seq = (increment_sequence(base_sequence, last_offset_delta) if base_sequence >= 0
                            else NO_SEQUENCE)
                self.update(producer_id, header[H_PRODUCER_EPOCH], last_seq, header[H_BASE_OFFSET], last_offset,
                            header[H_MAX_TIMESTAMP], bool(header[H_ATTRIBUTES] & TRANSACTIONAL_FLAG))
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        return completed

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    # -- expiry ----------------------------------------------------------------------------
    def is_producer_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (entry.current_txn_first_offset is None
                and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (Kafka's removeExpiredProducers,
        run periodically by LogManager.run_producer_expiration); returns how many went."""
        expired = [pid for pid, e in self.producers.items() if self.is_producer_expired(now_ms, e)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # -- snapshots -------------------------------------------------------------------------
    def snapshot_offsets(self, names: list[str] | None = None) -> list[int]:
        """Offsets of the snapshot files, ascending; `names` is a listing of the dir when the
        caller has one (loading lists it once)."""
        out = []
        if names is None:
            try:
                names = os.listdir(self.dir)
            except (FileNotFoundError, NotADirectoryError):
                return []
        for name in names:
            offset = offset_from_snapshot_file(Path(name)) if name.endswith(SNAPSHOT_FILE_SUFFIX) else None
            if offset is not None:
                out.append(offset)
        return sorted(out)

    def take_snapshot(self, *, sync: bool = False) -> Path | None:
        """Write `<map_end_offset>.snapshot` unless one exists for that offset already."""
        path = snapshot_file(self.dir, self.map_end_offset)
        if self.map_end_offset == self.last_snapshot_offset and path.exists():
            return None
        write_snapshot(path, self.producers, sync=sync)
        self.last_snapshot_offset = self.map_end_offset
        return path

    def load(self, log_start_offset: int, log_end_offset: int, now_ms: int, names: list[str] | None = None) -> int:
        """Load the newest valid snapshot at or below log_end_offset; returns its offset.

        Snapshots above the log end (from a log that was truncated or lost its tail) and corrupt
        ones are deleted. `names`: a listing of the dir, when the caller has one. With no usable snapshot the state starts empty at log_start_offset; the
        caller then replays batches from the returned offset to the log end.
        """
        self.producers.clear()
        self.ongoing_txns.clear()
        for offset in reversed(self.snapshot_offsets(names)):
            path = snapshot_file(self.dir, offset)
            if offset > log_end_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError):
                path.unlink(missing_ok=True)
                continue
            for entry in entries:
                if not self.is_producer_expired(now_ms, entry):
                    self.producers[entry.producer_id] = entry
                    if entry.current_txn_first_offset is not None:
                        self.ongoing_txns[entry.producer_id] = entry.current_txn_first_offset
            self.map_end_offset = self.last_snapshot_offset = offset
            return offset
        self.map_end_offset = self.last_snapshot_offset = log_start_offset
        return log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()
        for snapshot_offset in self.snapshot_offsets():
            snapshot_file(self.dir, snapshot_offset).unlink(missing_ok=True)
        self.map_end_offset = self.last_snapshot_offset = offset

    def delete_snapshots_after(self, offset: int) -> None:
        for snapshot_offset in self.snapshot_offsets():
            if snapshot_offset > offset:
                snapshot_file(self.dir, snapshot_offset).unlink(missing_ok=True)
