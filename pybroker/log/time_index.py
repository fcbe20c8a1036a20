"""Sparse timestamp -> offset index of one log segment (Kafka's TimeIndex).

File format: `<20-digit base offset>.timeindex`, 12-byte big-endian entries
(timestamp: i64, relative_offset: u32); both fields non-decreasing, timestamps strictly
increasing between consecutive entries. Preallocated to segment.index.bytes rounded down to a
multiple of 12 (10485760 -> 10485756) and trimmed on roll/close.

An entry is written together with an offset-index entry, and only when the segment's max
timestamp so far grew: (max_timestamp_so_far, last offset of the batch that carried it). On roll
and close the final max is appended even into a full index (Kafka's skipFullCheck), so the last
entry always holds the segment's largest timestamp; retention reads it.

lookup(ts) returns the largest entry with timestamp <= ts, else (-1, base_offset); the segment
then scans batches from the matching offset-index position.

Concurrency: as OffsetIndex.
"""

from __future__ import annotations

import struct

from pybroker._native import index as _index
from pybroker.log.abstract_index import AbstractIndex
from pybroker.log.errors import CorruptIndexError, IndexOffsetError

_ENTRY = struct.Struct(">qI")
NO_TIMESTAMP = -1


class TimeIndex(AbstractIndex):
    ENTRY_SIZE = 12

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._last_entry: tuple[int, int] | None = None  # read from the file when first asked

    def entry(self, n: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of entry `n`."""
        ts, rel = _ENTRY.unpack_from(self.buffer, n * 12)
        return ts, self.base_offset + rel

    def _last_entry_from_file(self) -> tuple[int, int]:
        return self.entry(self._entries - 1) if self._entries else (NO_TIMESTAMP, self.base_offset)

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        if self._last_entry is None:
            self._last_entry = self._last_entry_from_file()
        return self._last_entry

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        if self._entries == 0:
            return NO_TIMESTAMP, self.base_offset
        slot = _index.time_lookup(self.buffer, self._entries, target_timestamp)
        if slot < 0:
            return NO_TIMESTAMP, self.base_offset
        return self.entry(slot)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append (timestamp, offset) if timestamp is larger than the last entry's."""
        if not skip_full_check and self.is_full():
            raise IndexOffsetError(f"attempt to append to a full time index {self.path}")
        last_ts, last_offset = self.last_entry
        if self._entries and offset < last_offset:
            raise IndexOffsetError(f"attempt to append offset {offset} to time index {self.path} "
                                   f"whose last offset is {last_offset}")
        if self._entries and timestamp < last_ts:
            raise IndexOffsetError(f"attempt to append timestamp {timestamp} to time index "
                                   f"{self.path} whose last timestamp is {last_ts}")
        if timestamp > last_ts:
            if self._entries >= self.max_entries:
                # skip_full_check on a trimmed (full) index: grow by one entry, as Kafka's
                # remapped file does when the final max timestamp is added on close.
                self.resize(self._length + self.ENTRY_SIZE)
            _ENTRY.pack_into(self._ensure_mapped(), self._entries * 12, timestamp, offset - self.base_offset)
            self._entries += 1
            self._last_entry = (timestamp, offset)
            self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset`."""
        lo, hi = 0, self._entries  # first slot whose offset >= target
        while lo < hi:
            mid = (lo + hi) // 2
            if self.entry(mid)[1] < offset:
                lo = mid + 1
            else:
                hi = mid
        self._truncate_to_entries(lo)
        self._last_entry = self._last_entry_from_file()

    def truncate(self) -> None:
        self._truncate_to_entries(0)
        self._last_entry = (NO_TIMESTAMP, self.base_offset)

    def reset(self) -> None:
        super().reset()
        self._last_entry = (NO_TIMESTAMP, self.base_offset)

    def rebuild(self, data: bytes, *, keep_preallocated: bool = False) -> None:
        super().rebuild(data, keep_preallocated=keep_preallocated)
        self._last_entry = None

    def sanity_check(self) -> None:
        if self._length % self.ENTRY_SIZE:
            raise CorruptIndexError(f"time index file {self.path} length {self._length} is not a "
                                    f"multiple of {self.ENTRY_SIZE}")
        if not self._entries:
            return
        first_ts, first_offset = self.entry(0)
        last_ts, last_offset = self.last_entry
        if last_ts < first_ts or last_offset < first_offset or (
                self._entries > 1 and last_ts == first_ts):
            raise CorruptIndexError(f"time index file {self.path} has a bad last entry "
                                    f"({last_ts}, {last_offset}) after first ({first_ts}, {first_offset})")
