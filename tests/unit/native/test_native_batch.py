"""records.batch helpers, checked against kafka-python's independent v2 implementation."""

from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from pybroker._native.errors import CorruptRecordError, InvalidRecordError
from pybroker.records import (
    build_batch,
    iter_batch_records,
    iter_batches,
    validate_and_count,
)

CODECS = [0, 1, 2, 3, 4]


class Record(NamedTuple):
    """An object with record attributes, which build_batch takes as well as tuples."""

    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()

maybe = st.none() | st.binary(max_size=200)
records_st = st.lists(
    st.tuples(st.integers(0, 2**41), maybe, maybe,
              st.lists(st.tuples(st.text(max_size=8), maybe), max_size=3)),
    min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(records=records_st, codec=st.sampled_from(CODECS), base_offset=st.integers(0, 2**40))
def test_kafka_python_reads_our_batches(records, codec, base_offset):
    batch = build_batch(records, base_offset=base_offset, compression=codec)
    header = validate_and_count(batch)
    assert header.records_count == len(records) and header.compression == codec
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers])
           for r in theirs]
    assert got == [(base_offset + i, ts, k, v, [(hk, hv) for hk, hv in hs])
                   for i, (ts, k, v, hs) in enumerate(records)]


@settings(max_examples=60, deadline=None)
@given(records=records_st, codec=st.sampled_from(CODECS))
def test_we_read_kafka_python_batches(records, codec):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                        producer_id=7, producer_epoch=1, base_sequence=3,
                                        batch_size=1 << 30)
    for i, (ts, k, v, hs) in enumerate(records):
        builder.append(i, ts, k, v, hs)
    batch = bytes(builder.build())
    header = validate_and_count(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 3)
    _, decoded = iter_batch_records(batch)
    assert [(d.offset, d.timestamp_ms, d.key, d.value, d.headers) for d in decoded] == [
        (i, ts, k, v, [(hk.encode(), hv) for hk, hv in hs])
        for i, (ts, k, v, hs) in enumerate(records)]


def test_attributes_and_log_append_time():
    batch = build_batch([Record(5, b"k", b"v"), (9, None, b"w", [])], compression=3,
                        timestamp_type=1, transactional=True, producer_id=11,
                        producer_epoch=2, base_sequence=0, partition_leader_epoch=4)
    header, decoded = iter_batch_records(batch)
    assert header.is_transactional and not header.is_control
    assert header.timestamp_type == 1 and header.max_timestamp == 9
    assert [d.timestamp_ms for d in decoded] == [9, 9]  # LogAppendTime: maxTimestamp
    assert header.partition_leader_epoch == 4 and header.next_offset == 2


def test_compressed_batch_with_wrong_count_is_invalid():
    batch = bytearray(build_batch([(0, None, b"a"), (1, None, b"b")], compression=4))
    from pybroker._native import crc32c
    batch[57:61] = (3).to_bytes(4, "big")  # recordsCount 3, lastOffsetDelta still 1
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError):
        validate_and_count(bytes(batch))


def test_compressed_garbage_is_corrupt():
    batch = bytearray(build_batch([(0, None, b"a" * 100)], compression=2))
    batch[-5] ^= 0xFF
    from pybroker._native import crc32c
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with pytest.raises((CorruptRecordError, InvalidRecordError)):
        validate_and_count(bytes(batch))


def test_iter_batches_stops_at_partial_tail():
    one = build_batch([(0, None, b"x")], base_offset=0)
    two = build_batch([(0, None, b"y"), (1, None, b"z")], base_offset=1)
    got = list(iter_batches(one + two + two[:20]))
    assert [(h.base_offset, h.records_count, bytes(v) == b) for (h, v), b in
            zip(got, (one, two), strict=True)] == [(0, 1, True), (1, 2, True)]


def test_build_batch_needs_records():
    with pytest.raises(ValueError):
        build_batch([])
