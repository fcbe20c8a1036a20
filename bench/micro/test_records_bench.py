"""Record batch hot paths: validate (CRC + framing walk), scan, encode, decode.

`library` is kafka-python's pure-Python DefaultRecordBatch, the codec aiokafka and
kafka-python use.
"""

import pytest
from _impls import impl_module
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

SHAPES = {"100x100B": (100, 100), "1000x1KiB": (1000, 1000)}


def records_for(shape):
    n, size = SHAPES[shape]
    return [(i, b"key-%d" % i, bytes([i % 251]) * size, [("trace", b"x")]) for i in range(n)]


def batch_for(shape):
    mod = impl_module("records", "pure")
    records = records_for(shape)
    section = mod.encode_records(records)
    return mod.build_batch(section, 0, 0, 0, len(records) - 1, 0, len(records), -1, -1, -1,
                           len(records))


@pytest.mark.parametrize("impl", ["native", "pure", "library"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_validate_and_count(benchmark, impl, shape):
    batch = batch_for(shape)
    n = SHAPES[shape][0]
    benchmark.group = f"validate+count {shape}"
    if impl == "library":
        def run():
            b = DefaultRecordBatch(batch)
            assert b.validate_crc()
            return sum(1 for _ in b)
        assert benchmark(run) == n
        return
    mod = impl_module("records", impl)

    def run():
        mod.validate_batch(batch)
        return mod.count_records(batch, 61, len(batch), n)[0]
    assert benchmark(run) == n


@pytest.mark.parametrize("impl", ["native", "pure"])
def test_scan_segment(benchmark, impl):
    """Recovery: walk 100 batches of 100 records with CRC checks."""
    buf = batch_for("100x100B") * 100
    mod = impl_module("records", impl)
    benchmark.group = "scan_batches 100 batches"
    entries, end, error = benchmark(mod.scan_batches, buf)
    assert len(entries) == 100 and error is None


@pytest.mark.parametrize("impl", ["native", "pure", "library"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_encode(benchmark, impl, shape):
    records = records_for(shape)
    benchmark.group = f"encode {shape}"
    if impl == "library":
        def run():
            builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
            for i, (ts, k, v, h) in enumerate(records):
                builder.append(i, ts, k, v, h)
            return builder.build()
        benchmark(run)
        return
    mod = impl_module("records", impl)

    def run():
        section = mod.encode_records(records)
        return mod.build_batch(section, 0, 0, 0, len(records) - 1, 0, 0, -1, -1, -1,
                               len(records))
    benchmark(run)


@pytest.mark.parametrize("impl", ["native", "pure", "library"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_decode(benchmark, impl, shape):
    batch = batch_for(shape)
    n = SHAPES[shape][0]
    benchmark.group = f"decode {shape}"
    if impl == "library":
        assert benchmark(lambda: len([r.value for r in DefaultRecordBatch(batch)])) == n
        return
    mod = impl_module("records", impl)
    assert len(benchmark(mod.decode_records, batch, 61, len(batch), n)) == n
