"""Record batch v2 (magic 2) codec -- pure-Python twin of `pybroker._native._records`.

Batch header, 61 bytes big-endian (Kafka's DefaultRecordBatch):

    @0  baseOffset i64          @27 baseTimestamp i64
    @8  batchLength i32         @35 maxTimestamp i64
    @12 partitionLeaderEpoch i32  @43 producerId i64
    @16 magic i8                @51 producerEpoch i16
    @17 crc u32                 @53 baseSequence i32
    @21 attributes i16          @57 recordsCount i32
    @23 lastOffsetDelta i32     @61 records...

The CRC-32C covers bytes 21..end, so the two fields the broker rewrites on append
(baseOffset, partitionLeaderEpoch) lie outside it. batchLength counts from byte 12.

Each record is varint-framed (zig-zag varints, Kafka's ByteUtils):
length varint, attributes i8, timestampDelta varlong, offsetDelta varint,
keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
headersCount varint, then per header keyLength varint, key, valueLength varint, value.
A varint is at most 5 bytes and a varlong at most 10; bits beyond 32/64 are dropped, as
Kafka's readVarint/readVarlong do.

Every function is stateless; buffers are only read, except by `assign_offsets` and
`set_log_append_time`, which write in place. Errors are the shared
`CorruptRecordError` / `InvalidRecordError` from `pybroker._native.errors`.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Sequence
from typing import Any

from pybroker._native.errors import CorruptRecordError, InvalidRecordError
from pybroker._pure.crc32c import crc32c

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "assign_offsets",
    "build_batch",
    "count_records",
    "decode_records",
    "encode_records",
    "read_batch_header",
    "scan_batches",
    "set_log_append_time",
    "validate_batch",
]

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength, the part of a batch not counted by batchLength
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
_CRC_START = 21
_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_LOG_APPEND_TIME = 0x08


def _view(buf) -> memoryview:
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _bounds(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    pos = operator.index(pos)
    end = operator.index(end)
    size = len(view)
    if end == -1:
        end = size
    if pos < 0 or end < pos or end > size:
        raise ValueError(f"bad range [{pos}, {end}) for a buffer of {size} bytes")
    return pos, end


def _int(value, bits: int, signed: bool = True) -> int:
    value = operator.index(value)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not lo <= value <= hi:
        raise OverflowError(f"{value} does not fit in {'' if signed else 'u'}int{bits}")
    return value


def read_batch_header(buf, pos: int = 0) -> tuple:
    """The 13 header fields of the batch at `pos`, in header order."""
    view = _view(buf)
    pos = operator.index(pos)
    if pos < 0:
        raise ValueError("negative position")
    if len(view) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch header needs {BATCH_HEADER_SIZE} bytes, {max(len(view) - pos, 0)} remain")
    return _HEADER.unpack_from(view, pos)


def validate_batch(buf, pos: int = 0, end: int = -1) -> tuple:
    """Check that exactly one well-formed batch fills buf[pos:end]; return its header."""
    view = _view(buf)
    pos, end = _bounds(view, pos, end)
    size = end - pos
    if size < BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"record batch of {size} bytes is smaller than its header")
    header = _HEADER.unpack_from(view, pos)
    batch_length, magic = header[1], header[3]
    if batch_length + LOG_OVERHEAD != size:
        raise InvalidRecordError(
            f"batchLength {batch_length} does not match the {size} bytes given")
    if magic != 2:
        raise InvalidRecordError(f"unsupported record batch magic {magic}")
    if batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batchLength {batch_length} is below the minimum")
    computed = crc32c(view[pos + _CRC_START:end])
    if computed != header[4]:
        raise CorruptRecordError(
            f"record batch CRC {header[4]:#010x} does not match computed {computed:#010x}")
    records_count, last_offset_delta = header[12], header[6]
    if records_count <= 0 or records_count != last_offset_delta + 1:
        raise InvalidRecordError(
            f"recordsCount {records_count} does not match lastOffsetDelta {last_offset_delta}")
    return header


def scan_batches(buf, pos: int = 0, end: int = -1, verify_crc: bool = True) -> tuple:
    """Walk consecutive batches; stop at the first incomplete or invalid one."""
    view = _view(buf)
    pos, end = _bounds(view, pos, end)
    entries = []
    error = None
    while pos < end:
        remaining = end - pos
        if remaining < LOG_OVERHEAD:
            error = "truncated"
            break
        batch_length = _I32.unpack_from(view, pos + 8)[0]
        if batch_length < _MIN_BATCH_LENGTH:
            error = "length"
            break
        batch_size = batch_length + LOG_OVERHEAD
        if batch_size > remaining:
            error = "truncated"
            break
        if view[pos + 16] != 2:
            error = "magic"
            break
        if verify_crc and crc32c(view[pos + _CRC_START:pos + batch_size]) != _U32.unpack_from(
                view, pos + 17)[0]:
            error = "crc"
            break
        entries.append((pos, _I64.unpack_from(view, pos)[0], _I32.unpack_from(view, pos + 23)[0],
                        _I64.unpack_from(view, pos + 35)[0], batch_size))
        pos += batch_size
    return entries, pos, error


class _Reader:
    """Cursor over one records section; every overrun is an InvalidRecordError."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data = data
        self.pos = pos
        self.end = end

    def varint(self, max_bytes: int = 5, bits: int = 32) -> int:
        data, pos, end = self.data, self.pos, self.end
        raw = 0
        shift = 0
        for i in range(max_bytes):
            if pos >= end:
                raise InvalidRecordError("record truncated inside a varint")
            b = data[pos]
            pos += 1
            raw |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
            if i == max_bytes - 1:
                raise InvalidRecordError("varint is too long")
        self.pos = pos
        raw &= (1 << bits) - 1
        return (raw >> 1) ^ -(raw & 1)

    def varlong(self) -> int:
        return self.varint(10, 64)

    def skip(self, n: int) -> int:
        start = self.pos
        if n > self.end - start:
            raise InvalidRecordError("record field runs past the record")
        self.pos = start + n
        return start


def _read_record(data: bytes, rd: _Reader, end: int, decode: bool):
    """Parse one record at rd.pos; returns its fields (or None fields when not decoding)."""
    length = rd.varint()
    if length < 0 or length > end - rd.pos:
        raise InvalidRecordError(f"record length {length} runs past the records section")
    body_end = rd.pos + length
    rd.end = body_end
    rd.skip(1)
    attributes = data[rd.pos - 1]
    timestamp_delta = rd.varlong()
    offset_delta = rd.varint()
    key = value = None
    key_length = rd.varint()
    if key_length < -1:
        raise InvalidRecordError(f"invalid key length {key_length}")
    if key_length >= 0:
        start = rd.skip(key_length)
        if decode:
            key = data[start:rd.pos]
    value_length = rd.varint()
    if value_length < -1:
        raise InvalidRecordError(f"invalid value length {value_length}")
    if value_length >= 0:
        start = rd.skip(value_length)
        if decode:
            value = data[start:rd.pos]
    headers_count = rd.varint()
    if headers_count < 0:
        raise InvalidRecordError(f"invalid header count {headers_count}")
    headers: list[tuple[Any, Any]] = []
    for _ in range(headers_count):
        hkey_length = rd.varint()
        if hkey_length < 0:
            raise InvalidRecordError(f"invalid header key length {hkey_length}")
        start = rd.skip(hkey_length)
        hkey = data[start:rd.pos] if decode else None
        hvalue_length = rd.varint()
        if hvalue_length < -1:
            raise InvalidRecordError(f"invalid header value length {hvalue_length}")
        hvalue = None
        if hvalue_length >= 0:
            start = rd.skip(hvalue_length)
            if decode:
                hvalue = data[start:rd.pos]
        if decode:
            headers.append((hkey, hvalue))
    if rd.pos != body_end:
        raise InvalidRecordError(
            f"record length {length} leaves {body_end - rd.pos} unread bytes")
    rd.end = end
    return attributes, timestamp_delta, offset_delta, key, value, headers if decode else None


def count_records(buf, pos: int, end: int, expected: int) -> tuple[int, int]:
    """Check the framing of an uncompressed records section; (count, max timestampDelta).

    Offset deltas must run 0, 1, 2, ... and the count must equal `expected`.
    max_timestamp_delta is 0 for an empty section.
    """
    view = _view(buf)
    pos, end = _bounds(view, pos, end)
    expected = operator.index(expected)
    data = view[pos:end].tobytes()
    end -= pos
    rd = _Reader(data, 0, end)
    count = 0
    max_delta = None
    while rd.pos < end:
        if count >= expected:
            raise InvalidRecordError(f"more than the {expected} declared records")
        _, timestamp_delta, offset_delta, _, _, _ = _read_record(data, rd, end, False)
        if offset_delta != count:
            raise InvalidRecordError(f"offset delta {offset_delta} where {count} was expected")
        if max_delta is None or timestamp_delta > max_delta:
            max_delta = timestamp_delta
        count += 1
    if count != expected:
        raise InvalidRecordError(f"{count} records where {expected} were declared")
    return count, 0 if max_delta is None else max_delta


def decode_records(buf, pos: int, end: int, count: int) -> list:
    """Decode exactly `count` records filling buf[pos:end]."""
    view = _view(buf)
    pos, end = _bounds(view, pos, end)
    count = operator.index(count)
    if count < 0:
        raise InvalidRecordError(f"negative record count {count}")
    data = view[pos:end].tobytes()
    end -= pos
    rd = _Reader(data, 0, end)
    out: list[Any] = []
    for _ in range(count):
        if rd.pos >= end:
            raise InvalidRecordError(f"{len(out)} records where {count} were declared")
        out.append(_read_record(data, rd, end, True))
    if rd.pos != end:
        raise InvalidRecordError(f"{end - rd.pos} bytes left after the {count} declared records")
    return out


def _zigzag(value: int, bits: int) -> bytes:
    raw = ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _bytes_or_none(value) -> bytes | None:
    if value is None:
        return None
    return bytes(_view(value))


def _length_prefixed(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += b"\x01"  # zig-zag -1
    else:
        out += _zigzag(_int(len(value), 32), 32)
        out += value


def encode_records(records: Sequence) -> bytes:
    """Encode `(timestamp_delta, key, value, headers)` tuples; offset delta = index."""
    out = bytearray()
    for offset_delta, record in enumerate(records):
        timestamp_delta, key, value, headers = record
        timestamp_delta = _int(timestamp_delta, 64)
        _int(offset_delta, 32)
        body = bytearray(b"\x00")  # attributes: unused in v2, always 0
        body += _zigzag(timestamp_delta, 64)
        body += _zigzag(offset_delta, 32)
        _length_prefixed(body, _bytes_or_none(key))
        _length_prefixed(body, _bytes_or_none(value))
        headers = list(headers) if headers is not None else []
        body += _zigzag(_int(len(headers), 32), 32)
        for header in headers:
            hkey, hvalue = header
            if isinstance(hkey, str):
                hkey = hkey.encode()
            elif hkey is None:
                raise TypeError("header key must be bytes or str, not None")
            _length_prefixed(body, bytes(_view(hkey)))
            _length_prefixed(body, _bytes_or_none(hvalue))
        out += _zigzag(_int(len(body), 32), 32)
        out += body
    return bytes(out)


def build_batch(records_section, base_offset: int, partition_leader_epoch: int, attributes: int,
                last_offset_delta: int, base_timestamp: int, max_timestamp: int,
                producer_id: int, producer_epoch: int, base_sequence: int,
                records_count: int) -> bytes:
    """Header + `records_section` with batchLength and the CRC computed."""
    section = _view(records_section)
    batch_length = _int(_MIN_BATCH_LENGTH + len(section), 32)
    out = bytearray(BATCH_HEADER_SIZE + len(section))
    _HEADER.pack_into(
        out, 0, _int(base_offset, 64), batch_length, _int(partition_leader_epoch, 32), 2, 0,
        _int(attributes, 16), _int(last_offset_delta, 32), _int(base_timestamp, 64),
        _int(max_timestamp, 64), _int(producer_id, 64), _int(producer_epoch, 16),
        _int(base_sequence, 32), _int(records_count, 32))
    out[BATCH_HEADER_SIZE:] = section
    _U32.pack_into(out, 17, crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def _writable(buf, pos: int) -> tuple[memoryview, int]:
    view = _view(buf)
    if view.readonly:
        raise TypeError("buffer is read-only")
    pos = operator.index(pos)
    if pos < 0:
        raise ValueError("negative position")
    if len(view) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch header needs {BATCH_HEADER_SIZE} bytes, {max(len(view) - pos, 0)} remain")
    return view, pos


def assign_offsets(buf, pos: int, base_offset: int, partition_leader_epoch: int) -> None:
    """Rewrite baseOffset and partitionLeaderEpoch in place (both outside the CRC)."""
    base_offset = _int(base_offset, 64)
    partition_leader_epoch = _int(partition_leader_epoch, 32)
    view, pos = _writable(buf, pos)
    _I64.pack_into(view, pos, base_offset)
    _I32.pack_into(view, pos + 12, partition_leader_epoch)


def set_log_append_time(buf, pos: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime: attribute bit 3 and max timestamp; new CRC.

    The base timestamp stays as the producer wrote it (Kafka's setMaxTimestamp).

    The CRC covers the batch up to pos + LOG_OVERHEAD + batchLength, which must lie
    inside the buffer.
    """
    timestamp_ms = _int(timestamp_ms, 64)
    view, pos = _writable(buf, pos)
    batch_length = _I32.unpack_from(view, pos + 8)[0]
    end = pos + LOG_OVERHEAD + batch_length
    if batch_length < _MIN_BATCH_LENGTH or end > len(view):
        raise CorruptRecordError(f"batchLength {batch_length} does not fit the buffer")
    attributes = _I16.unpack_from(view, pos + 21)[0] | _LOG_APPEND_TIME
    _I16.pack_into(view, pos + 21, attributes)
    _I64.pack_into(view, pos + 35, timestamp_ms)
    _U32.pack_into(view, pos + 17, crc32c(view[pos + _CRC_START:end]))
