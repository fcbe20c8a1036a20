"""Record batches <-> Arrow columns -- pure-Python twin of `pybroker._native._arrow_records`.

What the PySpark connector needs so that Python never touches individual rows: Spark hands
the writer Arrow record batches and wants Arrow batches back from a reader; this module
turns Arrow column buffers into Kafka records sections (magic 2, see pybroker._pure.records
for the record layout) and Kafka records sections back into Arrow column buffers.

Columns are described by plain tuples of buffers in Arrow's layout, so neither twin needs
pyarrow (pybroker_spark/arrow_columns.py builds them from pyarrow arrays):

    BinaryColumn  (validity, offsets, data, offset, offset_width)
                  binary / string / large_*: `offsets` holds length+1 little-endian int32
                  (offset_width 4) or int64 (8) entries; element i spans
                  data[offsets[offset+i] : offsets[offset+i+1]]
    Int32Column   (validity, values, offset)      little-endian int32 values
    Int64Column   (validity, values, offset)      little-endian int64 values
    HeadersColumn (list_validity, list_offsets, list_offset, list_offset_width,
                   struct_validity, struct_offset, key: BinaryColumn, value: BinaryColumn)
                  Spark's array<struct<key: string, value: binary>>; struct element j is
                  key/value element struct_offset + j of the children
    validity      None (no nulls) or an LSB-first bitmap; bit `offset + i` set = valid

Writing (a Spark task, one call per incoming Arrow batch):

    murmur2(data) -> int                       Java's Utils.murmur2, signed int32
    assign_partitions(n, key, partition, topic_index, num_partitions, sticky) -> bytes
        n little-endian int32 destinations: topic_base[t] + p, topic_base the prefix sums
        of num_partitions. p = the partition column when set, else
        toPositive(murmur2(key)) % num_partitions[t] (Java's and Spark's placement), else
        the topic's sticky partition (keyless rows, as Kafka's sticky partitioner).
    encode_grouped(n, dest, n_dest, key, value, timestamp, timestamp_divisor,
                   default_timestamp_ms, headers, max_section_bytes) -> [Section]
        Section = (dest, records_section, record_count, base_timestamp, max_timestamp):
        rows grouped by destination (ascending), input order kept within one, cut into
        sections of at most max_section_bytes (never fewer than one record). Timestamps
        are floor(timestamp / timestamp_divisor) ms (Spark's are microseconds), null ->
        default_timestamp_ms; deltas are relative to each section's first record.

Reading (a Spark task, one call per fetched Kafka batch):

    RecordColumns(with_headers).append(buf, pos, end, count, base_offset, base_timestamp,
                                       log_append_time, max_timestamp, min_offset, end_offset)
        decodes one batch's records section buf[pos:end], keeping records whose offset is
        in [min_offset, end_offset); returns how many it kept.
    .rows / .data_bytes                        what is buffered
    .finish() -> dict of Arrow buffers (see `finish`), and the builder starts over.

Errors: bad input columns raise ValueError (same message from both twins); a malformed
records section raises CorruptRecordError / InvalidRecordError, as decode_records does.
Stateless functions; a RecordColumns belongs to one thread.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from pybroker._native.errors import CorruptRecordError, InvalidRecordError

__all__ = ["RecordColumns", "assign_partitions", "encode_grouped", "murmur2"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF
_INT32_MAX = 0x7FFFFFFF


def _view(buf: Any) -> memoryview:
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _signed32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def murmur2(data: Any) -> int:
    """Java's org.apache.kafka.common.utils.Utils.murmur2 of `data`: a signed int32."""
    b = bytes(_view(data))
    length = len(b)
    h = (_SEED ^ length) & _MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & 3
    if tail == 3:
        h ^= b[whole + 2] << 16
    if tail >= 2:
        h ^= b[whole + 1] << 8
    if tail >= 1:
        h ^= b[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return _signed32(h)


# ---- column access ----------------------------------------------------------------------

def _valid(validity: memoryview | None, index: int) -> bool:
    return validity is None or bool(validity[index >> 3] & (1 << (index & 7)))


class _Binary:
    __slots__ = ("validity", "offsets", "data", "offset", "fmt", "width")

    def __init__(self, column: Sequence, n: int, name: str) -> None:
        validity, offsets, data, offset, width = column
        if width not in (4, 8):
            raise ValueError(f"{name}: offset width must be 4 or 8, not {width}")
        self.validity = None if validity is None else _view(validity)
        self.offsets = _view(offsets)
        self.data = _view(data)
        self.offset = int(offset)
        self.width = width
        self.fmt = struct.Struct("<i" if width == 4 else "<q")
        if self.offset < 0:
            raise ValueError(f"{name}: negative offset")
        if len(self.offsets) < (self.offset + n + 1) * width:
            raise ValueError(f"{name}: offsets buffer too short for {n} rows")
        if self.validity is not None and len(self.validity) * 8 < self.offset + n:
            raise ValueError(f"{name}: validity bitmap too short for {n} rows")
        if n:
            first = self.fmt.unpack_from(self.offsets, self.offset * width)[0]
            last = self.fmt.unpack_from(self.offsets, (self.offset + n) * width)[0]
            if first < 0 or last < first or last > len(self.data):
                raise ValueError(f"{name}: offsets point outside the data buffer")

    def get(self, i: int) -> bytes | None:
        j = self.offset + i
        if not _valid(self.validity, j):
            return None
        start = self.fmt.unpack_from(self.offsets, j * self.width)[0]
        end = self.fmt.unpack_from(self.offsets, (j + 1) * self.width)[0]
        if start < 0 or end < start or end > len(self.data):
            raise ValueError("offsets are not monotonic or point outside the data buffer")
        return bytes(self.data[start:end])


class _Fixed:
    __slots__ = ("validity", "values", "offset", "fmt")

    def __init__(self, column: Sequence, n: int, name: str, fmt: str) -> None:
        validity, values, offset = column
        self.validity = None if validity is None else _view(validity)
        self.values = _view(values)
        self.offset = int(offset)
        self.fmt = struct.Struct(fmt)
        if self.offset < 0:
            raise ValueError(f"{name}: negative offset")
        if len(self.values) < (self.offset + n) * self.fmt.size:
            raise ValueError(f"{name}: values buffer too short for {n} rows")
        if self.validity is not None and len(self.validity) * 8 < self.offset + n:
            raise ValueError(f"{name}: validity bitmap too short for {n} rows")

    def get(self, i: int) -> int | None:
        j = self.offset + i
        if not _valid(self.validity, j):
            return None
        return self.fmt.unpack_from(self.values, j * self.fmt.size)[0]


class _Headers:
    __slots__ = ("validity", "offsets", "offset", "fmt", "width", "struct_validity",
                 "struct_offset", "key", "value", "first", "children")

    def __init__(self, column: Sequence, n: int) -> None:
        (validity, offsets, offset, width, struct_validity, struct_offset, key, value) = column
        if width not in (4, 8):
            raise ValueError(f"headers: offset width must be 4 or 8, not {width}")
        self.validity = None if validity is None else _view(validity)
        self.offsets = _view(offsets)
        self.offset = int(offset)
        self.width = width
        self.fmt = struct.Struct("<i" if width == 4 else "<q")
        if self.offset < 0 or int(struct_offset) < 0:
            raise ValueError("headers: negative offset")
        if len(self.offsets) < (self.offset + n + 1) * width:
            raise ValueError(f"headers: offsets buffer too short for {n} rows")
        if self.validity is not None and len(self.validity) * 8 < self.offset + n:
            raise ValueError(f"headers: validity bitmap too short for {n} rows")
        self.struct_validity = None if struct_validity is None else _view(struct_validity)
        self.struct_offset = int(struct_offset)
        last = self.fmt.unpack_from(self.offsets, (self.offset + n) * width)[0] if n else 0
        first = self.fmt.unpack_from(self.offsets, self.offset * width)[0] if n else 0
        if first < 0 or last < first:
            raise ValueError("headers: offsets are not monotonic")
        self.first = first
        self.children = last  # struct elements the rows reach
        if (self.struct_validity is not None
                and len(self.struct_validity) * 8 < self.struct_offset + self.children):
            raise ValueError("headers: struct validity bitmap too short")
        self.key = _Binary(key, self.struct_offset + self.children, "header key")
        self.value = _Binary(value, self.struct_offset + self.children, "header value")

    def get(self, i: int) -> list[tuple[bytes, bytes | None]] | None:
        j = self.offset + i
        if not _valid(self.validity, j):
            return None
        start = self.fmt.unpack_from(self.offsets, j * self.width)[0]
        end = self.fmt.unpack_from(self.offsets, (j + 1) * self.width)[0]
        if start < self.first or end < start or end > self.children:
            raise ValueError("headers: offsets are not monotonic")
        out = []
        for e in range(start, end):
            s = self.struct_offset + e
            if not _valid(self.struct_validity, s):
                raise ValueError(f"null header in row {i}")
            k = self.key.get(s)
            if k is None:
                raise ValueError(f"null header key in row {i}")
            out.append((k, self.value.get(s)))
        return out


# ---- writing ----------------------------------------------------------------------------

def assign_partitions(n: int, key: Sequence | None, partition: Sequence | None,
                      topic_index: Sequence | None, num_partitions: Sequence[int],
                      sticky: Sequence[int]) -> bytes:
    """Destination (topic_base[t] + partition) of each of n rows; see the module docstring."""
    n = int(n)
    if n < 0:
        raise ValueError("negative row count")
    topics = len(num_partitions)
    if topics == 0 or len(sticky) != topics:
        raise ValueError("num_partitions and sticky must name the same topics (at least one)")
    base = []
    total = 0
    for t in range(topics):
        p = int(num_partitions[t])
        if p <= 0:
            raise ValueError(f"topic {t} has {p} partitions")
        if not 0 <= int(sticky[t]) < p:
            raise ValueError(f"sticky partition {sticky[t]} out of range for topic {t}")
        base.append(total)
        total += p
        if total > _INT32_MAX:
            raise ValueError("too many destinations")
    keys = None if key is None else _Binary(key, n, "key")
    parts = None if partition is None else _Fixed(partition, n, "partition", "<i")
    tix = None
    if topic_index is not None:
        tix = _view(topic_index)
        if len(tix) < 4 * n:
            raise ValueError(f"topic_index buffer too short for {n} rows")
    out = bytearray(4 * n)
    for i in range(n):
        t = 0 if tix is None else struct.unpack_from("<i", tix, 4 * i)[0]
        if not 0 <= t < topics:
            raise ValueError(f"topic index {t} out of range in row {i}")
        count = int(num_partitions[t])
        given = None if parts is None else parts.get(i)
        if given is not None:
            if not 0 <= given < count:
                raise ValueError(f"Invalid partition given with record: {given} is not in the range "
                                 f"[0...{count}] (row {i})")
            p = given
        else:
            k = None if keys is None else keys.get(i)
            if k is not None:
                p = (murmur2(k) & _INT32_MAX) % count
            else:
                p = int(sticky[t])
        struct.pack_into("<i", out, 4 * i, base[t] + p)
    return bytes(out)


def _zigzag(value: int, bits: int) -> bytes:
    raw = ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _field(value: bytes | None) -> bytes:
    if value is None:
        return _zigzag(-1, 32)
    if len(value) > _INT32_MAX:
        raise ValueError("field longer than 2**31-1 bytes")
    return _zigzag(len(value), 32) + value


def _record(ts_delta: int, offset_delta: int, key: bytes | None, value: bytes | None,
            headers: list[tuple[bytes, bytes | None]] | None) -> bytes:
    body = bytearray(b"\x00")
    body += _zigzag(ts_delta, 64)
    body += _zigzag(offset_delta, 32)
    body += _field(key)
    body += _field(value)
    hs = headers or []
    body += _zigzag(len(hs), 32)
    for hk, hv in hs:
        body += _field(hk)
        body += _field(hv)
    if len(body) > _INT32_MAX:
        raise ValueError("record longer than 2**31-1 bytes")
    return _zigzag(len(body), 32) + bytes(body)


def encode_grouped(n: int, dest: Any, n_dest: int, key: Sequence | None, value: Sequence,
                   timestamp: Sequence | None, timestamp_divisor: int, default_timestamp_ms: int,
                   headers: Sequence | None, max_section_bytes: int) -> list[tuple]:
    """Records sections per destination; see the module docstring."""
    n = int(n)
    if n < 0:
        raise ValueError("negative row count")
    if n_dest <= 0:
        raise ValueError("n_dest must be positive")
    if timestamp_divisor <= 0:
        raise ValueError("timestamp_divisor must be positive")
    if max_section_bytes <= 0:
        raise ValueError("max_section_bytes must be positive")
    dview = _view(dest)
    if len(dview) < 4 * n:
        raise ValueError(f"dest buffer too short for {n} rows")
    keys = None if key is None else _Binary(key, n, "key")
    values = _Binary(value, n, "value")
    stamps = None if timestamp is None else _Fixed(timestamp, n, "timestamp", "<q")
    hdrs = None if headers is None else _Headers(headers, n)
    groups: list[list[int]] = [[] for _ in range(n_dest)]
    for i in range(n):
        d = struct.unpack_from("<i", dview, 4 * i)[0]
        if not 0 <= d < n_dest:
            raise ValueError(f"destination {d} out of range in row {i}")
        groups[d].append(i)
    sections = []
    for d, rows in enumerate(groups):
        section = bytearray()
        count = 0
        base_ts = max_ts = 0
        for i in rows:
            raw = None if stamps is None else stamps.get(i)
            ts = default_timestamp_ms if raw is None else raw // timestamp_divisor
            k = None if keys is None else keys.get(i)
            v = values.get(i)
            h = None if hdrs is None else hdrs.get(i)
            if count:
                rec = _record(_wrap64(ts - base_ts), count, k, v, h)
                if len(section) + len(rec) > max_section_bytes or count == _INT32_MAX:
                    sections.append((d, bytes(section), count, base_ts, max_ts))
                    section = bytearray()
                    count = 0
            if count == 0:
                base_ts = max_ts = ts
                rec = _record(0, 0, k, v, h)
            section += rec
            count += 1
            if ts > max_ts:
                max_ts = ts
        if count:
            sections.append((d, bytes(section), count, base_ts, max_ts))
    return sections


# ---- reading ----------------------------------------------------------------------------

class _Cursor:
    __slots__ = ("data", "pos", "end")

    def __init__(self, data: memoryview, pos: int, end: int) -> None:
        self.data = data
        self.pos = pos
        self.end = end

    def varint(self, bits: int) -> int:
        raw = 0
        shift = 0
        limit = 5 if bits == 32 else 10
        for _ in range(limit):
            if self.pos >= self.end:
                raise CorruptRecordError("record truncated inside a varint")
            b = self.data[self.pos]
            self.pos += 1
            raw |= (b & 0x7F) << shift
            if not b & 0x80:
                raw &= (1 << bits) - 1
                return (raw >> 1) ^ -(raw & 1)
            shift += 7
        raise CorruptRecordError("varint longer than its maximum size")

    def take(self, length: int, what: str) -> memoryview:
        if length < 0 or length > self.end - self.pos:
            raise CorruptRecordError(f"{what} of {length} bytes runs past the record")
        out = self.data[self.pos:self.pos + length]
        self.pos += length
        return out


class RecordColumns:
    """Arrow column buffers built from records sections; see the module docstring."""

    def __init__(self, with_headers: bool = False) -> None:
        self.with_headers = bool(with_headers)
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self._key_valid = bytearray()
        self._key_offsets = bytearray(struct.pack("<i", 0))
        self._key_data = bytearray()
        self._key_nulls = 0
        self._value_valid = bytearray()
        self._value_offsets = bytearray(struct.pack("<i", 0))
        self._value_data = bytearray()
        self._value_nulls = 0
        self._offsets = bytearray()
        self._timestamps = bytearray()
        self._timestamp_types = bytearray()
        self._header_offsets = bytearray(struct.pack("<i", 0))
        self._header_count = 0
        self._hkey_offsets = bytearray(struct.pack("<i", 0))
        self._hkey_data = bytearray()
        self._hvalue_valid = bytearray()
        self._hvalue_offsets = bytearray(struct.pack("<i", 0))
        self._hvalue_data = bytearray()
        self._hvalue_nulls = 0

    @property
    def data_bytes(self) -> int:
        return (len(self._key_data) + len(self._value_data) + len(self._hkey_data)
                + len(self._hvalue_data))

    @staticmethod
    def _set_bit(bitmap: bytearray, index: int, valid: bool) -> None:
        if index >> 3 >= len(bitmap):
            bitmap.append(0)
        if valid:
            bitmap[index >> 3] |= 1 << (index & 7)

    def _binary(self, field: memoryview | None, valid: bytearray, offsets: bytearray,
                data: bytearray, index: int) -> int:
        self._set_bit(valid, index, field is not None)
        if field is not None:
            data += field
        offsets += struct.pack("<i", len(data))
        return 0 if field is not None else 1

    def append(self, buf: Any, pos: int, end: int, count: int, base_offset: int,
               base_timestamp: int, log_append_time: bool, max_timestamp: int,
               min_offset: int, end_offset: int) -> int:
        view = _view(buf)
        if end == -1:
            end = len(view)
        if pos < 0 or end < pos or end > len(view):
            raise ValueError(f"bad range [{pos}, {end}) for a buffer of {len(view)} bytes")
        if count < 0:
            raise InvalidRecordError(f"negative record count {count}")
        cur = _Cursor(view, pos, end)
        parsed = []  # the whole batch is checked before anything is appended
        for index in range(count):
            length = cur.varint(32)
            if length < 1 or length > end - cur.pos:
                raise CorruptRecordError(f"record {index} of {length} bytes does not fit the batch")
            rec_end = cur.pos + length
            rec = _Cursor(view, cur.pos + 1, rec_end)  # skip attributes: unused in v2
            cur.pos = rec_end
            ts_delta = rec.varint(64)
            offset_delta = rec.varint(32)
            klen = rec.varint(32)
            kval = None if klen < 0 else rec.take(klen, "key")
            vlen = rec.varint(32)
            vval = None if vlen < 0 else rec.take(vlen, "value")
            nh = rec.varint(32)
            if nh < 0:
                raise CorruptRecordError(f"record {index} has {nh} headers")
            headers = []
            for _ in range(nh):
                hklen = rec.varint(32)
                if hklen < 0:
                    raise CorruptRecordError(f"record {index} has a null header key")
                hk = rec.take(hklen, "header key")
                hvlen = rec.varint(32)
                hv = None if hvlen < 0 else rec.take(hvlen, "header value")
                headers.append((hk, hv))
            if rec.pos != rec_end:
                raise CorruptRecordError(f"record {index} has {rec_end - rec.pos} trailing bytes")
            offset = _wrap64(base_offset + offset_delta)
            if min_offset <= offset < end_offset:
                parsed.append((offset, ts_delta, kval, vval, headers))
        if cur.pos != end:
            raise InvalidRecordError(f"{end - cur.pos} bytes left after the {count} declared records")
        size = self.data_bytes + sum(
            (len(k) if k is not None else 0) + (len(v) if v is not None else 0)
            + (sum(len(hk) + (len(hv) if hv is not None else 0) for hk, hv in hs)
               if self.with_headers else 0)
            for _, _, k, v, hs in parsed)
        if size > _INT32_MAX:
            raise ValueError("column data would exceed 2**31-1 bytes; finish() sooner")
        for offset, ts_delta, kval, vval, headers in parsed:
            row = self.rows
            self._key_nulls += self._binary(kval, self._key_valid, self._key_offsets,
                                            self._key_data, row)
            self._value_nulls += self._binary(vval, self._value_valid, self._value_offsets,
                                              self._value_data, row)
            ts = max_timestamp if log_append_time else _wrap64(base_timestamp + ts_delta)
            self._offsets += struct.pack("<q", offset)
            self._timestamps += struct.pack("<q", _wrap64(ts * 1000))
            self._timestamp_types += struct.pack("<i", 1 if log_append_time else 0)
            if self.with_headers:
                for hk, hv in headers:
                    self._hkey_data += hk
                    self._hkey_offsets += struct.pack("<i", len(self._hkey_data))
                    self._hvalue_nulls += self._binary(hv, self._hvalue_valid,
                                                       self._hvalue_offsets, self._hvalue_data,
                                                       self._header_count)
                    self._header_count += 1
                self._header_offsets += struct.pack("<i", self._header_count)
            self.rows += 1
        return len(parsed)

    def finish(self) -> dict[str, Any]:
        """Buffers for pyarrow.Array.from_buffers, then start over.

        Keys: rows; key_validity, key_offsets, key_data, key_nulls; the same for value_;
        offsets (int64), timestamps (int64 microseconds), timestamp_types (int32); with
        headers also header_offsets (int32, rows+1), header_count, header_key_offsets,
        header_key_data, header_value_validity, header_value_offsets, header_value_data,
        header_value_nulls. Bitmaps are padded to whole bytes with zero bits.
        """
        out: dict[str, Any] = {
            "rows": self.rows,
            "key_validity": bytes(self._key_valid), "key_offsets": bytes(self._key_offsets),
            "key_data": bytes(self._key_data), "key_nulls": self._key_nulls,
            "value_validity": bytes(self._value_valid),
            "value_offsets": bytes(self._value_offsets),
            "value_data": bytes(self._value_data), "value_nulls": self._value_nulls,
            "offsets": bytes(self._offsets), "timestamps": bytes(self._timestamps),
            "timestamp_types": bytes(self._timestamp_types),
        }
        if self.with_headers:
            out.update({
                "header_offsets": bytes(self._header_offsets),
                "header_count": self._header_count,
                "header_key_offsets": bytes(self._hkey_offsets),
                "header_key_data": bytes(self._hkey_data),
                "header_value_validity": bytes(self._hvalue_valid),
                "header_value_offsets": bytes(self._hvalue_offsets),
                "header_value_data": bytes(self._hvalue_data),
                "header_value_nulls": self._hvalue_nulls,
            })
        self._reset()
        return out


def _wrap64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value
