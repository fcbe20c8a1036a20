"""Kafka wire primitives: fixed-width integers, varints, strings, bytes, arrays, tags.

Format (all big-endian): int8/16/32/64, uint16/uint32, float64 (IEEE 754), bool (one
byte, non-zero is true), uuid (16 raw bytes). Classic ("non-flexible") encodings prefix
strings with an int16 length and bytes/arrays/records with an int32 length, -1 meaning
null. Compact ("flexible", KIP-482) encodings prefix with an unsigned varint of
length + 1, 0 meaning null, and end every struct with a tagged-field section:
uvarint count, then per field uvarint tag, uvarint size, payload, in ascending tag order.

The generated codecs in `_generated/` inline the fixed-width cases with precompiled
`struct.Struct` objects and call the helpers below for variable-width values; the
readers here are also the public toolkit for hand-written framing (frame.py, tests).

Readers take `(buf, pos)` and return `(value, new_pos)`; `buf` is bytes or a
memoryview of format "B". They raise `struct.error`, `IndexError` or
`MalformedDataError` on short or inconsistent input; callers turn those into the
protocol error of their layer. Writers return bytes.
Concurrency: pure functions, no shared mutable state.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence, Sized
from typing import Any

from pybroker.protocol.chunks import FileRegion

ZERO_UUID = bytes(16)

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

# Longest unsigned varint Kafka accepts for a 32-bit value (ByteUtils.readUnsignedVarint).
_MAX_UVARINT_BYTES = 5


class MalformedDataError(ValueError):
    """Input bytes violate the wire format (bad length, null where not allowed, ...)."""


# One-byte varints cover every length below 128, which is nearly every string, array
# and tag count on the wire; a table lookup avoids a function call's worth of work.
_UVARINT_1 = tuple(bytes((i,)) for i in range(128))


def uvarint(n: int) -> bytes:
    """Encode a non-negative int as an unsigned LEB128 varint."""
    if n < 0x80:
        if n < 0:
            raise MalformedDataError(f"negative unsigned varint {n}")
        return _UVARINT_1[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """Read an unsigned varint of at most 5 bytes (a Kafka uint32)."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    for i in range(1, _MAX_UVARINT_BYTES):
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + i + 1
        shift += 7
    raise MalformedDataError("unsigned varint longer than 5 bytes")


def varint(n: int) -> bytes:
    """Encode a signed int as a zigzag varint (record fields, 32-bit range)."""
    return uvarint((n << 1) ^ (n >> 31))


def read_varint(buf: Any, pos: int) -> tuple[int, int]:
    """Read a zigzag-encoded signed 32-bit varint."""
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def varlong(n: int) -> bytes:
    """Encode a signed int as a zigzag varlong (64-bit range)."""
    return uvarint((n << 1) ^ (n >> 63))


def read_varlong(buf: Any, pos: int) -> tuple[int, int]:
    """Read a zigzag-encoded signed 64-bit varint (at most 10 bytes)."""
    value = 0
    shift = 0
    for i in range(10):
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos + i + 1
        shift += 7
    raise MalformedDataError("varlong longer than 10 bytes")


# --- readers -------------------------------------------------------------------------


def _slice(buf: Any, pos: int, n: int) -> int:
    end = pos + n
    if end > len(buf):
        raise MalformedDataError(f"length {n} at {pos} runs past the end ({len(buf)})")
    return end


def read_string(buf: Any, pos: int) -> tuple[str, int]:
    """Classic non-nullable string: int16 length + UTF-8."""
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        raise MalformedDataError("null value in a non-nullable string")
    end = _slice(buf, pos, n)
    return str(buf[pos:end], "utf-8", "replace"), end


def read_nullable_string(buf: Any, pos: int) -> tuple[str | None, int]:
    """Classic nullable string: int16 length (-1 = null) + UTF-8."""
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        return None, pos
    end = _slice(buf, pos, n)
    return str(buf[pos:end], "utf-8", "replace"), end


def read_compact_string(buf: Any, pos: int) -> tuple[str, int]:
    """Compact non-nullable string: uvarint length + 1."""
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise MalformedDataError("null value in a non-nullable compact string")
    end = _slice(buf, pos, n - 1)
    return str(buf[pos:end], "utf-8", "replace"), end


def read_compact_nullable_string(buf: Any, pos: int) -> tuple[str | None, int]:
    """Compact nullable string: uvarint length + 1 (0 = null)."""
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _slice(buf, pos, n - 1)
    return str(buf[pos:end], "utf-8", "replace"), end


def read_bytes(buf: Any, pos: int) -> tuple[bytes, int]:
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        raise MalformedDataError("null value in non-nullable bytes")
    end = _slice(buf, pos, n)
    return bytes(buf[pos:end]), end


def read_nullable_bytes(buf: Any, pos: int) -> tuple[bytes | None, int]:
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    end = _slice(buf, pos, n)
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: Any, pos: int) -> tuple[bytes, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise MalformedDataError("null value in non-nullable compact bytes")
    end = _slice(buf, pos, n - 1)
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: Any, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _slice(buf, pos, n - 1)
    return bytes(buf[pos:end]), end


def read_uuid(buf: Any, pos: int) -> tuple[bytes, int]:
    end = _slice(buf, pos, 16)
    return bytes(buf[pos:end]), end


def check_array_length(buf: Any, pos: int, n: int, min_element_size: int) -> None:
    """Reject a count that cannot fit in the rest of the buffer before allocating."""
    if n * min_element_size > len(buf) - pos:
        raise MalformedDataError(f"array of {n} elements at {pos} cannot fit in {len(buf)} bytes")


def read_int_array(buf: Any, pos: int, n: int, code: str, size: int) -> tuple[list[Any], int]:
    """n fixed-width elements of struct format `code` (e.g. "i") starting at pos."""
    check_array_length(buf, pos, n, size)
    return list(struct.unpack_from(f">{n}{code}", buf, pos)), pos + n * size


def read_uuid_array(buf: Any, pos: int, n: int) -> tuple[list[bytes], int]:
    check_array_length(buf, pos, n, 16)
    return [bytes(buf[p : p + 16]) for p in range(pos, pos + 16 * n, 16)], pos + 16 * n


def read_tagged_fields_raw(buf: Any, pos: int) -> tuple[list[tuple[int, bytes]], int]:
    """Read a whole tagged-field section without interpreting any tag."""
    count, pos = read_uvarint(buf, pos)
    fields: list[tuple[int, bytes]] = []
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = _slice(buf, pos, size)
        fields.append((tag, bytes(buf[pos:end])))
        pos = end
    return fields, pos


def read_unknown_tags(obj: Any, buf: Any, pos: int) -> int:
    """Read a tag section where no tag is known: keep every field in obj.unknown_tagged_fields."""
    fields, pos = read_tagged_fields_raw(buf, pos)
    if fields:
        obj.unknown_tagged_fields = fields
    return pos


# --- writers -------------------------------------------------------------------------


def string(s: str) -> bytes:
    b = s.encode()
    return INT16.pack(len(b)) + b


def nullable_string(s: str | None) -> bytes:
    if s is None:
        return b"\xff\xff"
    b = s.encode()
    return INT16.pack(len(b)) + b


def compact_string(s: str) -> bytes:
    b = s.encode()
    n = len(b) + 1
    return (_UVARINT_1[n] if n < 0x80 else uvarint(n)) + b


def compact_nullable_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    n = len(b) + 1
    return (_UVARINT_1[n] if n < 0x80 else uvarint(n)) + b


def compact_length(n: int) -> bytes:
    """Compact length prefix for n items/bytes (n + 1 as uvarint)."""
    n += 1
    return _UVARINT_1[n] if n < 0x80 else uvarint(n)


def compact_nullable_length(value: Sized | None) -> bytes:
    if value is None:
        return b"\x00"
    n = len(value) + 1
    return _UVARINT_1[n] if n < 0x80 else uvarint(n)


def int_array(code: str, values: Sequence[Any]) -> bytes:
    return struct.pack(f">{len(values)}{code}", *values)


def tagged_fields(fields: Sequence[tuple[int, bytes]]) -> bytes:
    """A tagged-field section from (tag, payload) pairs already in ascending tag order."""
    parts = [uvarint(len(fields))]
    for tag, payload in fields:
        parts.append(uvarint(tag))
        parts.append(uvarint(len(payload)))
        parts.append(payload)
    return b"".join(parts)


def write_tag_section(
    out: list[Any], known: list[tuple[int, bytes]], unknown: Sequence[tuple[int, bytes]] | None
) -> None:
    """Append a tagged-field section merging known tags with preserved unknown ones."""
    if unknown:
        known = sorted([*known, *unknown], key=_first)
    out.append(tagged_fields(known))


def _first(item: tuple[int, bytes]) -> int:
    return item[0]


# Records values: None, a bytes-like object, or a list of chunks (bytes-like or
# FileRegion) whose total length is the size prefix. Chunks are appended one by one so
# FileRegions stay separate for sendfile.


def records_size(value: Any) -> int:
    if value is None:
        return -1
    if type(value) is list:
        total = 0
        for chunk in value:
            total += chunk.length if type(chunk) is FileRegion else len(chunk)
        return total
    return memoryview(value).nbytes


def write_records(out: list[Any], value: Any) -> None:
    """Classic records: int32 size (-1 = null) then the data."""
    size = records_size(value)
    out.append(INT32.pack(size))
    if size > 0:
        if type(value) is list:
            out.extend(value)
        else:
            out.append(value)


def write_compact_records(out: list[Any], value: Any) -> None:
    """Compact records: uvarint size + 1 (0 = null) then the data."""
    size = records_size(value)
    out.append(uvarint(size + 1))
    if size > 0:
        if type(value) is list:
            out.extend(value)
        else:
            out.append(value)
