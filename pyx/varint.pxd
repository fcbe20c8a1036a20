# Zig-zag varints (Kafka's ByteUtils.readVarint/readVarlong) and big-endian loads/stores,
# inlined into every module that cimports them. No Python objects: callable without the GIL.
#
# read_varint/read_varlong return 0 on success, VARINT_TRUNCATED when the input ends
# inside the varint, VARINT_TOO_LONG after 5 (varint) or 10 (varlong) continuation bytes.
# Bits beyond 32/64 are dropped, as Kafka does.

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef enum:
    VARINT_OK = 0
    VARINT_TRUNCATED = 1
    VARINT_TOO_LONG = 2


cdef inline int read_varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end,
                            int32_t *out) noexcept nogil:
    cdef uint32_t raw = 0
    cdef int shift = 0
    cdef uint8_t b
    cdef Py_ssize_t i = pos[0]
    while True:
        if i >= end:
            return VARINT_TRUNCATED
        b = p[i]
        i += 1
        raw |= <uint32_t>(b & 0x7F) << shift
        if not (b & 0x80):
            break
        shift += 7
        if shift > 28:
            return VARINT_TOO_LONG
    pos[0] = i
    out[0] = <int32_t>((raw >> 1) ^ (0u - (raw & 1)))
    return VARINT_OK


cdef inline int read_varlong(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end,
                             int64_t *out) noexcept nogil:
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef uint8_t b
    cdef Py_ssize_t i = pos[0]
    while True:
        if i >= end:
            return VARINT_TRUNCATED
        b = p[i]
        i += 1
        raw |= <uint64_t>(b & 0x7F) << shift
        if not (b & 0x80):
            break
        shift += 7
        if shift > 63:
            return VARINT_TOO_LONG
    pos[0] = i
    out[0] = <int64_t>((raw >> 1) ^ (<uint64_t>0 - (raw & 1)))
    return VARINT_OK


cdef inline Py_ssize_t varint_size(int32_t value) noexcept nogil:
    cdef uint32_t raw = (<uint32_t>value << 1) ^ <uint32_t>(value >> 31)
    cdef Py_ssize_t n = 1
    while raw >= 0x80:
        raw >>= 7
        n += 1
    return n


cdef inline Py_ssize_t varlong_size(int64_t value) noexcept nogil:
    cdef uint64_t raw = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef Py_ssize_t n = 1
    while raw >= 0x80:
        raw >>= 7
        n += 1
    return n


cdef inline uint8_t *write_varint(uint8_t *p, int32_t value) noexcept nogil:
    cdef uint32_t raw = (<uint32_t>value << 1) ^ <uint32_t>(value >> 31)
    while raw >= 0x80:
        p[0] = <uint8_t>(raw | 0x80)
        p += 1
        raw >>= 7
    p[0] = <uint8_t>raw
    return p + 1


cdef inline uint8_t *write_varlong(uint8_t *p, int64_t value) noexcept nogil:
    cdef uint64_t raw = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    while raw >= 0x80:
        p[0] = <uint8_t>(raw | 0x80)
        p += 1
        raw >>= 7
    p[0] = <uint8_t>raw
    return p + 1


cdef inline uint16_t load_be16(const uint8_t *p) noexcept nogil:
    return <uint16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline uint32_t load_be32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline uint64_t load_be64(const uint8_t *p) noexcept nogil:
    return (<uint64_t>load_be32(p) << 32) | load_be32(p + 4)


cdef inline void store_be16(uint8_t *p, uint16_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 8)
    p[1] = <uint8_t>v


cdef inline void store_be32(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef inline void store_be64(uint8_t *p, uint64_t v) noexcept nogil:
    store_be32(p, <uint32_t>(v >> 32))
    store_be32(p + 4, <uint32_t>v)
