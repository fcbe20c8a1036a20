"""Offset and time index lookups -- pure-Python twin of `pybroker._native._index`.

Kafka's OffsetIndex entries are 8 bytes (relative_offset u32, position u32) and TimeIndex
entries 12 bytes (timestamp i64, relative_offset u32), big-endian, sorted by key, in a
buffer that is usually an mmap of the index file. Both lookups return the slot of the
largest entry whose key is <= the target, or -1 when there is none.

The search is a plain upper-bound bisection, `mid = (lo + hi) // 2`, probing the same
slots as the compiled twin so the two agree even on an unsorted (corrupt) file.
Stateless; the caller keeps the buffer alive and stable during the call.
"""

from __future__ import annotations

import mmap
import operator
import os
import struct

__all__ = ["OFFSET_ENTRY_SIZE", "TIME_ENTRY_SIZE", "MappedFile", "offset_lookup", "time_lookup"]

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _prepare(buf, n_entries: int, target: int, entry_size: int) -> memoryview:
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    n_entries = operator.index(n_entries)
    target = operator.index(target)
    if not _I64_MIN <= target <= _I64_MAX:
        raise OverflowError("target does not fit in int64")
    if n_entries < 0 or n_entries * entry_size > len(view):
        raise ValueError(
            f"{n_entries} entries of {entry_size} bytes do not fit a {len(view)}-byte buffer")
    return view


def _upper_bound(view: memoryview, n_entries: int, target: int, unpack, entry_size: int) -> int:
    lo, hi = 0, n_entries
    while lo < hi:
        mid = (lo + hi) >> 1
        if unpack(view, mid * entry_size)[0] <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def offset_lookup(buf, n_entries: int, target_relative_offset: int) -> int:
    """Slot of the largest offset entry with relative offset <= target, or -1."""
    view = _prepare(buf, n_entries, target_relative_offset, OFFSET_ENTRY_SIZE)
    return _upper_bound(view, n_entries, target_relative_offset, _U32.unpack_from,
                        OFFSET_ENTRY_SIZE)


def time_lookup(buf, n_entries: int, target_timestamp: int) -> int:
    """Slot of the largest time entry with timestamp <= target, or -1."""
    view = _prepare(buf, n_entries, target_timestamp, TIME_ENTRY_SIZE)
    return _upper_bound(view, n_entries, target_timestamp, _I64.unpack_from, TIME_ENTRY_SIZE)


def MappedFile(path: str | os.PathLike[str], length: int, writable: bool = True) -> mmap.mmap:  # noqa: N802
    """A shared mapping of the first `length` bytes of `path`: the twin of the compiled class, with
    the same calls (buffer protocol, flush, close, len, closed). Python's mmap keeps a duplicate
    descriptor of its own, which the compiled one avoids; nothing else differs."""
    if length <= 0:
        raise ValueError(f"cannot map {length} bytes")
    fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
    try:
        m = mmap.mmap(fd, length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
    finally:
        os.close(fd)
    if hasattr(mmap, "MADV_RANDOM"):
        m.madvise(mmap.MADV_RANDOM)
    return m
