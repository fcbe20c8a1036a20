"""Aborted transactions of one partition's log (Kafka's TransactionIndex).

Format of `aborted.txnindex` in the partition dir: a sequence of 34-byte entries in Kafka's
.txnindex layout, big-endian: version i16 (0), producer_id i64, first_offset i64,
last_offset i64 (the ABORT marker's offset), last_stable_offset i64. Kafka keeps one such
file per segment; pybroker keeps one per log (entries are few: one per aborted
transaction) and drops entries below the log start offset lazily (they are never returned
because a fetch starts at or above it). A torn trailing entry is ignored on load.

Only UnifiedLog writes it, when an ABORT marker completes a transaction (UnifiedLog's
`_complete_txn`, Kafka's LogSegment.updateTxnIndex); the marker itself is decoded in
records/end_txn_marker.py and applied to the producer state in log/producer_state.py.

Concurrency: the partition's append path (trio thread) writes; fetches read on that thread;
the cleaner reads a copy of `entries` taken on that thread.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

TXN_INDEX_FILE = "aborted.txnindex"
_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


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
