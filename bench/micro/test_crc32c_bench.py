"""CRC-32C throughput: native (SSE4.2/ARMv8) vs pure Python vs the `crc32c` package."""

import os

import crc32c as crc32c_package
import pytest
from _impls import impl_module

SIZES = {"1KiB": 1 << 10, "64KiB": 1 << 16, "1MiB": 1 << 20}


@pytest.mark.parametrize("impl", ["native", "native-table", "pure", "library"])
@pytest.mark.parametrize("size", list(SIZES))
def test_crc32c(benchmark, impl, size):
    n = SIZES[size]
    if impl == "pure" and n > 1 << 16:
        pytest.skip("pure Python at 1 MiB takes ~0.1 s per call; see the 64 KiB row")
    data = os.urandom(n)
    if impl == "library":
        fn = crc32c_package.crc32c
    elif impl == "native-table":
        fn = impl_module("crc32c", "native").crc32c_table
    else:
        fn = impl_module("crc32c", impl).crc32c
    benchmark.group = f"crc32c {size}"
    benchmark.extra_info["bytes"] = n
    result = benchmark(fn, data)
    assert result == crc32c_package.crc32c(data)
