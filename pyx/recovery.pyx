"""Segment recovery scans, compiled twin of `pybroker._pure.recovery` (read its docstring for
what each walk checks and returns; both twins return identical results).

Both walks run without the GIL from start to end -- the CRC-32C of every batch included -- and
collect their output in C buffers, so the log manager's recovery threads
(`num.recovery.threads.per.data.dir`) recover several partitions at once. The GIL is taken back
only to build the result objects.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc

from varint cimport load_be16, load_be32, load_be64, store_be32, store_be64

cdef extern from "crc32c.h" nogil:
    void pb_crc32c_init()
    uint32_t pb_crc32c(uint32_t value, const void *buf, size_t len)

cdef extern from *:
    ctypedef signed char int8_t

pb_crc32c_init()

DEF HEADER_SIZE = 61
DEF OVERHEAD = 12
DEF MIN_BATCH_LENGTH = 49
DEF CRC_START = 21
DEF INT32_MAX = 2147483647

__all__ = ["producer_batches", "recover_segment"]

cdef enum:
    E_NONE = 0
    E_TRUNCATED
    E_LENGTH
    E_MAGIC
    E_CRC
    E_OFFSET
    E_OFFSET_FULL
    E_TIME_FULL
    E_NOMEM

_ERRORS = (None, "truncated", "length", "magic", "crc", "offset")


cdef struct Growable:
    uint8_t *data
    Py_ssize_t size
    Py_ssize_t cap


cdef int grow(Growable *g, Py_ssize_t extra) noexcept nogil:
    """Room for `extra` more bytes; -1 when out of memory."""
    cdef Py_ssize_t cap
    cdef uint8_t *data
    if g.size + extra <= g.cap:
        return 0
    cap = g.cap * 2 if g.cap else 4096
    while cap < g.size + extra:
        cap *= 2
    data = <uint8_t *>realloc(g.data, <size_t>cap)
    if data == NULL:
        return -1
    g.data = data
    g.cap = cap
    return 0


cdef struct Scan:
    Py_ssize_t valid
    int64_t next_offset
    int64_t max_ts
    int64_t max_ts_offset
    Py_ssize_t last_index_entry
    Py_ssize_t offset_entries
    Py_ssize_t time_entries
    Py_ssize_t producer_batches
    int error


cdef void scan(const uint8_t *base, Py_ssize_t end, int64_t base_offset, Py_ssize_t interval,
               int32_t latest_epoch, Py_ssize_t max_offset_entries, Py_ssize_t max_time_entries,
               bint final_time_entry, Scan *s, Growable *oi, Growable *ti, Growable *ep) noexcept nogil:
    cdef const uint8_t *p
    cdef Py_ssize_t remaining, size
    cdef int32_t batch_length, last_delta, epoch
    cdef int64_t batch_base, last, batch_max_ts, time_last_ts = -1
    s.valid = 0
    s.next_offset = base_offset
    s.max_ts = -1
    s.max_ts_offset = base_offset
    s.last_index_entry = 0
    s.offset_entries = 0
    s.time_entries = 0
    s.producer_batches = 0
    s.error = E_NONE
    while s.valid < end:
        p = base + s.valid
        remaining = end - s.valid
        if remaining < OVERHEAD:
            s.error = E_TRUNCATED
            break
        batch_length = <int32_t>load_be32(p + 8)
        if batch_length < MIN_BATCH_LENGTH:
            s.error = E_LENGTH
            break
        size = <Py_ssize_t>batch_length + OVERHEAD
        if size > remaining:
            s.error = E_TRUNCATED
            break
        if p[16] != 2:
            s.error = E_MAGIC
            break
        if pb_crc32c(0, p + CRC_START, <size_t>(size - CRC_START)) != load_be32(p + 17):
            s.error = E_CRC
            break
        batch_base = <int64_t>load_be64(p)
        last_delta = <int32_t>load_be32(p + 23)
        last = batch_base + last_delta
        if batch_base < s.next_offset or last_delta < 0 or last - base_offset < 0 \
                or last - base_offset > INT32_MAX:
            s.error = E_OFFSET
            break
        batch_max_ts = <int64_t>load_be64(p + 35)
        if batch_max_ts > s.max_ts:
            s.max_ts = batch_max_ts
            s.max_ts_offset = last
        if s.valid - s.last_index_entry > interval:
            if s.offset_entries >= max_offset_entries:
                s.error = E_OFFSET_FULL
                return
            if grow(oi, 8) < 0:
                s.error = E_NOMEM
                return
            store_be32(oi.data + oi.size, <uint32_t>(last - base_offset))
            store_be32(oi.data + oi.size + 4, <uint32_t>s.valid)
            oi.size += 8
            s.offset_entries += 1
            if s.max_ts > time_last_ts:
                if s.time_entries >= max_time_entries:
                    s.error = E_TIME_FULL
                    return
                if grow(ti, 12) < 0:
                    s.error = E_NOMEM
                    return
                store_be64(ti.data + ti.size, <uint64_t>s.max_ts)
                store_be32(ti.data + ti.size + 8, <uint32_t>(s.max_ts_offset - base_offset))
                ti.size += 12
                s.time_entries += 1
                time_last_ts = s.max_ts
            s.last_index_entry = s.valid
        epoch = <int32_t>load_be32(p + 12)
        if <int64_t>load_be64(p + 43) >= 0:
            s.producer_batches += 1
        s.valid += size
        s.next_offset = last + 1
        if epoch >= 0 and epoch > latest_epoch:
            if grow(ep, 12) < 0:
                s.error = E_NOMEM
                return
            store_be32(ep.data + ep.size, <uint32_t>epoch)
            store_be64(ep.data + ep.size + 4, <uint64_t>batch_base)
            ep.size += 12
            latest_epoch = epoch
    if final_time_entry and s.max_ts > time_last_ts:
        if grow(ti, 12) < 0:
            s.error = E_NOMEM
            return
        store_be64(ti.data + ti.size, <uint64_t>s.max_ts)
        store_be32(ti.data + ti.size + 8, <uint32_t>(s.max_ts_offset - base_offset))
        ti.size += 12


def recover_segment(buf, int64_t base_offset, Py_ssize_t index_interval_bytes, int32_t latest_epoch,
                    Py_ssize_t max_offset_entries, Py_ssize_t max_time_entries, bint final_time_entry=True):
    """Kafka's LogSegment.recover walk over `buf` (one .log file's bytes); see the pure twin."""
    cdef Py_buffer view
    cdef Scan s
    cdef Growable oi, ti, ep
    cdef Py_ssize_t i
    oi.data = ti.data = ep.data = NULL
    oi.size = ti.size = ep.size = 0
    oi.cap = ti.cap = ep.cap = 0
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            scan(<const uint8_t *>view.buf, view.len, base_offset, index_interval_bytes, latest_epoch,
                 max_offset_entries, max_time_entries, final_time_entry, &s, &oi, &ti, &ep)
        if s.error == E_NOMEM:
            raise MemoryError()
        if s.error == E_OFFSET_FULL:
            raise ValueError(f"the offset index is full ({s.offset_entries} entries)")
        if s.error == E_TIME_FULL:
            raise ValueError(f"the time index is full ({s.time_entries} entries)")
        epochs = []
        for i in range(0, ep.size, 12):
            epochs.append((<int32_t>load_be32(ep.data + i), <int64_t>load_be64(ep.data + i + 4)))
        return (s.valid, s.next_offset,
                PyBytes_FromStringAndSize(<char *>oi.data, oi.size) if oi.size else b"",
                PyBytes_FromStringAndSize(<char *>ti.data, ti.size) if ti.size else b"",
                s.max_ts, s.max_ts_offset, s.last_index_entry, epochs, s.producer_batches,
                _ERRORS[s.error])
    finally:
        PyBuffer_Release(&view)
        free(oi.data)
        free(ti.data)
        free(ep.data)


cdef tuple parse_header(const uint8_t *p):
    return (<int64_t>load_be64(p), <int32_t>load_be32(p + 8), <int32_t>load_be32(p + 12),
            <int8_t>p[16], load_be32(p + 17), <int16_t>load_be16(p + 21),
            <int32_t>load_be32(p + 23), <int64_t>load_be64(p + 27), <int64_t>load_be64(p + 35),
            <int64_t>load_be64(p + 43), <int16_t>load_be16(p + 51), <int32_t>load_be32(p + 53),
            <int32_t>load_be32(p + 57))


cdef int walk_producers(const uint8_t *base, Py_ssize_t pos, Py_ssize_t end, int64_t start_offset,
                        Growable *out) noexcept nogil:
    cdef const uint8_t *p
    cdef Py_ssize_t size
    while pos + HEADER_SIZE <= end:
        p = base + pos
        size = <Py_ssize_t><int32_t>load_be32(p + 8) + OVERHEAD
        if size < HEADER_SIZE or pos + size > end:
            break
        if <int64_t>load_be64(p + 43) >= 0 and \
                <int64_t>load_be64(p) + <int32_t>load_be32(p + 23) >= start_offset:
            if grow(out, sizeof(Py_ssize_t)) < 0:
                return -1
            (<Py_ssize_t *>(out.data + out.size))[0] = pos
            out.size += sizeof(Py_ssize_t)
        pos += size
    return 0


def producer_batches(buf, Py_ssize_t pos, Py_ssize_t end, int64_t start_offset):
    """(position, header) of each batch with a producer id from `pos`; see the pure twin."""
    cdef Py_buffer view
    cdef Growable out
    cdef Py_ssize_t i, at
    cdef int rc
    out.data = NULL
    out.size = out.cap = 0
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if end == -1:
            end = view.len
        if pos < 0 or end < pos or end > view.len:
            raise ValueError(f"bad range [{pos}, {end}) for a buffer of {view.len} bytes")
        with nogil:
            rc = walk_producers(<const uint8_t *>view.buf, pos, end, start_offset, &out)
        if rc < 0:
            raise MemoryError()
        result = []
        for i in range(0, out.size, sizeof(Py_ssize_t)):
            at = (<Py_ssize_t *>(out.data + i))[0]
            result.append((at, parse_header(<const uint8_t *>view.buf + at)))
        return result
    finally:
        PyBuffer_Release(&view)
        free(out.data)
