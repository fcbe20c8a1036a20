"""Base class of every generated message and struct (Kafka's ApiMessage / Message).

A generated class has `__slots__` holding its fields (snake_case of Kafka's names) plus
`unknown_tagged_fields` (None, or a list of (tag, payload bytes) read from the wire and
written back unchanged). Class attributes set by the generator:
- `_FIELDS`: tuple of `FieldSpec`, the schema facts (for tests and introspection);
- `_ENCODERS` / `_DECODERS`: version -> specialised function. An encoder appends the
  pieces of its wire form to a list; a decoder takes (buf, pos) and returns
  (instance, new_pos). Versions with the same wire shape share one function.
- `VALID_VERSIONS` (lowest, highest), `FLEXIBLE_VERSION` (first flexible version or None).

Representation: uuid fields are 16-byte `bytes` (`ZERO_UUID` default); `records` fields
decode to zero-copy memoryview slices of the input and encode from None, a bytes-like
object or a list of chunks (bytes-like or FileRegion); `bytes` fields decode to bytes.
A tagged non-nullable struct field is None when absent (the spec's default instance is
never written, so None and a default instance mean the same thing).
Concurrency: instances are plain mutable objects owned by one task.
"""

from __future__ import annotations

import builtins
import os
import struct
from typing import Any, ClassVar, NamedTuple

from pybroker.protocol.chunks import Chunk, FileRegion
from pybroker.protocol.errors import ProtocolError, UnsupportedVersionError
from pybroker.protocol.primitives import MalformedDataError


class _Unset:
    """Marker for "argument not given" where None is a legal value (nullable arrays)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


class FieldSpec(NamedTuple):
    """Schema facts of one field, as read from the JSON spec."""

    name: str  # Python attribute (snake_case)
    kafka_name: str  # the spec's name
    type: str  # spec type: "int32", "string", "[]int32", "[]Topic", "Topic", "records", ...
    versions: tuple[int, int] | None  # inclusive range, None = never present
    nullable: tuple[int, int] | None
    tag: int | None
    tagged: tuple[int, int] | None
    ignorable: bool
    map_key: bool
    default: Any  # scalar default; None for null and for structs; () for empty arrays
    struct: builtins.type[ApiMessage] | None  # element/struct class for struct and []struct types


def in_range(r: tuple[int, int] | None, v: int) -> bool:
    return r is not None and r[0] <= v <= r[1]


_DECODE_ERRORS = (
    struct.error,
    IndexError,
    ValueError,
    TypeError,
    MalformedDataError,
    OverflowError,
)
_ENCODE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, OverflowError)


class ApiMessage:
    __slots__ = ()

    _FIELDS: ClassVar[tuple[FieldSpec, ...]] = ()
    _ENCODERS: ClassVar[dict[int, Any]] = {}
    _DECODERS: ClassVar[dict[int, Any]] = {}
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 0)
    FLEXIBLE_VERSION: ClassVar[int | None] = None
    API_KEY: ClassVar[int]  # requests, responses and metadata records; absent on nested structs

    # -- encoding ---------------------------------------------------------------------

    def encode_parts(self, version: int) -> list[Any]:
        """The wire form as a list of bytes-like pieces and FileRegions, in order."""
        encoder = self._ENCODERS.get(version)
        if encoder is None:
            raise UnsupportedVersionError(
                f"{type(self).__name__} has no version {version}", api_version=version
            )
        out: list[Any] = []
        try:
            encoder(self, out)
        except UnsupportedVersionError as e:
            e.api_version = version
            e.args = (f"{type(self).__name__} v{version}: {e}",)
            raise
        except _ENCODE_ERRORS as e:
            raise ValueError(f"cannot encode {type(self).__name__} v{version}: {e!r}") from e
        return out

    def encode(self, version: int) -> bytes:
        """The wire form as one bytes object (FileRegions are read from their files)."""
        parts = self.encode_parts(version)
        try:
            return b"".join(parts)
        except TypeError:
            return b"".join(_read_region(p) if type(p) is FileRegion else p for p in parts)

    def encode_chunks(self, version: int) -> list[Chunk]:
        """The wire form as few chunks: small pieces joined, large buffers and FileRegions kept."""
        return coalesce(self.encode_parts(version))

    # -- decoding ---------------------------------------------------------------------

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, version: int) -> Any:
        """Decode one instance from buf (trailing bytes are ignored, as Kafka does)."""
        return cls.decode_from(buf, 0, version)[0]

    @classmethod
    def decode_from(cls, buf: bytes | bytearray | memoryview, pos: int, version: int) -> Any:
        """Decode one instance starting at pos; returns (instance, end position)."""
        decoder = cls._DECODERS.get(version)
        if decoder is None:
            raise UnsupportedVersionError(
                f"{cls.__name__} has no version {version}", api_version=version
            )
        mv = as_memoryview(buf)
        try:
            return decoder(mv, pos)
        except _DECODE_ERRORS as e:
            raise ProtocolError(
                f"malformed {cls.__name__} v{version}: {e}", api_version=version
            ) from e

    # -- value semantics for tests and logs ---------------------------------------------

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        name: str
        for name in self.__slots__:
            a = getattr(self, name)
            b = getattr(other, name)
            if a is b:
                continue
            if name == "unknown_tagged_fields":
                if (a or None) != (b or None):
                    return False
            elif type(a) is list and type(b) is list:
                if len(a) != len(b) or any(_neq(x, y) for x, y in zip(a, b, strict=True)):
                    return False
            elif _neq(a, b):
                return False
        return True

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = []
        name: str
        for name in self.__slots__:
            value = getattr(self, name)
            if name == "unknown_tagged_fields" and not value:
                continue
            parts.append(f"{name}={_short_repr(value)}")
        return f"{type(self).__qualname__}({', '.join(parts)})"


def _neq(a: Any, b: Any) -> bool:
    if isinstance(a, memoryview | bytearray) or isinstance(b, memoryview | bytearray):
        try:
            return bytes(a) != bytes(b)
        except TypeError:
            return True
    return bool(a != b)


def _short_repr(value: Any) -> str:
    if type(value) is memoryview:
        return f"<memoryview {value.nbytes} bytes>"
    if isinstance(value, bytes | bytearray) and len(value) > 64:
        return f"<{type(value).__name__} {len(value)} bytes>"
    return repr(value)


def as_memoryview(buf: Any) -> memoryview:
    mv = buf if type(buf) is memoryview else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def _read_region(region: FileRegion) -> bytes:
    data = os.pread(region.fd, region.length, region.position)
    if len(data) != region.length:
        raise OSError(f"short read from {region}: {len(data)} bytes")
    return data


# Buffers at least this large are passed through rather than copied into a join: the
# socket writer hands the list to sendmsg/writev, so copying a 1 MiB batch would cost
# more than one extra iovec entry.
_PASS_THROUGH_BYTES = 16 * 1024


def coalesce(parts: list[Any]) -> list[Chunk]:
    """Join runs of small pieces; keep FileRegions and large buffers as their own chunks."""
    chunks: list[Chunk] = []
    run: list[Any] = []
    for p in parts:
        if type(p) is FileRegion or len(p) >= _PASS_THROUGH_BYTES:
            if run:
                chunks.append(b"".join(run) if len(run) > 1 else bytes(run[0]))
                run = []
            chunks.append(p)
        else:
            run.append(p)
    if run:
        chunks.append(b"".join(run) if len(run) > 1 else bytes(run[0]))
    return chunks
