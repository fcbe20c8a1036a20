"""Transaction state of one partition's log: aborted transactions and the last stable offset
(Kafka's TransactionIndex + the txn parts of ProducerStateManager / UnifiedLog).

Format of `aborted.txnindex` in the partition dir: a sequence of 34-byte entries in Kafka's
.txnindex layout, big-endian: version i16 (0), producer_id i64, first_offset i64,
last_offset i64 (the ABORT marker's offset), last_stable_offset i64. Kafka keeps one such
file per segment; pybroker keeps one per log (entries are few: one per aborted
transaction) and drops entries below the log start offset lazily (they are never returned
because a fetch starts at or above it). A torn trailing entry is ignored on load.

Control (end-transaction marker) batches: one record, key = version i16 (0) + type i16
(0 ABORT, 1 COMMIT), value = version i16 (0) + coordinator epoch i32.

Last stable offset: min(high watermark, first offset of any ongoing transaction), where the
ongoing transactions are the producers whose ProducerStateEntry has
current_txn_first_offset set (set by the first transactional batch, cleared by a marker).

Concurrency: the partition's append path (trio thread) writes; fetches read on that thread.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TXN_INDEX_FILE = "aborted.txnindex"
_ENTRY = struct.Struct(">hqqqq")
_MARKER_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
ABORT = 0
COMMIT = 1


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def marker_key(marker_type: int) -> bytes:
    return _MARKER_KEY.pack(0, marker_type)


def marker_value(coordinator_epoch: int) -> bytes:
    return _MARKER_VALUE.pack(0, coordinator_epoch)


def parse_marker_key(key: bytes | memoryview) -> int:
    """The control record's type (ABORT/COMMIT); ValueError when it is not a marker."""
    if key is None or len(key) < 4:
        raise ValueError("control record key too short")
    version, kind = _MARKER_KEY.unpack_from(key, 0)
    if version != 0 or kind not in (ABORT, COMMIT):
        raise ValueError(f"unknown control record version {version} type {kind}")
    return kind


def build_marker_batch(producer_id: int, producer_epoch: int, marker_type: int, coordinator_epoch: int,
                       timestamp_ms: int) -> bytearray:
    from pybroker.records.batch import build_batch

    return bytearray(build_batch([(timestamp_ms, marker_key(marker_type), marker_value(coordinator_epoch), ())],
                                 producer_id=producer_id, producer_epoch=producer_epoch,
                                 transactional=True, control=True))


def first_unstable_offset(producer_state: Any) -> int | None:
    """Smallest first offset of an ongoing transaction, or None."""
    ongoing = producer_state.ongoing_txns
    return min(ongoing.values()) if ongoing else None


def last_stable_offset(plog: Any) -> int:
    first = first_unstable_offset(plog.producer_state)
    hw = plog.high_watermark
    return hw if first is None else min(hw, first)


class TransactionIndex:
    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.path = Path(dir) / TXN_INDEX_FILE
        self.entries: list[AbortedTxn] = []
        if self.path.exists():
            data = self.path.read_bytes()
            for pos in range(0, len(data) - _ENTRY.size + 1, _ENTRY.size):
                version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
                if version != 0:
                    break
                self.entries.append(AbortedTxn(pid, first, last, lso))

    def append(self, entry: AbortedTxn) -> None:
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            return  # replayed during recovery: already indexed
        self.entries.append(entry)
        with open(self.path, "ab") as f:
            f.write(_ENTRY.pack(0, entry.producer_id, entry.first_offset, entry.last_offset,
                                entry.last_stable_offset))

    def collect(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_offset) (Kafka's collectAbortedTxns)."""
        return [e for e in self.entries if e.last_offset >= fetch_offset and e.first_offset < upper_offset]

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or above `offset` (log truncation)."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self.entries = keep
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            for e in keep:
                f.write(_ENTRY.pack(0, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset))
        os.replace(tmp, self.path)


def complete_txn(plog: Any, producer_id: int, producer_epoch: int, marker_type: int, marker_offset: int) -> None:
    """Apply an end-transaction marker appended at `marker_offset` to the log's producer state:
    the producer's ongoing transaction ends, an aborted one is indexed, and the marker's epoch
    becomes the producer's (a bumped epoch starts again at sequence 0)."""
    psm = plog.producer_state
    entry = psm.producers.get(producer_id)
    if entry is None:
        from pybroker.log.producer_state import ProducerStateEntry

        entry = psm.producers[producer_id] = ProducerStateEntry(producer_id)
    first = entry.current_txn_first_offset
    entry.current_txn_first_offset = None
    psm.ongoing_txns.pop(producer_id, None)
    if producer_epoch != entry.producer_epoch:
        entry.batch_metadata.clear()
        entry.producer_epoch = producer_epoch
    if marker_type == ABORT and first is not None:
        # the LSO recorded is where it stands once this transaction is done (Kafka's lastStableOffset)
        nxt = first_unstable_offset(psm)
        lso = marker_offset + 1 if nxt is None else nxt
        plog.txn_index.append(AbortedTxn(producer_id, first, marker_offset, lso))


def check_marker_epoch(plog: Any, producer_id: int, producer_epoch: int) -> None:
    """A marker's epoch may not be older than the producer's (Kafka's appendEndTxnMarker)."""
    from pybroker.log.errors import InvalidProducerEpochError

    entry = plog.producer_state.producers.get(producer_id)
    if entry is not None and producer_epoch < entry.producer_epoch:
        raise InvalidProducerEpochError(
            f"marker epoch {producer_epoch} of producer {producer_id} is older than {entry.producer_epoch}")
