"""Offset and time index lookups over a buffer (usually an mmap), compiled twin of
`pybroker._pure.index`: same formats, same probe sequence, same results. Also `MappedFile`,
the shared mapping an index lives in.

OffsetIndex entries: 8 bytes (relative_offset u32, position u32); TimeIndex entries:
12 bytes (timestamp i64, relative_offset u32); big-endian. The GIL is held: a lookup is
~20 probes, less than the cost of releasing it.
"""

import os

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from libc.errno cimport errno
from libc.stdint cimport int64_t, uint8_t
from posix.mman cimport MADV_RANDOM, MAP_FAILED, MAP_SHARED, MS_SYNC, PROT_READ, PROT_WRITE, madvise, mmap, msync, munmap

from varint cimport load_be32, load_be64

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12

__all__ = ["OFFSET_ENTRY_SIZE", "TIME_ENTRY_SIZE", "MappedFile", "offset_lookup", "time_lookup"]


cdef const uint8_t *acquire(object buf, Py_buffer *view, Py_ssize_t n_entries,
                            Py_ssize_t entry_size) except NULL:
    PyObject_GetBuffer(buf, view, PyBUF_SIMPLE)
    if n_entries < 0 or n_entries > view.len // entry_size:
        size = view.len
        PyBuffer_Release(view)
        raise ValueError(
            f"{n_entries} entries of {entry_size} bytes do not fit a {size}-byte buffer")
    return <const uint8_t *>view.buf


def offset_lookup(buf, Py_ssize_t n_entries, int64_t target_relative_offset):
    """Slot of the largest offset entry with relative offset <= target, or -1."""
    cdef Py_buffer view
    cdef const uint8_t *p = acquire(buf, &view, n_entries, 8)
    cdef Py_ssize_t lo = 0, hi = n_entries, mid
    while lo < hi:
        mid = <Py_ssize_t>((<size_t>lo + <size_t>hi) >> 1)
        if <int64_t>load_be32(p + mid * 8) <= target_relative_offset:
            lo = mid + 1
        else:
            hi = mid
    PyBuffer_Release(&view)
    return lo - 1


def time_lookup(buf, Py_ssize_t n_entries, int64_t target_timestamp):
    """Slot of the largest time entry with timestamp <= target, or -1."""
    cdef Py_buffer view
    cdef const uint8_t *p = acquire(buf, &view, n_entries, 12)
    cdef Py_ssize_t lo = 0, hi = n_entries, mid
    while lo < hi:
        mid = <Py_ssize_t>((<size_t>lo + <size_t>hi) >> 1)
        if <int64_t>load_be64(p + mid * 12) <= target_timestamp:
            lo = mid + 1
        else:
            hi = mid
    PyBuffer_Release(&view)
    return lo - 1


cdef class MappedFile:
    """A shared mapping of the first `length` bytes of the file at `path` (an index file).

    Unlike Python's mmap it keeps no file descriptor: the file is opened, mapped and closed, so
    an index costs a mapping, not a descriptor (Kafka's indexes cost none either; with Python's
    mmap every partition held three). Supports the buffer protocol (writable when `writable`),
    `flush()` (msync, GIL released), `close()` (refused with BufferError while a view is
    exported, as mmap does), `len()`. Pages are advised MADV_RANDOM: index files are sparse and
    preallocated, and readahead zero-filled whole windows on first touch.
    """

    cdef void *addr
    cdef Py_ssize_t length
    cdef bint writable
    cdef Py_ssize_t exports

    def __cinit__(self, path, Py_ssize_t length, bint writable=True):
        self.addr = NULL
        if length <= 0:
            raise ValueError(f"cannot map {length} bytes")
        fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        cdef int cfd = fd
        cdef int prot = PROT_READ | PROT_WRITE if writable else PROT_READ
        cdef void *addr
        try:
            addr = mmap(NULL, <size_t>length, prot, MAP_SHARED, cfd, 0)
            if addr == MAP_FAILED:
                raise OSError(errno, os.strerror(errno), str(path))
        finally:
            os.close(fd)
        madvise(addr, <size_t>length, MADV_RANDOM)
        self.addr = addr
        self.length = length
        self.writable = writable
        self.exports = 0

    def __dealloc__(self):
        if self.addr != NULL:
            munmap(self.addr, <size_t>self.length)
            self.addr = NULL

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        if self.addr == NULL:
            raise ValueError("mmap closed or invalid")
        if (flags & PyBUF_WRITABLE) and not self.writable:
            raise BufferError("mapping is read-only")
        PyBuffer_FillInfo(buffer, self, self.addr, self.length, not self.writable, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        self.exports -= 1

    def __len__(self):
        if self.addr == NULL:
            raise ValueError("mmap closed or invalid")
        return self.length

    @property
    def closed(self):
        return self.addr == NULL

    def flush(self):
        """msync(MS_SYNC) the whole mapping."""
        if self.addr == NULL:
            raise ValueError("mmap closed or invalid")
        cdef int rc
        with nogil:
            rc = msync(self.addr, <size_t>self.length, MS_SYNC)
        if rc != 0:
            raise OSError(errno, os.strerror(errno))

    def close(self):
        if self.addr == NULL:
            return
        if self.exports:
            raise BufferError("cannot close exported pointers exist")
        munmap(self.addr, <size_t>self.length)
        self.addr = NULL
