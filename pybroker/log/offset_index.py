"""Sparse offset -> file position index of one log segment (Kafka's OffsetIndex).

File format: `<20-digit base offset>.index`, 8-byte big-endian entries
(relative_offset: u32, position: u32) where relative_offset = offset - base_offset; entries are
strictly increasing in both fields. Preallocated to segment.index.bytes (rounded down to a
multiple of 8) and trimmed on roll/close. No checksum: after an unclean shutdown recovery
rebuilds it from the .log file (`rebuild()` with the entries the recovery scan computed).

The segment appends an entry mapping the *last* offset of a batch to the batch's file position
each time more than index.interval.bytes were written since the previous entry, so a lookup
gives a position at or before the batch holding the target and a short forward scan of batch
headers finishes the job. Example with base 100: entries (5, 0) (23, 4210) (41, 8391):
lookup(130) -> (123, 4210); lookup(104) -> (100, 0), the "no entry" answer.

Concurrency: appended and truncated only by the partition's append path; lookups read the
published prefix. See AbstractIndex for flush.
"""

from __future__ import annotations

import struct

from pybroker._native import index as _index
from pybroker.log.abstract_index import AbstractIndex
from pybroker.log.errors import CorruptIndexError, IndexOffsetError

_ENTRY = struct.Struct(">II")
INT32_MAX = 2**31 - 1


class OffsetIndex(AbstractIndex):
    ENTRY_SIZE = 8

    def can_append_offset(self, offset: int) -> bool:
        rel = offset - self.base_offset
        return 0 <= rel <= INT32_MAX

    def entry(self, n: int) -> tuple[int, int]:
        """(absolute offset, position) of entry `n`."""
        rel, pos = _ENTRY.unpack_from(self.buffer, n * 8)
        return self.base_offset + rel, pos

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty (Kafka's lastOffset)."""
        return self.entry(self._entries - 1)[0] if self._entries else self.base_offset

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, else (base_offset, 0)."""
        rel = target_offset - self.base_offset
        if self._entries == 0 or rel < 0:
            return self.base_offset, 0
        slot = _index.offset_lookup(self.buffer, self._entries, min(rel, 0xFFFFFFFF))
        if slot < 0:
            return self.base_offset, 0
        return self.entry(slot)

    def append(self, offset: int, position: int) -> None:
        if self.is_full():
            raise IndexOffsetError(f"attempt to append to a full index {self.path} ({self._entries} entries)")
        if self._entries and offset <= self.last_offset:
            raise IndexOffsetError(f"attempt to append offset {offset} to {self.path} whose last "
                                   f"offset is {self.last_offset}")
        if not self.can_append_offset(offset):
            raise IndexOffsetError(f"offset {offset} does not fit index {self.path} (base {self.base_offset})")
        _ENTRY.pack_into(self._ensure_mapped(), self._entries * 8, offset - self.base_offset, position)
        self._entries += 1
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset`."""
        rel = offset - self.base_offset
        if rel <= 0 or self._entries == 0:
            keep = 0
        else:
            slot = _index.offset_lookup(self.buffer, self._entries, min(rel, 0xFFFFFFFF))
            if slot < 0:
                keep = 0
            elif self.entry(slot)[0] == offset:
                keep = slot
            else:
                keep = slot + 1
        self._truncate_to_entries(keep)

    def truncate(self) -> None:
        self._truncate_to_entries(0)

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise CorruptIndexError when the file cannot be a valid index (the caller rebuilds it).

        O(1) like Kafka's: length a multiple of 8, last entry after the first, last position
        inside the log. A crash leaves the preallocated tail as (0, 0) entries, which fails the
        second check; the segment never indexes position 0, so a lone (0, 0) fails too.
        """
        if self._length % self.ENTRY_SIZE:
            raise CorruptIndexError(f"index file {self.path} length {self._length} is not a "
                                    f"multiple of {self.ENTRY_SIZE}")
        if not self._entries:
            return
        first_rel, first_pos = _ENTRY.unpack_from(self.buffer, 0)
        last_rel, last_pos = _ENTRY.unpack_from(self.buffer, (self._entries - 1) * 8)
        if last_pos == 0 or last_rel > INT32_MAX or (
                self._entries > 1 and (last_rel <= first_rel or last_pos <= first_pos)):
            raise CorruptIndexError(f"index file {self.path} has a bad last entry ({last_rel}, "
                                    f"{last_pos}) after first ({first_rel}, {first_pos})")
        if log_size is not None and last_pos >= log_size:
            raise CorruptIndexError(f"index file {self.path} points at position {last_pos} past "
                                    f"the end of the log ({log_size} bytes)")
