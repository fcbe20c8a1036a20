"""Shared mechanics of the mmap'd, preallocated segment indexes (Kafka's AbstractIndex).

An index file holds fixed-size big-endian entries. A writable index is preallocated (a sparse
file) to `max_index_size` rounded down to a multiple of the entry size, so appends never grow
the file; `trim_to_valid_size()` (on roll and close) shrinks it to `entries * entry_size`. The
number of valid entries on open is `file_size // entry_size` for an existing file: that is why a
preallocated file left by a crash reads as "full of zero entries" and fails the sanity check.
Recovery never trusts such a file: it rebuilds every index from the segment it recovers
(`rebuild()` writes the new entries in one go).

Lazy, like Kafka's LazyIndex: a new index makes no file until its first entry is appended (a
partition that never indexes anything costs no index file), an existing one is mapped only when
its entries are first read, and growing the file (`resize` up, as the active segment's indexes
are on open) is deferred to that first mapping. Shrinking happens at once.

Dropped entries are not zeroed (neither are they in Kafka): a tail past `entries` can only
survive in the active segment's preallocated file (every other index is trimmed when its
segment rolls or is recovered), and after a crash the active segment is always recovered,
which rebuilds its indexes.

Concurrency: appends, truncation, resizing and mapping happen on the partition's append path
(the event loop thread, or the loading thread before the log is published); `_lock` guards the
mapping. `flush()` may run in a worker thread: it fsyncs the file by name and holds no lock.
Readers use the published entry count.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from pybroker._native import index


class AbstractIndex:
    ENTRY_SIZE = 0  # set by subclasses

    def __init__(self, path: str | os.PathLike[str], base_offset: int, max_index_size: int,
                 writable: bool = True) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self._lock = threading.Lock()
        self._closed = False
        self._dirty = False  # entries written since the last flush
        self._mmap: Any = None
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            size = -1
        # _disk_length: the file's length (-1: no file yet); _length: the length it has once
        # mapped (a pending growth, or a new index's preallocation, is applied then)
        self._disk_length = size
        if size <= 0:
            self._length = self._round_down(max_index_size) if writable else 0
            self._entries = 0
        else:
            self._length = size
            self._entries = size // self.ENTRY_SIZE

    # -- mapping ---------------------------------------------------------------------------
    def _round_down(self, size: int) -> int:
        return size - size % self.ENTRY_SIZE

    def _ensure_mapped(self) -> Any:
        """Map the file (making or growing it to `_length` first); None when it is empty."""
        if self._mmap is None and self._length:
            with self._lock:
                if self._mmap is None:
                    if self._disk_length != self._length:
                        if not self.writable:
                            raise OSError(f"index file {self.path} is not {self._length} bytes long")
                        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                        try:
                            os.ftruncate(fd, self._length)
                        finally:
                            os.close(fd)
                        self._disk_length = self._length
                    # index.MappedFile holds no file descriptor (Python's mmap keeps one of its
                    # own: three per partition ran a node with a few thousand partitions out of
                    # RLIMIT_NOFILE)
                    self._mmap = index.MappedFile(self.path, self._length, self.writable)
        return self._mmap

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    @property
    def buffer(self) -> Any:
        m = self._ensure_mapped() if self._entries else self._mmap
        return m if m is not None else b""

    @property
    def file_exists(self) -> bool:
        """Whether the index has a file on disk (a new index makes one on its first entry)."""
        return self._disk_length >= 0

    # -- sizes -----------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._length // self.ENTRY_SIZE

    @property
    def preallocated_entries(self) -> int:
        """How many entries a preallocated file of this index holds (segment.index.bytes)."""
        return self._round_down(self.max_index_size) // self.ENTRY_SIZE

    @property
    def length(self) -> int:
        return self._length

    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def size_in_bytes(self) -> int:
        return self._entries * self.ENTRY_SIZE

    def resize(self, new_size: int) -> bool:
        """Set the file length (rounded down to whole entries); True if it changed. A smaller
        file is cut at once; a larger one grows when it is next mapped."""
        rounded = self._round_down(new_size)
        with self._lock:
            if rounded == self._length:
                return False
            # no msync before unmapping: the dirty pages stay in the page cache, and flush()
            # fsyncs the file when it is not mapped (an msync here blocked the loop at each roll)
            self._unmap()
            if 0 <= rounded < self._disk_length:
                os.truncate(self.path, rounded)
                self._disk_length = rounded
            self._length = rounded
            self._entries = min(self._entries, rounded // self.ENTRY_SIZE)
            return True

    def trim_to_valid_size(self) -> None:
        self.resize(self._entries * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Drop every entry and grow back to the preallocated size (Kafka's reset)."""
        self._truncate_to_entries(0)
        self.resize(self.max_index_size)

    def rebuild(self, data: bytes, *, keep_preallocated: bool = False) -> None:
        """Replace the whole index with `data` (whole entries, as recovery computed them) and
        trim the file to it: one write instead of an append per entry. No file is made for an
        index that has none and gets no entries. `keep_preallocated` (the active segment, whose
        index grows back for appends anyway): a file still at its preallocated size keeps it,
        what follows the entries being past `entries` (see the module docstring)."""
        if len(data) % self.ENTRY_SIZE:
            raise ValueError(f"{len(data)} bytes are not whole {self.ENTRY_SIZE}-byte entries")
        with self._lock:
            self._unmap()
            if data or self._disk_length >= 0:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    # an unchanged file (a segment recovered again) is left alone: rewriting it
                    # cost a block reallocation per file, most of a small partition's recovery
                    keep = keep_preallocated and self._disk_length == self._round_down(self.max_index_size)
                    length = self._disk_length if keep else len(data)
                    if self._disk_length != length or os.pread(fd, len(data), 0) != data:
                        view = memoryview(data)
                        written = 0
                        while written < len(data):
                            written += os.pwrite(fd, view[written:], written)
                        if self._disk_length != length:
                            os.ftruncate(fd, length)  # drops the preallocated (maybe stale) tail
                        self._dirty = True
                finally:
                    os.close(fd)
                self._disk_length = length
                self._length = length
            else:
                self._length = 0
            self._entries = len(data) // self.ENTRY_SIZE

    def _truncate_to_entries(self, n: int) -> None:
        self._entries = n

    # -- lifecycle -------------------------------------------------------------------------
    def mark_dirty(self) -> None:
        """Entries were written through the mapping (the subclasses' appends)."""
        self._dirty = True

    def flush(self) -> None:
        """Make the written entries durable: fsync the file, which on Linux also writes the pages
        dirtied through the shared mapping (msync(MS_SYNC) is the same call there). No lock is
        held while it waits, so the append path never blocks on it. Safe from a worker thread;
        a file renamed meanwhile (retention, the cleaner) is synced under its new name."""
        if not self._dirty or self._closed:
            return
        self._dirty = False
        for _ in range(3):
            path = self.path
            if self._disk_length < 0:
                return
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                if self.path == path:
                    return  # deleted
                continue  # renamed while we looked: sync it under its new name
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return

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
        """Rename the file (an index without a file yet just takes the new name)."""
        if self._disk_length >= 0:
            os.replace(self.path, new_path)
        self.path = Path(new_path)

    def read_bytes(self) -> bytes:
        """The valid entries as bytes (tests, debugging)."""
        with memoryview(self.buffer) as view:
            return bytes(view[: self.size_in_bytes()])
