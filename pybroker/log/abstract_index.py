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

import os
from pathlib import Path
from typing import Any

from pybroker._native import index


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
        self._closed = False
        new = not self.path.exists() or self.path.stat().st_size == 0
        if new and writable:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, self._round_down(max_index_size))
            finally:
                os.close(fd)
        self._length = self.path.stat().st_size
        self._entries = 0 if new else self._length // self.ENTRY_SIZE
        self._mmap: Any = None
        self._map()

    # -- mapping ---------------------------------------------------------------------------
    def _round_down(self, size: int) -> int:
        return size - size % self.ENTRY_SIZE

    def _map(self) -> None:
        # index.MappedFile holds no file descriptor (Python's mmap keeps one of its own: three
        # per partition ran a node with a few thousand partitions out of RLIMIT_NOFILE)
        self._mmap = index.MappedFile(self.path, self._length, self.writable) if self._length else None

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    @property
    def buffer(self) -> Any:
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
            os.truncate(self.path, rounded)
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
            with memoryview(self._mmap) as view:
                view[start:end] = bytes(end - start)
        self._entries = n

    # -- lifecycle -------------------------------------------------------------------------
    def flush(self) -> None:
        with self._lock:
            if self._mmap is not None:
                self._mmap.flush()

    def close(self) -> None:
        if self._closed:
            return
        if self.writable:
            self.trim_to_valid_size()
        with self._lock:
            self._unmap()
            self._closed = True

    def close_handler(self) -> None:
        """Close without trimming (disk failure / delete paths)."""
        with self._lock:
            if not self._closed:
                self._unmap()
                self._closed = True

    def delete(self) -> None:
        self.close_handler()
        self.path.unlink(missing_ok=True)

    def rename(self, new_path: str | os.PathLike[str]) -> None:
        os.replace(self.path, new_path)
        self.path = Path(new_path)

    def read_bytes(self) -> bytes:
        """The valid entries as bytes (tests, debugging)."""
        with memoryview(self.buffer) as view:
            return bytes(view[: self.size_in_bytes()])
