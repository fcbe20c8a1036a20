"""Record batches <-> Arrow columns, compiled twin of `pybroker._pure.arrow_records`.

Same API, results and exceptions as the pure module (read its docstring for the column
descriptions and the rules). Buffers are taken with the buffer protocol (bytes, pyarrow
Buffers, memoryviews), never copied on the way in. The per-row loops of
`assign_partitions`, `encode_grouped` and `RecordColumns.append` run without the GIL, so
a Spark task's sender thread moves bytes while the next batch is encoded.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

from varint cimport (VARINT_OK, VARINT_TRUNCATED, read_varint, read_varlong, varint_size,
                     varlong_size, write_varint, write_varlong)

from pybroker._native.errors import CorruptRecordError, InvalidRecordError

__all__ = ["RecordColumns", "assign_partitions", "encode_grouped", "murmur2"]

DEF INT32_MAX = 0x7FFFFFFF
DEF MAX_HELD = 24


# ---- buffers ----------------------------------------------------------------------------

cdef class _Held:
    """Py_buffers acquired for one call, released when the object goes."""
    cdef Py_buffer views[MAX_HELD]
    cdef int count

    def __cinit__(self):
        self.count = 0

    cdef const uint8_t *take(self, object obj, Py_ssize_t *length) except? NULL:
        if self.count >= MAX_HELD:
            raise RuntimeError("too many buffers")
        PyObject_GetBuffer(obj, &self.views[self.count], PyBUF_SIMPLE)
        self.count += 1
        length[0] = self.views[self.count - 1].len
        return <const uint8_t *>self.views[self.count - 1].buf

    def __dealloc__(self):
        cdef int i
        for i in range(self.count):
            PyBuffer_Release(&self.views[i])


cdef inline uint32_t load_le32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))


cdef inline int64_t load_le(const uint8_t *p, int width) noexcept nogil:
    """A little-endian int32 (width 4) or int64 (width 8), sign-extended."""
    if width == 4:
        return <int32_t>load_le32(p)
    return <int64_t>(<uint64_t>load_le32(p) | (<uint64_t>load_le32(p + 4) << 32))


cdef inline void store_le32(uint8_t *p, int32_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = <uint8_t>u
    p[1] = <uint8_t>(u >> 8)
    p[2] = <uint8_t>(u >> 16)
    p[3] = <uint8_t>(u >> 24)


cdef inline void store_le64(uint8_t *p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>v
    store_le32(p, <int32_t>(<uint32_t>u))
    store_le32(p + 4, <int32_t>(<uint32_t>(u >> 32)))


cdef inline bint is_valid(const uint8_t *bitmap, Py_ssize_t index) noexcept nogil:
    return bitmap == NULL or ((bitmap[index >> 3] >> (index & 7)) & 1)


cdef struct BinCol:
    const uint8_t *validity
    const uint8_t *offsets
    const uint8_t *data
    Py_ssize_t data_len
    Py_ssize_t offset
    int width


cdef struct FixCol:
    const uint8_t *validity
    const uint8_t *values
    Py_ssize_t offset
    int width


cdef struct HdrCol:
    const uint8_t *validity
    const uint8_t *offsets
    Py_ssize_t offset
    int width
    const uint8_t *struct_validity
    Py_ssize_t struct_offset
    int64_t first
    int64_t children
    BinCol key
    BinCol value


cdef int bin_col(_Held held, object column, Py_ssize_t n, str name, BinCol *c) except -1:
    cdef Py_ssize_t vlen = 0, olen, dlen
    cdef int64_t first, last
    validity, offsets, data, offset, width = column
    if width not in (4, 8):
        raise ValueError(f"{name}: offset width must be 4 or 8, not {width}")
    c.width = width
    c.validity = NULL if validity is None else held.take(validity, &vlen)
    c.offsets = held.take(offsets, &olen)
    c.data = held.take(data, &dlen)
    c.data_len = dlen
    c.offset = offset
    if c.offset < 0:
        raise ValueError(f"{name}: negative offset")
    if olen < (c.offset + n + 1) * c.width:
        raise ValueError(f"{name}: offsets buffer too short for {n} rows")
    if c.validity != NULL and vlen * 8 < c.offset + n:
        raise ValueError(f"{name}: validity bitmap too short for {n} rows")
    if n:
        first = load_le(c.offsets + c.offset * c.width, c.width)
        last = load_le(c.offsets + (c.offset + n) * c.width, c.width)
        if first < 0 or last < first or last > dlen:
            raise ValueError(f"{name}: offsets point outside the data buffer")
    return 0


cdef int fix_col(_Held held, object column, Py_ssize_t n, str name, int width,
                 FixCol *c) except -1:
    cdef Py_ssize_t vlen = 0, length
    validity, values, offset = column
    c.width = width
    c.validity = NULL if validity is None else held.take(validity, &vlen)
    c.values = held.take(values, &length)
    c.offset = offset
    if c.offset < 0:
        raise ValueError(f"{name}: negative offset")
    if length < (c.offset + n) * width:
        raise ValueError(f"{name}: values buffer too short for {n} rows")
    if c.validity != NULL and vlen * 8 < c.offset + n:
        raise ValueError(f"{name}: validity bitmap too short for {n} rows")
    return 0


cdef int hdr_col(_Held held, object column, Py_ssize_t n, HdrCol *c) except -1:
    cdef Py_ssize_t vlen = 0, olen, svlen = 0
    cdef int64_t first = 0, last = 0
    validity, offsets, offset, width, struct_validity, struct_offset, key, value = column
    if width not in (4, 8):
        raise ValueError(f"headers: offset width must be 4 or 8, not {width}")
    c.width = width
    c.validity = NULL if validity is None else held.take(validity, &vlen)
    c.offsets = held.take(offsets, &olen)
    c.offset = offset
    if c.offset < 0 or struct_offset < 0:
        raise ValueError("headers: negative offset")
    if olen < (c.offset + n + 1) * c.width:
        raise ValueError(f"headers: offsets buffer too short for {n} rows")
    if c.validity != NULL and vlen * 8 < c.offset + n:
        raise ValueError(f"headers: validity bitmap too short for {n} rows")
    c.struct_validity = NULL if struct_validity is None else held.take(struct_validity, &svlen)
    c.struct_offset = struct_offset
    if n:
        first = load_le(c.offsets + c.offset * c.width, c.width)
        last = load_le(c.offsets + (c.offset + n) * c.width, c.width)
    if first < 0 or last < first:
        raise ValueError("headers: offsets are not monotonic")
    c.first = first
    c.children = last
    if c.struct_validity != NULL and svlen * 8 < c.struct_offset + c.children:
        raise ValueError("headers: struct validity bitmap too short")
    bin_col(held, key, c.struct_offset + c.children, "header key", &c.key)
    bin_col(held, value, c.struct_offset + c.children, "header value", &c.value)
    return 0


# Element access. Returns 0 (valid), 1 (null) or -1 (bad offsets).
cdef inline int bin_get(const BinCol *c, Py_ssize_t i, const uint8_t **p,
                        Py_ssize_t *length) noexcept nogil:
    cdef Py_ssize_t j = c.offset + i
    cdef int64_t start, end
    if not is_valid(c.validity, j):
        return 1
    start = load_le(c.offsets + j * c.width, c.width)
    end = load_le(c.offsets + (j + 1) * c.width, c.width)
    if start < 0 or end < start or end > c.data_len:
        return -1
    p[0] = c.data + start
    length[0] = <Py_ssize_t>(end - start)
    return 0


cdef inline bint fix_get(const FixCol *c, Py_ssize_t i, int64_t *out) noexcept nogil:
    cdef Py_ssize_t j = c.offset + i
    if not is_valid(c.validity, j):
        return False
    out[0] = load_le(c.values + j * c.width, c.width)
    return True


# ---- murmur2 ----------------------------------------------------------------------------

cdef inline int32_t murmur2_c(const uint8_t *data, Py_ssize_t length) noexcept nogil:
    cdef uint32_t m = 0x5BD1E995U
    cdef uint32_t h = 0x9747B28CU ^ <uint32_t>length
    cdef uint32_t k
    cdef Py_ssize_t whole = length & ~(<Py_ssize_t>3)
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t tail = length & 3
    while i < whole:
        k = (<uint32_t>data[i] | (<uint32_t>data[i + 1] << 8) | (<uint32_t>data[i + 2] << 16)
             | (<uint32_t>data[i + 3] << 24))
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
        i += 4
    if tail == 3:
        h ^= <uint32_t>data[whole + 2] << 16
    if tail >= 2:
        h ^= <uint32_t>data[whole + 1] << 8
    if tail >= 1:
        h ^= <uint32_t>data[whole]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return <int32_t>h


def murmur2(data):
    """Java's org.apache.kafka.common.utils.Utils.murmur2 of `data`: a signed int32."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return murmur2_c(<const uint8_t *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


# ---- assign_partitions ------------------------------------------------------------------

cdef enum:
    E_OK = 0
    E_TOPIC = 1
    E_PARTITION = 2
    E_OFFSETS = 3
    E_DEST = 4
    E_NULL_HEADER = 5
    E_NULL_HEADER_KEY = 6
    E_HEADER_OFFSETS = 7
    E_TOO_LONG = 8
    E_MEMORY = 9


def assign_partitions(Py_ssize_t n, key, partition, topic_index, num_partitions, sticky):
    """Destination (topic_base[t] + partition) of each of n rows (see the pure twin)."""
    cdef _Held held = _Held()
    cdef BinCol kc
    cdef FixCol pc
    cdef bint has_key = key is not None, has_part = partition is not None
    cdef const uint8_t *tix = NULL
    cdef Py_ssize_t tlen, topics, t, i
    cdef int64_t total = 0, p, count
    cdef int32_t *base
    cdef int32_t *counts
    cdef int32_t *stick
    cdef uint8_t *w
    cdef const uint8_t *kp
    cdef Py_ssize_t klen
    cdef int rc, err = E_OK
    cdef Py_ssize_t err_row = 0
    cdef int64_t err_value = 0, err_count = 0
    if n < 0:
        raise ValueError("negative row count")
    topics = len(num_partitions)
    if topics == 0 or len(sticky) != topics:
        raise ValueError("num_partitions and sticky must name the same topics (at least one)")
    mem = PyBytes_FromStringAndSize(NULL, 12 * topics)
    base = <int32_t *>PyBytes_AS_STRING(mem)
    counts = base + topics
    stick = counts + topics
    for t in range(topics):
        p = num_partitions[t]
        if p <= 0:
            raise ValueError(f"topic {t} has {p} partitions")
        if not 0 <= sticky[t] < p:
            raise ValueError(f"sticky partition {sticky[t]} out of range for topic {t}")
        base[t] = <int32_t>total
        counts[t] = <int32_t>p
        stick[t] = <int32_t>sticky[t]
        total += p
        if total > INT32_MAX:
            raise ValueError("too many destinations")
    if has_key:
        bin_col(held, key, n, "key", &kc)
    if has_part:
        fix_col(held, partition, n, "partition", 4, &pc)
    if topic_index is not None:
        tix = held.take(topic_index, &tlen)
        if tlen < 4 * n:
            raise ValueError(f"topic_index buffer too short for {n} rows")
    out = PyBytes_FromStringAndSize(NULL, 4 * n)
    w = <uint8_t *>PyBytes_AS_STRING(out)
    with nogil:
        for i in range(n):
            t = 0 if tix == NULL else load_le(tix + 4 * i, 4)
            if t < 0 or t >= topics:
                err, err_row, err_value = E_TOPIC, i, t
                break
            count = counts[t]
            if has_part and fix_get(&pc, i, &p):
                if p < 0 or p >= count:
                    err, err_row, err_value, err_count = E_PARTITION, i, p, count
                    break
            else:
                rc = bin_get(&kc, i, &kp, &klen) if has_key else 1
                if rc < 0:
                    err, err_row = E_OFFSETS, i
                    break
                if rc == 0:
                    p = (<uint32_t>murmur2_c(kp, klen) & 0x7FFFFFFF) % <uint32_t>count
                else:
                    p = stick[t]
            store_le32(w + 4 * i, <int32_t>(base[t] + p))
    if err == E_TOPIC:
        raise ValueError(f"topic index {err_value} out of range in row {err_row}")
    if err == E_PARTITION:
        raise ValueError(f"Invalid partition given with record: {err_value} is not in the range "
                         f"[0...{err_count}] (row {err_row})")
    if err == E_OFFSETS:
        raise ValueError("offsets are not monotonic or point outside the data buffer")
    return out


# ---- encode_grouped ---------------------------------------------------------------------

cdef struct OutBuf:
    uint8_t *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int reserve(OutBuf *o, Py_ssize_t extra) noexcept nogil:
    """0 on success, -1 when memory runs out (the caller reports MemoryError)."""
    cdef Py_ssize_t need = o.size + extra
    cdef Py_ssize_t cap
    cdef uint8_t *grown
    if need <= o.capacity:
        return 0
    cap = o.capacity * 2 if o.capacity else 4096
    while cap < need:
        cap *= 2
    grown = <uint8_t *>realloc(o.data, <size_t>cap)
    if grown == NULL:
        return -1
    o.data = grown
    o.capacity = cap
    return 0


cdef struct Section:
    int32_t dest
    Py_ssize_t start
    Py_ssize_t end
    int32_t count
    int64_t base_ts
    int64_t max_ts


cdef struct Row:
    int has_key
    const uint8_t *key
    Py_ssize_t key_len
    int has_value
    const uint8_t *value
    Py_ssize_t value_len
    int64_t header_start
    int64_t header_end


cdef inline Py_ssize_t field_size(int present, Py_ssize_t length) noexcept nogil:
    if not present:
        return 1
    return varint_size(<int32_t>length) + length


cdef inline uint8_t *emit_field(uint8_t *w, int present, const uint8_t *p,
                                Py_ssize_t length) noexcept nogil:
    if not present:
        return write_varint(w, -1)
    w = write_varint(w, <int32_t>length)
    memcpy(w, p, <size_t>length)
    return w + length


cdef inline int64_t floor_div(int64_t a, int64_t b) noexcept nogil:
    """a // b rounded towards minus infinity, as Python's (and Spark's floorDiv); b > 0.

    The build sets cdivision, so C's truncating division needs the correction."""
    cdef int64_t q = a / b
    if (a % b) < 0:
        q -= 1
    return q


cdef int header_sizes(const HdrCol *h, const Row *r, Py_ssize_t *size) noexcept nogil:
    """Encoded size of the row's headers (without the count varint); error code or 0."""
    cdef int64_t e
    cdef Py_ssize_t s, klen, vlen
    cdef const uint8_t *kp
    cdef const uint8_t *vp
    cdef int rc
    cdef Py_ssize_t total = 0
    for e in range(r.header_start, r.header_end):
        s = <Py_ssize_t>(h.struct_offset + e)
        if not is_valid(h.struct_validity, s):
            return E_NULL_HEADER
        rc = bin_get(&h.key, s, &kp, &klen)
        if rc < 0:
            return E_OFFSETS
        if rc == 1:
            return E_NULL_HEADER_KEY
        if klen > INT32_MAX:
            return E_TOO_LONG
        rc = bin_get(&h.value, s, &vp, &vlen)
        if rc < 0:
            return E_OFFSETS
        if vlen > INT32_MAX and rc == 0:
            return E_TOO_LONG
        total += field_size(1, klen) + field_size(rc == 0, vlen)
    size[0] = total
    return 0


cdef uint8_t *emit_headers(uint8_t *w, const HdrCol *h, const Row *r) noexcept nogil:
    cdef int64_t e
    cdef Py_ssize_t s, klen, vlen
    cdef const uint8_t *kp
    cdef const uint8_t *vp
    cdef int rc
    for e in range(r.header_start, r.header_end):
        s = <Py_ssize_t>(h.struct_offset + e)
        bin_get(&h.key, s, &kp, &klen)
        w = emit_field(w, 1, kp, klen)
        rc = bin_get(&h.value, s, &vp, &vlen)
        w = emit_field(w, rc == 0, vp, vlen)
    return w


cdef struct Encoder:
    Py_ssize_t n
    const uint8_t *dest
    int32_t n_dest
    bint has_key
    BinCol key
    BinCol value
    bint has_ts
    FixCol ts
    int64_t divisor
    int64_t default_ts
    bint has_headers
    HdrCol headers
    Py_ssize_t max_bytes
    # results
    OutBuf out
    Section *sections
    Py_ssize_t n_sections
    Py_ssize_t cap_sections
    Py_ssize_t err_row
    int64_t err_value


cdef int add_section(Encoder *e, int32_t dest, Py_ssize_t start, int32_t count,
                     int64_t base_ts, int64_t max_ts) noexcept nogil:
    cdef Section *grown
    cdef Py_ssize_t cap
    if e.n_sections == e.cap_sections:
        cap = e.cap_sections * 2 if e.cap_sections else 16
        grown = <Section *>realloc(e.sections, sizeof(Section) * cap)
        if grown == NULL:
            return E_MEMORY
        e.sections = grown
        e.cap_sections = cap
    e.sections[e.n_sections].dest = dest
    e.sections[e.n_sections].start = start
    e.sections[e.n_sections].end = e.out.size
    e.sections[e.n_sections].count = count
    e.sections[e.n_sections].base_ts = base_ts
    e.sections[e.n_sections].max_ts = max_ts
    e.n_sections += 1
    return 0


cdef int encode_core(Encoder *e) noexcept nogil:
    cdef Py_ssize_t n = e.n, i = 0, k, body, fixed, rec_size, hsize = 0, nh
    cdef int32_t d
    cdef int64_t *counts = NULL
    cdef int32_t *order = NULL
    cdef int64_t ts, raw, base_ts = 0, max_ts = 0, delta
    cdef int32_t count
    cdef Py_ssize_t start
    cdef Row r
    cdef int rc, err = 0
    cdef uint8_t *w
    cdef int64_t pos
    counts = <int64_t *>malloc(sizeof(int64_t) * (e.n_dest + 1))
    order = <int32_t *>malloc(sizeof(int32_t) * (n if n else 1))
    if counts == NULL or order == NULL:
        free(counts)
        free(order)
        return E_MEMORY
    memset(counts, 0, sizeof(int64_t) * (e.n_dest + 1))
    # Counting sort of row indexes by destination: stable, so each destination keeps the
    # input order (Kafka's per-partition ordering).
    for i in range(n):
        d = <int32_t>load_le(e.dest + 4 * i, 4)
        if d < 0 or d >= e.n_dest:
            e.err_row, e.err_value = i, d
            free(counts)
            free(order)
            return E_DEST
        counts[d + 1] += 1
    for k in range(e.n_dest):
        counts[k + 1] += counts[k]
    for i in range(n):
        d = <int32_t>load_le(e.dest + 4 * i, 4)
        order[counts[d]] = <int32_t>i
        counts[d] += 1
    # counts[d] is now the end of destination d's run; its start is counts[d - 1] (or 0)
    pos = 0
    for d in range(e.n_dest):
        count = 0
        start = e.out.size
        while pos < counts[d]:
            i = order[pos]
            pos += 1
            if e.has_ts and fix_get(&e.ts, i, &raw):
                ts = floor_div(raw, e.divisor)
            else:
                ts = e.default_ts
            if e.has_key:
                rc = bin_get(&e.key, i, &r.key, &r.key_len)
                if rc < 0:
                    err = E_OFFSETS
                    break
                r.has_key = rc == 0
            else:
                r.has_key = 0
                r.key_len = 0
            rc = bin_get(&e.value, i, &r.value, &r.value_len)
            if rc < 0:
                err = E_OFFSETS
                break
            r.has_value = rc == 0
            r.header_start = r.header_end = 0
            hsize = 0
            if e.has_headers:
                if is_valid(e.headers.validity, e.headers.offset + i):
                    r.header_start = load_le(e.headers.offsets + (e.headers.offset + i) * e.headers.width,
                                             e.headers.width)
                    r.header_end = load_le(e.headers.offsets + (e.headers.offset + i + 1) * e.headers.width,
                                           e.headers.width)
                    if (r.header_start < e.headers.first or r.header_end < r.header_start
                            or r.header_end > e.headers.children):
                        err = E_HEADER_OFFSETS
                        break
                    err = header_sizes(&e.headers, &r, &hsize)
                    if err:
                        break
            if (r.has_key and r.key_len > INT32_MAX) or (r.has_value and r.value_len > INT32_MAX):
                err = E_TOO_LONG
                break
            nh = <Py_ssize_t>(r.header_end - r.header_start)
            fixed = (field_size(r.has_key, r.key_len) + field_size(r.has_value, r.value_len)
                     + varint_size(<int32_t>nh) + hsize + 1)
            if count:
                delta = <int64_t>(<uint64_t>ts - <uint64_t>base_ts)
                body = fixed + varlong_size(delta) + varint_size(count)
                if body > INT32_MAX:
                    err = E_TOO_LONG
                    break
                rec_size = varint_size(<int32_t>body) + body
                if e.out.size - start + rec_size > e.max_bytes or count == INT32_MAX:
                    err = add_section(e, d, start, count, base_ts, max_ts)
                    if err:
                        break
                    start = e.out.size
                    count = 0
            if count == 0:
                base_ts = max_ts = ts
                delta = 0
                body = fixed + 2  # varlong(0) + varint(0)
                if body > INT32_MAX:
                    err = E_TOO_LONG
                    break
                rec_size = varint_size(<int32_t>body) + body
            if reserve(&e.out, rec_size) < 0:
                err = E_MEMORY
                break
            w = e.out.data + e.out.size
            w = write_varint(w, <int32_t>body)
            w[0] = 0  # attributes: unused in v2
            w = write_varlong(w + 1, delta)
            w = write_varint(w, count)
            w = emit_field(w, r.has_key, r.key, r.key_len)
            w = emit_field(w, r.has_value, r.value, r.value_len)
            w = write_varint(w, <int32_t>nh)
            if nh:
                w = emit_headers(w, &e.headers, &r)
            e.out.size = w - e.out.data
            count += 1
            if ts > max_ts:
                max_ts = ts
        if err:
            e.err_row = i
            break
        if count:
            err = add_section(e, d, start, count, base_ts, max_ts)
            if err:
                break
    free(counts)
    free(order)
    return err


def encode_grouped(Py_ssize_t n, dest, Py_ssize_t n_dest, key, value, timestamp,
                   int64_t timestamp_divisor, int64_t default_timestamp_ms, headers,
                   Py_ssize_t max_section_bytes):
    """Records sections per destination (see the pure twin)."""
    cdef _Held held = _Held()
    cdef Encoder e
    cdef Py_ssize_t dlen, s
    cdef int err
    cdef list out
    if n < 0:
        raise ValueError("negative row count")
    if n_dest <= 0:
        raise ValueError("n_dest must be positive")
    if n_dest > INT32_MAX:
        raise ValueError("too many destinations")
    if timestamp_divisor <= 0:
        raise ValueError("timestamp_divisor must be positive")
    if max_section_bytes <= 0:
        raise ValueError("max_section_bytes must be positive")
    memset(&e, 0, sizeof(Encoder))
    e.n = n
    e.n_dest = <int32_t>n_dest
    e.dest = held.take(dest, &dlen)
    if dlen < 4 * n:
        raise ValueError(f"dest buffer too short for {n} rows")
    e.has_key = key is not None
    if e.has_key:
        bin_col(held, key, n, "key", &e.key)
    bin_col(held, value, n, "value", &e.value)
    e.has_ts = timestamp is not None
    if e.has_ts:
        fix_col(held, timestamp, n, "timestamp", 8, &e.ts)
    e.divisor = timestamp_divisor
    e.default_ts = default_timestamp_ms
    e.has_headers = headers is not None
    if e.has_headers:
        hdr_col(held, headers, n, &e.headers)
    e.max_bytes = max_section_bytes
    try:
        with nogil:
            err = encode_core(&e)
        if err == E_DEST:
            raise ValueError(f"destination {e.err_value} out of range in row {e.err_row}")
        if err == E_OFFSETS:
            raise ValueError("offsets are not monotonic or point outside the data buffer")
        if err == E_HEADER_OFFSETS:
            raise ValueError("headers: offsets are not monotonic")
        if err == E_NULL_HEADER:
            raise ValueError(f"null header in row {e.err_row}")
        if err == E_NULL_HEADER_KEY:
            raise ValueError(f"null header key in row {e.err_row}")
        if err == E_TOO_LONG:
            raise ValueError("record longer than 2**31-1 bytes")
        if err == E_MEMORY:
            raise MemoryError()
        out = []
        for s in range(e.n_sections):
            sec = e.sections[s]
            out.append((sec.dest,
                        PyBytes_FromStringAndSize(<char *>e.out.data + sec.start, sec.end - sec.start),
                        sec.count, sec.base_ts, sec.max_ts))
        return out
    finally:
        free(e.out.data)
        free(e.sections)


# ---- RecordColumns ----------------------------------------------------------------------

cdef inline int put32(OutBuf *o, int32_t v) noexcept nogil:
    if reserve(o, 4) < 0:
        return -1
    store_le32(o.data + o.size, v)
    o.size += 4
    return 0


cdef inline int put64(OutBuf *o, int64_t v) noexcept nogil:
    if reserve(o, 8) < 0:
        return -1
    store_le64(o.data + o.size, v)
    o.size += 8
    return 0


cdef inline int put_bytes(OutBuf *o, const uint8_t *p, Py_ssize_t n) noexcept nogil:
    if reserve(o, n) < 0:
        return -1
    if n:
        memcpy(o.data + o.size, p, <size_t>n)
    o.size += n
    return 0


cdef inline int set_bit(OutBuf *bitmap, Py_ssize_t index, bint valid) noexcept nogil:
    if (index >> 3) >= bitmap.size:
        if reserve(bitmap, 1) < 0:
            return -1
        bitmap.data[bitmap.size] = 0
        bitmap.size += 1
    if valid:
        bitmap.data[index >> 3] |= <uint8_t>(1 << (index & 7))
    return 0


cdef inline void truncate_bitmap(OutBuf *bitmap, Py_ssize_t rows) noexcept nogil:
    bitmap.size = (rows + 7) >> 3
    if rows & 7:
        bitmap.data[bitmap.size - 1] &= <uint8_t>((1 << (rows & 7)) - 1)


cdef enum:
    D_OK = 0
    D_TRUNCATED = 1       # varint ran past the end
    D_TOO_LONG = 2        # varint longer than its maximum
    D_RECORD_SIZE = 3     # record length does not fit
    D_FIELD = 4           # a field runs past its record
    D_HEADERS = 5         # negative header count
    D_NULL_HKEY = 6
    D_TRAILING = 7        # bytes left inside a record
    D_LEFTOVER = 8        # bytes left after the declared records
    D_BIG = 9             # column data would pass 2**31-1 bytes
    D_MEMORY = 10


cdef inline int varint_err(int rc) noexcept nogil:
    return D_OK if rc == VARINT_OK else (D_TRUNCATED if rc == VARINT_TRUNCATED else D_TOO_LONG)


cdef enum:
    B_KEY_VALID = 0
    B_KEY_OFFSETS = 1
    B_KEY_DATA = 2
    B_VALUE_VALID = 3
    B_VALUE_OFFSETS = 4
    B_VALUE_DATA = 5
    B_OFFSETS = 6
    B_TIMESTAMPS = 7
    B_TIMESTAMP_TYPES = 8
    B_HEADER_OFFSETS = 9
    B_HKEY_OFFSETS = 10
    B_HKEY_DATA = 11
    B_HVALUE_VALID = 12
    B_HVALUE_OFFSETS = 13
    B_HVALUE_DATA = 14
    N_BUFS = 15


cdef class RecordColumns:
    """Arrow column buffers built from records sections (see the pure twin)."""

    cdef readonly bint with_headers
    cdef readonly Py_ssize_t rows
    cdef OutBuf bufs[N_BUFS]
    cdef Py_ssize_t key_nulls, value_nulls, header_count, hvalue_nulls

    def __cinit__(self, with_headers=False):
        self.with_headers = bool(with_headers)
        memset(&self.bufs[0], 0, sizeof(OutBuf) * N_BUFS)
        self._reset()

    def __dealloc__(self):
        cdef OutBuf *bufs = self.bufs
        cdef int i
        for i in range(N_BUFS):
            free(bufs[i].data)

    cdef int _reset(self) except -1:
        cdef OutBuf *bufs = self.bufs
        cdef int i
        for i in range(N_BUFS):
            bufs[i].size = 0
        self.rows = 0
        self.key_nulls = self.value_nulls = self.header_count = self.hvalue_nulls = 0
        if (put32(&self.bufs[B_KEY_OFFSETS], 0) or put32(&self.bufs[B_VALUE_OFFSETS], 0)
                or put32(&self.bufs[B_HEADER_OFFSETS], 0) or put32(&self.bufs[B_HKEY_OFFSETS], 0)
                or put32(&self.bufs[B_HVALUE_OFFSETS], 0)):
            raise MemoryError()
        return 0

    @property
    def data_bytes(self):
        return self.bufs[B_KEY_DATA].size + self.bufs[B_VALUE_DATA].size + self.bufs[B_HKEY_DATA].size + self.bufs[B_HVALUE_DATA].size

    cdef int _binary(self, OutBuf *valid, OutBuf *offs, OutBuf *data, Py_ssize_t index,
                     bint present, const uint8_t *p, Py_ssize_t length) noexcept nogil:
        if set_bit(valid, index, present) < 0:
            return -1
        if present and put_bytes(data, p, length) < 0:
            return -1
        return put32(offs, <int32_t>data.size)

    cdef int _append(self, const uint8_t *base, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count,
                     int64_t base_offset, int64_t base_timestamp, bint log_append_time,
                     int64_t max_timestamp, int64_t min_offset, int64_t end_offset,
                     Py_ssize_t *kept, Py_ssize_t *err_index) noexcept nogil:
        cdef Py_ssize_t index, rec_pos, rec_end, h, hstart
        cdef int32_t length, offset_delta, klen, vlen, nh, hklen, hvlen
        cdef int64_t ts_delta, offset, ts
        cdef int rc
        cdef Py_ssize_t kpos = 0, vpos = 0
        cdef Py_ssize_t data_before = (self.bufs[B_KEY_DATA].size + self.bufs[B_VALUE_DATA].size
                                       + self.bufs[B_HKEY_DATA].size + self.bufs[B_HVALUE_DATA].size)
        cdef Py_ssize_t added = 0
        for index in range(count):
            err_index[0] = index
            rc = read_varint(base, &pos, end, &length)
            if rc:
                return varint_err(rc)
            if length < 1 or length > end - pos:
                return D_RECORD_SIZE
            rec_end = pos + length
            rec_pos = pos + 1  # attributes: unused in v2
            pos = rec_end
            rc = read_varlong(base, &rec_pos, rec_end, &ts_delta)
            if rc:
                return varint_err(rc)
            rc = read_varint(base, &rec_pos, rec_end, &offset_delta)
            if rc:
                return varint_err(rc)
            rc = read_varint(base, &rec_pos, rec_end, &klen)
            if rc:
                return varint_err(rc)
            if klen >= 0:
                if klen > rec_end - rec_pos:
                    return D_FIELD
                kpos = rec_pos
                rec_pos += klen
            rc = read_varint(base, &rec_pos, rec_end, &vlen)
            if rc:
                return varint_err(rc)
            if vlen >= 0:
                if vlen > rec_end - rec_pos:
                    return D_FIELD
                vpos = rec_pos
                rec_pos += vlen
            rc = read_varint(base, &rec_pos, rec_end, &nh)
            if rc:
                return varint_err(rc)
            if nh < 0:
                return D_HEADERS
            hstart = rec_pos
            for h in range(nh):
                rc = read_varint(base, &rec_pos, rec_end, &hklen)
                if rc:
                    return varint_err(rc)
                if hklen < 0:
                    return D_NULL_HKEY
                if hklen > rec_end - rec_pos:
                    return D_FIELD
                rec_pos += hklen
                rc = read_varint(base, &rec_pos, rec_end, &hvlen)
                if rc:
                    return varint_err(rc)
                if hvlen >= 0:
                    if hvlen > rec_end - rec_pos:
                        return D_FIELD
                    rec_pos += hvlen
            if rec_pos != rec_end:
                return D_TRAILING
            offset = <int64_t>(<uint64_t>base_offset + <uint64_t>(<int64_t>offset_delta))
            if offset < min_offset or offset >= end_offset:
                continue
            added += (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0)
            if self._binary(&self.bufs[B_KEY_VALID], &self.bufs[B_KEY_OFFSETS], &self.bufs[B_KEY_DATA], self.rows,
                            klen >= 0, base + kpos, klen):
                return D_MEMORY
            if self._binary(&self.bufs[B_VALUE_VALID], &self.bufs[B_VALUE_OFFSETS], &self.bufs[B_VALUE_DATA], self.rows,
                            vlen >= 0, base + vpos, vlen):
                return D_MEMORY
            if log_append_time:
                ts = max_timestamp
            else:
                ts = <int64_t>(<uint64_t>base_timestamp + <uint64_t>ts_delta)
            if (put64(&self.bufs[B_OFFSETS], offset)
                    or put64(&self.bufs[B_TIMESTAMPS], <int64_t>(<uint64_t>ts * <uint64_t>1000))
                    or put32(&self.bufs[B_TIMESTAMP_TYPES], 1 if log_append_time else 0)):
                return D_MEMORY
            if self.with_headers:
                rec_pos = hstart
                for h in range(nh):
                    read_varint(base, &rec_pos, rec_end, &hklen)
                    added += hklen
                    if put_bytes(&self.bufs[B_HKEY_DATA], base + rec_pos, hklen):
                        return D_MEMORY
                    rec_pos += hklen
                    if put32(&self.bufs[B_HKEY_OFFSETS], <int32_t>self.bufs[B_HKEY_DATA].size):
                        return D_MEMORY
                    read_varint(base, &rec_pos, rec_end, &hvlen)
                    if hvlen > 0:
                        added += hvlen
                    if self._binary(&self.bufs[B_HVALUE_VALID], &self.bufs[B_HVALUE_OFFSETS], &self.bufs[B_HVALUE_DATA],
                                    self.header_count, hvlen >= 0, base + rec_pos, hvlen):
                        return D_MEMORY
                    if hvlen < 0:
                        self.hvalue_nulls += 1
                    else:
                        rec_pos += hvlen
                    self.header_count += 1
                if put32(&self.bufs[B_HEADER_OFFSETS], <int32_t>self.header_count):
                    return D_MEMORY
            if klen < 0:
                self.key_nulls += 1
            if vlen < 0:
                self.value_nulls += 1
            self.rows += 1
            kept[0] += 1
        if pos != end:
            return D_LEFTOVER
        if data_before + added > INT32_MAX:
            return D_BIG
        return D_OK

    def append(self, buf, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count, int64_t base_offset,
               int64_t base_timestamp, bint log_append_time, int64_t max_timestamp,
               int64_t min_offset, int64_t end_offset):
        """Decode one records section; keep offsets in [min_offset, end_offset)."""
        cdef Py_buffer view
        cdef Py_ssize_t kept = 0, err_index = 0
        cdef int err
        cdef OutBuf *bufs = self.bufs
        cdef Py_ssize_t saved[N_BUFS]
        cdef Py_ssize_t saved_rows = self.rows
        cdef Py_ssize_t saved_nulls[4]
        cdef int i
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            if end == -1:
                end = view.len
            if pos < 0 or end < pos or end > view.len:
                raise ValueError(f"bad range [{pos}, {end}) for a buffer of {view.len} bytes")
            if count < 0:
                raise InvalidRecordError(f"negative record count {count}")
            for i in range(N_BUFS):
                saved[i] = bufs[i].size
            saved_nulls[0] = self.key_nulls
            saved_nulls[1] = self.value_nulls
            saved_nulls[2] = self.header_count
            saved_nulls[3] = self.hvalue_nulls
            with nogil:
                err = self._append(<const uint8_t *>view.buf, pos, end, count, base_offset,
                                   base_timestamp, log_append_time, max_timestamp, min_offset,
                                   end_offset, &kept, &err_index)
            if err:
                # Nothing of a failing batch stays: the pure twin checks it whole first.
                for i in range(N_BUFS):
                    bufs[i].size = saved[i]
                self.rows = saved_rows
                self.key_nulls = saved_nulls[0]
                self.value_nulls = saved_nulls[1]
                self.header_count = saved_nulls[2]
                self.hvalue_nulls = saved_nulls[3]
                truncate_bitmap(&self.bufs[B_KEY_VALID], self.rows)
                truncate_bitmap(&self.bufs[B_VALUE_VALID], self.rows)
                truncate_bitmap(&self.bufs[B_HVALUE_VALID], self.header_count)
                self._raise(err, err_index, count, end - pos)
            return kept
        finally:
            PyBuffer_Release(&view)

    cdef int _raise(self, int err, Py_ssize_t index, Py_ssize_t count, Py_ssize_t size) except -1:
        if err == D_TRUNCATED:
            raise CorruptRecordError("record truncated inside a varint")
        if err == D_TOO_LONG:
            raise CorruptRecordError("varint longer than its maximum size")
        if err == D_RECORD_SIZE:
            raise CorruptRecordError(f"record {index} does not fit the batch")
        if err == D_FIELD:
            raise CorruptRecordError(f"a field of record {index} runs past the record")
        if err == D_HEADERS:
            raise CorruptRecordError(f"record {index} has a negative header count")
        if err == D_NULL_HKEY:
            raise CorruptRecordError(f"record {index} has a null header key")
        if err == D_TRAILING:
            raise CorruptRecordError(f"record {index} has trailing bytes")
        if err == D_LEFTOVER:
            raise InvalidRecordError(f"bytes left after the {count} declared records")
        if err == D_BIG:
            raise ValueError("column data would exceed 2**31-1 bytes; finish() sooner")
        raise MemoryError()

    def finish(self):
        """Buffers for pyarrow.Array.from_buffers (see the pure twin), then start over."""
        out = {
            "rows": self.rows,
            "key_validity": _bytes(&self.bufs[B_KEY_VALID]), "key_offsets": _bytes(&self.bufs[B_KEY_OFFSETS]),
            "key_data": _bytes(&self.bufs[B_KEY_DATA]), "key_nulls": self.key_nulls,
            "value_validity": _bytes(&self.bufs[B_VALUE_VALID]),
            "value_offsets": _bytes(&self.bufs[B_VALUE_OFFSETS]),
            "value_data": _bytes(&self.bufs[B_VALUE_DATA]), "value_nulls": self.value_nulls,
            "offsets": _bytes(&self.bufs[B_OFFSETS]), "timestamps": _bytes(&self.bufs[B_TIMESTAMPS]),
            "timestamp_types": _bytes(&self.bufs[B_TIMESTAMP_TYPES]),
        }
        if self.with_headers:
            out.update({
                "header_offsets": _bytes(&self.bufs[B_HEADER_OFFSETS]),
                "header_count": self.header_count,
                "header_key_offsets": _bytes(&self.bufs[B_HKEY_OFFSETS]),
                "header_key_data": _bytes(&self.bufs[B_HKEY_DATA]),
                "header_value_validity": _bytes(&self.bufs[B_HVALUE_VALID]),
                "header_value_offsets": _bytes(&self.bufs[B_HVALUE_OFFSETS]),
                "header_value_data": _bytes(&self.bufs[B_HVALUE_DATA]),
                "header_value_nulls": self.hvalue_nulls,
            })
        self._reset()
        return out


cdef bytes _bytes(OutBuf *o):
    if o.data == NULL:
        return b""
    return PyBytes_FromStringAndSize(<char *>o.data, o.size)
