"""Client-neutral records, sample data and bounded waiting for the real-client suites.

`Rec` is what a test produced or consumed, in one shape for every client, so that "every
record comes back byte for byte with keys, headers and timestamps" is one `==` per record.
Header keys are str (every client's API), header values bytes or None.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

CREATE_TIME = 0
LOG_APPEND_TIME = 1
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = (0, 1, -1)
T = TypeVar("T")


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None
    # Filled in on the consuming side only.
    offset: int | None = field(default=None, compare=False)
    timestamp_type: int | None = field(default=None, compare=False)
    partition: int | None = field(default=None, compare=False)


def now_ms() -> int:
    return int(time.time() * 1000)


def sample_records(null_header_values: bool = True, base_ts: int | None = None) -> list[Rec]:
    """Records covering the edge cases: None/empty keys and values, every byte value,
    duplicate header keys, null header values, out-of-order explicit timestamps, and a
    value large and repetitive enough that every codec really compresses it."""
    ts = (now_ms() - 60_000) if base_ts is None else base_ts
    every_byte = bytes(range(256))
    null_hdr = None if null_header_values else b""
    big = b"".join(i.to_bytes(2, "big") + b"pybroker-" for i in range(2000))  # ~22 KB
    return [
        Rec(b"k0", b"v0", (("h1", b"a"), ("h1", b"b"), ("h2", b"")), ts),
        Rec(None, every_byte, (), ts + 1),
        Rec(b"", b"", (("nul", null_hdr),), ts + 2),
        Rec(every_byte, None, (("bin", every_byte), ("\u00e9t\u00e9", b"utf8 key")), ts - 5_000),
        Rec(b"big", big, (("a", b"1"), ("b", b"2"), ("a", b"3")), ts + 3),
        Rec(b"\x00", b"\x00\xff\x00", (), ts + 10),
    ]


def numbered(n: int, prefix: bytes = b"m", base_ts: int | None = None) -> list[Rec]:
    ts = (now_ms() - 30_000) if base_ts is None else base_ts
    return [
        Rec(
            b"%s-key-%d" % (prefix, i),
            b"%s-value-%d" % (prefix, i),
            (("i", str(i).encode()),),
            ts + i,
        )
        for i in range(n)
    ]


def assert_same_records(
    produced: Sequence[Rec], consumed: Sequence[Rec], first_offset: int = 0
) -> None:
    """Consumed records equal the produced ones, in order, at consecutive offsets, CreateTime."""
    assert len(consumed) == len(produced), (
        f"produced {len(produced)} records, consumed {len(consumed)}"
    )
    for i, (want, got) in enumerate(zip(produced, consumed, strict=True)):
        assert got == want, f"record {i} differs:\n produced {want}\n consumed {got}"
        assert got.offset == first_offset + i, f"record {i} at offset {got.offset}"
        assert got.timestamp_type == CREATE_TIME, f"record {i} timestamp type {got.timestamp_type}"


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - retried until the deadline, then reported
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what}"
                + (f" (last error: {last_exc!r})" if last_exc else "")
            )
        time.sleep(interval)


def codec_param(codec: str) -> str | None:
    """kafka-python / aiokafka spell 'no compression' as None."""
    return None if codec == "none" else codec
