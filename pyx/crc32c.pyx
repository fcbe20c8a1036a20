"""CRC-32C (Castagnoli) over any buffer: a thin wrapper of csrc/crc32c.c.

Chained like the `crc32c` package: crc32c(b, crc32c(a)) == crc32c(a + b). The GIL is
released for buffers of 64 KiB and more; the buffer stays exported (so a bytearray can
not be resized) while the CRC runs. `IMPLEMENTATION` names the path chosen at import.
"""

from libc.stdint cimport uint32_t
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer

cdef extern from "crc32c.h" nogil:
    void pb_crc32c_init()
    uint32_t pb_crc32c(uint32_t value, const void *buf, size_t len)
    uint32_t pb_crc32c_sw(uint32_t value, const void *buf, size_t len)
    const char *pb_crc32c_impl()

pb_crc32c_init()
IMPLEMENTATION = pb_crc32c_impl().decode()

DEF NOGIL_THRESHOLD = 65536


def crc32c(data, uint32_t value=0):
    """CRC-32C of a bytes-like `data`, continuing from a previous result `value`."""
    cdef Py_buffer view
    cdef uint32_t crc
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len >= NOGIL_THRESHOLD:
            with nogil:
                crc = pb_crc32c(value, view.buf, <size_t>view.len)
        else:
            crc = pb_crc32c(value, view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return crc


def crc32c_table(data, uint32_t value=0):
    """The slicing-by-8 fallback, forced (tests and benchmarks)."""
    cdef Py_buffer view
    cdef uint32_t crc
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        crc = pb_crc32c_sw(value, view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return crc
