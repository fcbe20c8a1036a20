"""Offset and time index lookups over a buffer (usually an mmap), compiled twin of
`pybroker._pure.index`: same formats, same probe sequence, same results.

OffsetIndex entries: 8 bytes (relative_offset u32, position u32); TimeIndex entries:
12 bytes (timestamp i64, relative_offset u32); big-endian. The GIL is held: a lookup is
~20 probes, less than the cost of releasing it.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t

from varint cimport load_be32, load_be64

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12

__all__ = ["OFFSET_ENTRY_SIZE", "TIME_ENTRY_SIZE", "offset_lookup", "time_lookup"]


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
