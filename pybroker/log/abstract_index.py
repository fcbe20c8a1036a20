"""Shared mechanics of the mmap'd, preallocated segment indexes (Kafka's AbstractIndex).

An index file holds fixed-size big-endian entries. A new (or reopened active) index is
preallocated to `max_index_size` rounded down to a multiple of the entry size, so appends never
grow the file; `trim_to_valid_size()` (on roll and close) shrinks it to `entries * entry_size`.
The number of valid entries on open is `file_size // entry_size` for an existing file: that is
why a preallocated file left by a crash reads as "full of zero entries" and fails the sanity
check, which makes the loader rebuild it.

Concurrency: appends, truncation and resizing happen on the partition's append path (the event
loop thread); `flush()` may run in a worker thread. `_lock` serialises flush against remapping
so msync never touches an unmapped region. Readers use the published entry count.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path


class AbstractIndex:
    ENTRY_SIZE = 0  # set by subclasses

    def __init__(self, path: str | os.PathLike[str], base_offset: int, max_index_size: int,
                 writable: bool = True) -> None:
        import threading

        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self._lock = threading.Lock()
        new = not self.path.exists() or self.path.stat().st_size == 0
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        self._fd = os.open(self.path, flags, 0o644)
        if new and writable:
            os.ftruncate(self._fd, self._round_down(max_index_size))
            self._entries = 0
        else:
            self._entries = os.fstat(self._fd).st_size // self.ENTRY_SIZE
        self._length = os.fstat(self._fd).st_size
        self._mmap: mmap.mmap | None = None
        self._map()

    # -- mapping ---------------------------------------------------------------------------
    def _round_down(self, size: int) -> int:
        return size - size % self.ENTRY_SIZE

    def _map(self) -> None:
        if self._length == 0:
            self._mmap = None
            return
        access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
        self._mmap = mmap.mmap(self._fd, self._length, access=access)
        if hasattr(mmap, "MADV_RANDOM"):
            # The file is preallocated and sparse: without this, the first touch of each page
            # faults in a whole readahead window that the kernel zero-fills (a fifth of the
            # produce path's CPU in perf). Lookups are binary searches anyway.
            self._mmap.madvise(mmap.MADV_RANDOM)

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    @property
    def buffer(self) -> mmap.mmap | bytes:
        return self._mmap if self._mmap is not None else b""

    # -- sizes -----------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._length // self.ENTRY_SIZE

    @property
    def length(self) -> int:
        return self._length

    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def size_in_bytes(self) -> int:
        return self._entries * self.ENTRY_SIZE

    def resize(self, new_size: int) -> bool:
        """Set the file length (rounded down to whole entries); True if it changed."""
        rounded = self._round_down(new_size)
        with self._lock:
            if rounded == self._length:
                return False
            if self._mmap is not None:
                self._mmap.flush()
            self._unmap()
            os.ftruncate(self._fd, rounded)
            self._length = rounded
            self._entries = min(self._entries, rounded // self.ENTRY_SIZE)
            self._map()
            return True

    def trim_to_valid_size(self) -> None:
        self.resize(self._entries * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Drop every entry and grow back to the preallocated size (used by recovery)."""
        self._truncate_to_entries(0)
        self.resize(self.max_index_size)

    def _truncate_to_entries(self, n: int) -> None:
        # Zero the dropped tail so a later crash cannot resurrect stale entries past the end.
        if self._mmap is not None and n < self._entries:
            start, end = n * self.ENTRY_SIZE, self._entries * self.ENTRY_SIZE
            self._mmap[start:end] = bytes(end - start)
        self._entries = n

    # -- lifecycle -------------------------------------------------------------------------
    def flush(self) -> None:
        with self._lock:
            if self._mmap is not None:
                self._mmap.flush()

    def close(self) -> None:
        if self._fd < 0:
            return
        if self.writable:
            self.trim_to_valid_size()
        with self._lock:
            self._unmap()
            os.close(self._fd)
            self._fd = -1

    def close_handler(self) -> None:
        """Close without trimming (disk failure / delete paths)."""
        with self._lock:
            if self._fd >= 0:
                self._unmap()
                os.close(self._fd)
                self._fd = -1

    def delete(self) -> None:
        self.close_handler()
        self.path.unlink(missing_ok=True)

    def rename(self, new_path: str | os.PathLike[str]) -> None:
        os.replace(self.path, new_path)
        self.path = Path(new_path)

    def read_bytes(self) -> bytes:
        """The valid entries as bytes (tests, debugging)."""
        return bytes(self.buffer[: self.size_in_bytes()])
