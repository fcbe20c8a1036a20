"""CRC-32C: native == pure == the `crc32c` package, for any bytes, chaining and buffer type."""

import mmap
import os

import crc32c as crc32c_package
import pytest
from _parity import assert_same
from hypothesis import given, settings
from hypothesis import strategies as st

TWIN = "crc32c"

u32 = st.integers(0, 0xFFFFFFFF)


@given(data=st.binary(max_size=2048), value=u32)
def test_small_buffers_match_package(twins, data, value):
    native, pure = twins
    expected = crc32c_package.crc32c(data, value)
    assert native.crc32c(data, value) == expected
    assert pure.crc32c(data, value) == expected
    assert native.crc32c_table(data, value) == expected


@settings(max_examples=40, deadline=None)
@given(size=st.integers(0, 200_000), skew=st.integers(0, 15), seed=st.binary(min_size=16, max_size=16))
def test_large_unaligned_buffers_match_package(twins, size, skew, seed):
    """Sizes across the 3x256 and 3x8192 interleave thresholds, at every alignment."""
    native, _ = twins
    data = (seed * (size // 16 + 2))[: size + skew]
    view = memoryview(data)[skew:]
    expected = crc32c_package.crc32c(bytes(view))
    assert native.crc32c(view) == expected
    assert native.crc32c_table(view) == expected


@given(a=st.binary(max_size=3000), b=st.binary(max_size=3000))
def test_chaining(twins, a, b):
    native, pure = twins
    assert native.crc32c(b, native.crc32c(a)) == native.crc32c(a + b)
    assert pure.crc32c(b, pure.crc32c(a)) == native.crc32c(a + b)


def test_check_value(twins):
    native, pure = twins
    # The CRC-32C check value from the catalogue of parametrised CRCs.
    assert native.crc32c(b"123456789") == pure.crc32c(b"123456789") == 0xE3069283


def test_buffer_types(twins, tmp_path):
    native, pure = twins
    data = os.urandom(70_000)
    path = tmp_path / "blob"
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for buf in (data, bytearray(data), memoryview(data), m):
            assert native.crc32c(buf) == crc32c_package.crc32c(data)
        assert pure.crc32c(memoryview(data)[:500]) == crc32c_package.crc32c(data[:500])


@pytest.mark.parametrize("args", [("abc",), (b"x", -1), (b"x", 1 << 32), (None,)])
def test_bad_arguments(twins, args):
    native, pure = twins
    kind, exc = assert_same(native.crc32c, pure.crc32c, *args)
    assert kind == "raise"
