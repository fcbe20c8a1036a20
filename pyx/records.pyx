"""Record batch v2 (magic 2) codec, compiled twin of `pybroker._pure.records`.

Same API, formats and exceptions as the pure module (read its docstring for the byte
layout). Buffers are taken with the buffer protocol (bytes, bytearray, memoryview, mmap),
never copied. The loops that touch only bytes -- CRC, `count_records`' framing walk --
run without the GIL, so `trio.to_thread` recovery scans and validation of large batches
overlap with the event loop. Stateless; each call holds its buffers only while it runs.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from varint cimport (VARINT_OK, load_be16, load_be32, load_be64, read_varint, read_varlong,
                     store_be16, store_be32, store_be64, varint_size, varlong_size,
                     write_varint, write_varlong)

from pybroker._native.errors import CorruptRecordError, InvalidRecordError

cdef extern from "crc32c.h" nogil:
    void pb_crc32c_init()
    uint32_t pb_crc32c(uint32_t value, const void *buf, size_t len)

pb_crc32c_init()

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12

DEF HEADER_SIZE = 61
DEF OVERHEAD = 12
DEF MIN_BATCH_LENGTH = 49
DEF CRC_START = 21
DEF NOGIL_CRC = 16384
DEF LOG_APPEND_TIME = 0x08

__all__ = ["BATCH_HEADER_SIZE", "LOG_OVERHEAD", "assign_offsets", "build_batch",
           "count_records", "decode_records", "encode_records", "read_batch_header",
           "scan_batches", "set_log_append_time", "validate_batch"]


cdef inline uint32_t crc_of(const uint8_t *p, Py_ssize_t n) noexcept:
    cdef uint32_t crc
    if n >= NOGIL_CRC:
        with nogil:
            crc = pb_crc32c(0, p, <size_t>n)
        return crc
    return pb_crc32c(0, p, <size_t>n)


cdef inline void get_buffer(object obj, Py_buffer *view) except *:
    PyObject_GetBuffer(obj, view, PyBUF_SIMPLE)


cdef inline int bounds(Py_ssize_t size, Py_ssize_t *pos, Py_ssize_t *end) except -1:
    if end[0] == -1:
        end[0] = size
    if pos[0] < 0 or end[0] < pos[0] or end[0] > size:
        raise ValueError(f"bad range [{pos[0]}, {end[0]}) for a buffer of {size} bytes")
    return 0


cdef tuple parse_header(const uint8_t *p):
    return (<int64_t>load_be64(p), <int32_t>load_be32(p + 8), <int32_t>load_be32(p + 12),
            <int8_t>p[16], load_be32(p + 17), <int16_t>load_be16(p + 21),
            <int32_t>load_be32(p + 23), <int64_t>load_be64(p + 27), <int64_t>load_be64(p + 35),
            <int64_t>load_be64(p + 43), <int16_t>load_be16(p + 51), <int32_t>load_be32(p + 53),
            <int32_t>load_be32(p + 57))


cdef extern from *:
    ctypedef signed char int8_t


def read_batch_header(buf, Py_ssize_t pos=0):
    """The 13 header fields of the batch at `pos`, in header order."""
    cdef Py_buffer view
    get_buffer(buf, &view)
    try:
        if pos < 0:
            raise ValueError("negative position")
        if view.len - pos < HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch header needs {HEADER_SIZE} bytes, {max(view.len - pos, 0)} remain")
        return parse_header(<const uint8_t *>view.buf + pos)
    finally:
        PyBuffer_Release(&view)


def validate_batch(buf, Py_ssize_t pos=0, Py_ssize_t end=-1):
    """Check that exactly one well-formed batch fills buf[pos:end]; return its header."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t size
    cdef int32_t batch_length, last_offset_delta, records_count
    cdef uint32_t stored, computed
    get_buffer(buf, &view)
    try:
        bounds(view.len, &pos, &end)
        p = <const uint8_t *>view.buf + pos
        size = end - pos
        if size < HEADER_SIZE:
            raise CorruptRecordError(f"record batch of {size} bytes is smaller than its header")
        batch_length = <int32_t>load_be32(p + 8)
        if <int64_t>batch_length + OVERHEAD != size:
            raise InvalidRecordError(
                f"batchLength {batch_length} does not match the {size} bytes given")
        if p[16] != 2:
            raise InvalidRecordError(f"unsupported record batch magic {<int8_t>p[16]}")
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batchLength {batch_length} is below the minimum")
        stored = load_be32(p + 17)
        computed = crc_of(p + CRC_START, size - CRC_START)
        if computed != stored:
            raise CorruptRecordError(
                f"record batch CRC {stored:#010x} does not match computed {computed:#010x}")
        records_count = <int32_t>load_be32(p + 57)
        last_offset_delta = <int32_t>load_be32(p + 23)
        if records_count <= 0 or <int64_t>records_count != <int64_t>last_offset_delta + 1:
            raise InvalidRecordError(
                f"recordsCount {records_count} does not match lastOffsetDelta {last_offset_delta}")
        return parse_header(p)
    finally:
        PyBuffer_Release(&view)


def scan_batches(buf, Py_ssize_t pos=0, Py_ssize_t end=-1, bint verify_crc=True):
    """Walk consecutive batches; stop at the first incomplete or invalid one."""
    cdef Py_buffer view
    cdef const uint8_t *base
    cdef const uint8_t *p
    cdef Py_ssize_t remaining, batch_size
    cdef int32_t batch_length
    cdef list entries = []
    error = None
    get_buffer(buf, &view)
    try:
        bounds(view.len, &pos, &end)
        base = <const uint8_t *>view.buf
        while pos < end:
            p = base + pos
            remaining = end - pos
            if remaining < OVERHEAD:
                error = "truncated"
                break
            batch_length = <int32_t>load_be32(p + 8)
            if batch_length < MIN_BATCH_LENGTH:
                error = "length"
                break
            batch_size = <Py_ssize_t>batch_length + OVERHEAD
            if batch_size > remaining:
                error = "truncated"
                break
            if p[16] != 2:
                error = "magic"
                break
            if verify_crc and crc_of(p + CRC_START, batch_size - CRC_START) != load_be32(p + 17):
                error = "crc"
                break
            entries.append((pos, <int64_t>load_be64(p), <int32_t>load_be32(p + 23),
                            <int64_t>load_be64(p + 35), batch_size))
            pos += batch_size
    finally:
        PyBuffer_Release(&view)
    return entries, pos, error


# ---- records section ------------------------------------------------------------------

cdef enum:
    R_OK = 0
    R_VARINT_TRUNCATED
    R_VARINT_TOO_LONG
    R_LENGTH
    R_FIELD_OVERRUN
    R_KEY_LENGTH
    R_VALUE_LENGTH
    R_HEADER_COUNT
    R_HEADER_KEY_LENGTH
    R_HEADER_VALUE_LENGTH
    R_UNREAD
    R_OFFSET_DELTA
    R_TOO_MANY
    R_TOO_FEW
    R_LEFTOVER

cdef struct RecordView:
    int attributes
    int64_t timestamp_delta
    int32_t offset_delta
    Py_ssize_t key_pos
    int32_t key_length
    Py_ssize_t value_pos
    int32_t value_length
    Py_ssize_t headers_pos
    int32_t headers_count
    int32_t length
    Py_ssize_t unread


cdef inline int varint_status(int rc) noexcept nogil:
    return R_VARINT_TRUNCATED if rc == 1 else R_VARINT_TOO_LONG


cdef int parse_record(const uint8_t *p, Py_ssize_t *pos_, Py_ssize_t end,
                      RecordView *rv) noexcept nogil:
    """Validate the framing of the record at pos_; fill rv; advance pos_ past it."""
    cdef Py_ssize_t pos = pos_[0]
    cdef Py_ssize_t body_end
    cdef int32_t length, n, hkey_length, hvalue_length
    cdef int32_t i
    cdef int rc
    rc = read_varint(p, &pos, end, &length)
    if rc:
        return varint_status(rc)
    rv.length = length
    if length < 0 or length > end - pos:
        return R_LENGTH
    body_end = pos + length
    if body_end - pos < 1:
        return R_FIELD_OVERRUN
    rv.attributes = p[pos]
    pos += 1
    rc = read_varlong(p, &pos, body_end, &rv.timestamp_delta)
    if rc:
        return varint_status(rc)
    rc = read_varint(p, &pos, body_end, &rv.offset_delta)
    if rc:
        return varint_status(rc)
    rc = read_varint(p, &pos, body_end, &n)
    if rc:
        return varint_status(rc)
    if n < -1:
        rv.key_length = n
        return R_KEY_LENGTH
    rv.key_length = n
    rv.key_pos = pos
    if n >= 0:
        if n > body_end - pos:
            return R_FIELD_OVERRUN
        pos += n
    rc = read_varint(p, &pos, body_end, &n)
    if rc:
        return varint_status(rc)
    rv.value_length = n
    if n < -1:
        return R_VALUE_LENGTH
    rv.value_pos = pos
    if n >= 0:
        if n > body_end - pos:
            return R_FIELD_OVERRUN
        pos += n
    rc = read_varint(p, &pos, body_end, &n)
    if rc:
        return varint_status(rc)
    rv.headers_count = n
    if n < 0:
        return R_HEADER_COUNT
    rv.headers_pos = pos
    for i in range(n):
        rc = read_varint(p, &pos, body_end, &hkey_length)
        if rc:
            return varint_status(rc)
        if hkey_length < 0:
            rv.key_length = hkey_length
            return R_HEADER_KEY_LENGTH
        if hkey_length > body_end - pos:
            return R_FIELD_OVERRUN
        pos += hkey_length
        rc = read_varint(p, &pos, body_end, &hvalue_length)
        if rc:
            return varint_status(rc)
        if hvalue_length < -1:
            rv.value_length = hvalue_length
            return R_HEADER_VALUE_LENGTH
        if hvalue_length >= 0:
            if hvalue_length > body_end - pos:
                return R_FIELD_OVERRUN
            pos += hvalue_length
    if pos != body_end:
        rv.unread = body_end - pos
        return R_UNREAD
    pos_[0] = pos
    return R_OK


cdef object record_error(int code, RecordView *rv, Py_ssize_t count, Py_ssize_t expected):
    if code == R_VARINT_TRUNCATED:
        msg = "record truncated inside a varint"
    elif code == R_VARINT_TOO_LONG:
        msg = "varint is too long"
    elif code == R_LENGTH:
        msg = f"record length {rv.length} runs past the records section"
    elif code == R_FIELD_OVERRUN:
        msg = "record field runs past the record"
    elif code == R_KEY_LENGTH:
        msg = f"invalid key length {rv.key_length}"
    elif code == R_VALUE_LENGTH:
        msg = f"invalid value length {rv.value_length}"
    elif code == R_HEADER_COUNT:
        msg = f"invalid header count {rv.headers_count}"
    elif code == R_HEADER_KEY_LENGTH:
        msg = f"invalid header key length {rv.key_length}"
    elif code == R_HEADER_VALUE_LENGTH:
        msg = f"invalid header value length {rv.value_length}"
    elif code == R_UNREAD:
        msg = f"record length {rv.length} leaves {rv.unread} unread bytes"
    elif code == R_OFFSET_DELTA:
        msg = f"offset delta {rv.offset_delta} where {count} was expected"
    elif code == R_TOO_MANY:
        msg = f"more than the {expected} declared records"
    elif code == R_TOO_FEW:
        msg = f"{count} records where {expected} were declared"
    else:
        msg = f"{count} records, bytes left after the declared {expected}"
    return InvalidRecordError(msg)


def count_records(buf, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t expected):
    """Check the framing of an uncompressed records section; (count, max timestampDelta).

    Offset deltas must run 0, 1, 2, ... and the count must equal `expected`.
    max_timestamp_delta is 0 for an empty section. Runs without the GIL.
    """
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t count = 0
    cdef int64_t max_delta = 0
    cdef RecordView rv
    cdef int code = R_OK
    get_buffer(buf, &view)
    try:
        bounds(view.len, &pos, &end)
        p = <const uint8_t *>view.buf
        with nogil:
            while pos < end:
                if count >= expected:
                    code = R_TOO_MANY
                    break
                code = parse_record(p, &pos, end, &rv)
                if code != R_OK:
                    break
                if rv.offset_delta != count:
                    code = R_OFFSET_DELTA
                    break
                if count == 0 or rv.timestamp_delta > max_delta:
                    max_delta = rv.timestamp_delta
                count += 1
            if code == R_OK and count != expected:
                code = R_TOO_FEW
        if code != R_OK:
            raise record_error(code, &rv, count, expected)
    finally:
        PyBuffer_Release(&view)
    return count, max_delta


def decode_records(buf, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count):
    """Decode exactly `count` records filling buf[pos:end]."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef const char *c
    cdef RecordView rv
    cdef int code
    cdef Py_ssize_t hpos, i, j
    cdef int32_t hkey_length = 0, hvalue_length = 0
    cdef list out = []
    cdef list headers
    get_buffer(buf, &view)
    try:
        bounds(view.len, &pos, &end)
        if count < 0:
            raise InvalidRecordError(f"negative record count {count}")
        p = <const uint8_t *>view.buf
        c = <const char *>view.buf
        for i in range(count):
            if pos >= end:
                raise InvalidRecordError(f"{i} records where {count} were declared")
            code = parse_record(p, &pos, end, &rv)
            if code != R_OK:
                raise record_error(code, &rv, i, count)
            key = (None if rv.key_length < 0
                   else PyBytes_FromStringAndSize(c + rv.key_pos, rv.key_length))
            value = (None if rv.value_length < 0
                     else PyBytes_FromStringAndSize(c + rv.value_pos, rv.value_length))
            headers = []
            hpos = rv.headers_pos
            for j in range(rv.headers_count):
                read_varint(p, &hpos, end, &hkey_length)  # validated by parse_record
                hkey = PyBytes_FromStringAndSize(c + hpos, hkey_length)
                hpos += hkey_length
                read_varint(p, &hpos, end, &hvalue_length)
                if hvalue_length < 0:
                    headers.append((hkey, None))
                else:
                    headers.append((hkey, PyBytes_FromStringAndSize(c + hpos, hvalue_length)))
                    hpos += hvalue_length
            out.append((rv.attributes, rv.timestamp_delta, rv.offset_delta, key, value,
                        headers))
        if pos != end:
            raise InvalidRecordError(f"{end - pos} bytes left after the {count} declared records")
    finally:
        PyBuffer_Release(&view)
    return out


# ---- encoding -------------------------------------------------------------------------

cdef struct OutBuf:
    uint8_t *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int reserve(OutBuf *o, Py_ssize_t extra) except -1:
    cdef Py_ssize_t need = o.size + extra
    cdef Py_ssize_t cap
    cdef uint8_t *grown
    if need <= o.capacity:
        return 0
    cap = o.capacity * 2 if o.capacity else 256
    while cap < need:
        cap *= 2
    grown = <uint8_t *>realloc(o.data, <size_t>cap)
    if grown == NULL:
        raise MemoryError()
    o.data = grown
    o.capacity = cap
    return 0


cdef inline int32_t check_len(Py_ssize_t n) except? -1:
    if n > 0x7FFFFFFF:
        raise OverflowError(f"{n} does not fit in int32")
    return <int32_t>n


DEF INLINE_BUFFERS = 18


def encode_records(records):
    """Encode `(timestamp_delta, key, value, headers)` tuples; offset delta = index."""
    cdef OutBuf o
    cdef Py_buffer inline_views[INLINE_BUFFERS]
    cdef Py_buffer *views
    cdef Py_ssize_t nviews, acquired, i, n_headers
    cdef int64_t timestamp_delta
    cdef int32_t offset_delta = 0
    cdef Py_ssize_t body
    cdef uint8_t *w
    cdef list hkeys
    o.data = NULL
    o.size = 0
    o.capacity = 0
    try:
        for record in records:
            timestamp_delta_obj, key, value, headers = record
            timestamp_delta = timestamp_delta_obj
            headers = list(headers) if headers is not None else []
            n_headers = len(headers)
            check_len(n_headers)
            # buffers: key, value, then (hkey, hvalue) per header; NULL obj -> null field
            nviews = 2 + 2 * n_headers
            if nviews <= INLINE_BUFFERS:
                views = &inline_views[0]
            else:
                views = <Py_buffer *>malloc(sizeof(Py_buffer) * nviews)
            if views == NULL:
                raise MemoryError()
            acquired = 0
            hkeys = []
            try:
                body = 1 + varlong_size(timestamp_delta) + varint_size(offset_delta)
                body += acquire(key, views, &acquired)
                body += acquire(value, views, &acquired)
                body += varint_size(<int32_t>n_headers)
                for header in headers:
                    hkey, hvalue = header
                    if isinstance(hkey, str):
                        hkey = (<str>hkey).encode()
                    elif hkey is None:
                        raise TypeError("header key must be bytes or str, not None")
                    hkeys.append(hkey)
                    body += acquire(hkey, views, &acquired)
                    body += acquire(hvalue, views, &acquired)
                check_len(body)
                reserve(&o, body + 5)
                w = write_varint(o.data + o.size, <int32_t>body)
                w[0] = 0  # attributes: unused in v2
                w = write_varlong(w + 1, timestamp_delta)
                w = write_varint(w, offset_delta)
                i = 0
                w = emit(w, views, &i)
                w = emit(w, views, &i)
                w = write_varint(w, <int32_t>n_headers)
                while i < acquired:
                    w = emit(w, views, &i)
                o.size = w - o.data
            finally:
                for i in range(acquired):
                    if views[i].len >= 0:  # len -1 marks a null field (no buffer taken)
                        PyBuffer_Release(&views[i])
                if views != &inline_views[0]:
                    free(views)
            if offset_delta == 0x7FFFFFFF:
                raise OverflowError("more than 2**31 records")
            offset_delta += 1
        return PyBytes_FromStringAndSize(<char *>o.data, o.size)
    finally:
        free(o.data)


cdef Py_ssize_t acquire(object obj, Py_buffer *views, Py_ssize_t *acquired) except -1:
    """Take obj's buffer into views[acquired] (obj None: a null field); its encoded size."""
    cdef Py_buffer *v = &views[acquired[0]]
    if obj is None:
        v.len = -1
        acquired[0] += 1
        return 1
    PyObject_GetBuffer(obj, v, PyBUF_SIMPLE)
    acquired[0] += 1
    if v.len > 0x7FFFFFFF:
        raise OverflowError(f"{v.len} does not fit in int32")
    return varint_size(<int32_t>v.len) + v.len


cdef inline uint8_t *emit(uint8_t *w, Py_buffer *views, Py_ssize_t *i) noexcept:
    cdef Py_buffer *v = &views[i[0]]
    i[0] += 1
    if v.len < 0:
        return write_varint(w, -1)
    w = write_varint(w, <int32_t>v.len)
    memcpy(w, v.buf, <size_t>v.len)
    return w + v.len


def build_batch(records_section, int64_t base_offset, int32_t partition_leader_epoch,
                int16_t attributes, int32_t last_offset_delta, int64_t base_timestamp,
                int64_t max_timestamp, int64_t producer_id, int16_t producer_epoch,
                int32_t base_sequence, int32_t records_count):
    """Header + `records_section` with batchLength and the CRC computed."""
    cdef Py_buffer view
    cdef uint8_t *p
    get_buffer(records_section, &view)
    try:
        batch_length = check_len(MIN_BATCH_LENGTH + view.len)
        out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + view.len)
        p = <uint8_t *>PyBytes_AS_STRING(out)
        store_be64(p, <uint64_t>base_offset)
        store_be32(p + 8, <uint32_t>batch_length)
        store_be32(p + 12, <uint32_t>partition_leader_epoch)
        p[16] = 2
        store_be16(p + 21, <uint16_t>attributes)
        store_be32(p + 23, <uint32_t>last_offset_delta)
        store_be64(p + 27, <uint64_t>base_timestamp)
        store_be64(p + 35, <uint64_t>max_timestamp)
        store_be64(p + 43, <uint64_t>producer_id)
        store_be16(p + 51, <uint16_t>producer_epoch)
        store_be32(p + 53, <uint32_t>base_sequence)
        store_be32(p + 57, <uint32_t>records_count)
        memcpy(p + HEADER_SIZE, view.buf, <size_t>view.len)
        store_be32(p + 17, crc_of(p + CRC_START, HEADER_SIZE - CRC_START + view.len))
    finally:
        PyBuffer_Release(&view)
    return out


cdef uint8_t *writable_header(object buf, Py_buffer *view, Py_ssize_t pos) except NULL:
    """Acquire buf (must be writable, >= 61 bytes at pos); caller releases view."""
    get_buffer(buf, view)
    try:
        if view.readonly:
            raise TypeError("buffer is read-only")
        if pos < 0:
            raise ValueError("negative position")
        if view.len - pos < HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch header needs {HEADER_SIZE} bytes, {max(view.len - pos, 0)} remain")
    except BaseException:
        PyBuffer_Release(view)
        raise
    return <uint8_t *>view.buf + pos


def assign_offsets(buf, Py_ssize_t pos, int64_t base_offset, int32_t partition_leader_epoch):
    """Rewrite baseOffset and partitionLeaderEpoch in place (both outside the CRC)."""
    cdef Py_buffer view
    cdef uint8_t *p = writable_header(buf, &view, pos)
    store_be64(p, <uint64_t>base_offset)
    store_be32(p + 12, <uint32_t>partition_leader_epoch)
    PyBuffer_Release(&view)


def set_log_append_time(buf, Py_ssize_t pos, int64_t timestamp_ms):
    """Mark the batch LogAppendTime: attribute bit 3 and max timestamp; new CRC.

    The base timestamp stays as the producer wrote it, as Kafka's setMaxTimestamp does;
    readers take every record's timestamp from maxTimestamp in a LogAppendTime batch."""
    cdef Py_buffer view
    cdef uint8_t *p = writable_header(buf, &view, pos)
    cdef int32_t batch_length
    try:
        batch_length = <int32_t>load_be32(p + 8)
        if batch_length < MIN_BATCH_LENGTH or pos + OVERHEAD + <Py_ssize_t>batch_length > view.len:
            raise CorruptRecordError(f"batchLength {batch_length} does not fit the buffer")
        store_be16(p + 21, load_be16(p + 21) | LOG_APPEND_TIME)
        store_be64(p + 35, <uint64_t>timestamp_ms)
        store_be32(p + 17, crc_of(p + CRC_START, OVERHEAD + batch_length - CRC_START))
    finally:
        PyBuffer_Release(&view)
