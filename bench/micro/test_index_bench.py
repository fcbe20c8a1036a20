"""Index lookup over a 1 MiB offset index (131072 entries): native vs pure vs bisect on
a pre-decoded list (the best a Python index can do, paid for with memory)."""

import bisect
import struct

import pytest
from _impls import impl_module

N = 131_072
KEYS = list(range(0, N * 3, 3))
BUF = b"".join(struct.pack(">II", k, i) for i, k in enumerate(KEYS))
TARGETS = [(i * 7919) % (N * 3) for i in range(1000)]


@pytest.mark.parametrize("impl", ["native", "pure", "library"])
def test_offset_lookup(benchmark, impl):
    benchmark.group = "offset_lookup 1000 lookups in 128Ki entries"
    if impl == "library":
        def run():
            return [bisect.bisect_right(KEYS, t) - 1 for t in TARGETS]
    else:
        lookup = impl_module("index", impl).offset_lookup

        def run():
            return [lookup(BUF, N, t) for t in TARGETS]
    result = benchmark(run)
    assert result == [t // 3 for t in TARGETS]
