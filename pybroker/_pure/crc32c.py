"""CRC-32C (Castagnoli), the checksum of record batch v2 -- pure-Python twin.

Reference implementation of `pybroker._native._crc32c`: reflected polynomial 0x82F63B78,
initial value and final xor 0xFFFFFFFF, chained like the `crc32c` PyPI package so that
`crc32c(b, crc32c(a)) == crc32c(a + b)`. A byte-at-a-time table walk: correct and
dependency-free, about 10 MB/s; the compiled twin runs the SSE4.2/ARMv8 instructions.
Stateless and thread-safe.
"""

from __future__ import annotations

__all__ = ["IMPLEMENTATION", "crc32c", "crc32c_table"]

IMPLEMENTATION = "pure-python"

_POLY = 0x82F63B78


def _make_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _make_table()


def crc32c(data, value: int = 0) -> int:
    """CRC-32C of a bytes-like `data`, continuing from a previous result `value`."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if not 0 <= value <= 0xFFFFFFFF:
        raise OverflowError("value must fit in an unsigned 32-bit integer")
    crc = value ^ 0xFFFFFFFF
    table = _TABLE
    for byte in view.tobytes():
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c_table = crc32c  # the compiled twin's forced table path; here every path is the table
