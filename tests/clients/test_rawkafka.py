"""Self-checks of the hand-written encoder in rawkafka.py, against kafka-python's record batch
reader (an independent implementation). Needs no broker: if these fail, the bad-input tests'
verdicts mean nothing."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from . import rawkafka as rk

maybe_bytes = st.one_of(st.none(), st.binary(max_size=200))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_zigzag_varint_matches_kafka_python(n):
    from kafka.record.util import decode_varint

    encoded = rk.zigzag_varint(n)
    assert decode_varint(bytearray(encoded), 0) == (n, len(encoded))


@given(
    st.lists(st.tuples(maybe_bytes, maybe_bytes), min_size=1, max_size=20),
    st.integers(min_value=0, max_value=2**41),
)
def test_record_batch_is_read_back_by_kafka_python(records, ts):
    batch = rk.record_batch(rk.BatchSpec(ts, records))
    parsed = DefaultRecordBatch(bytearray(batch))
    assert parsed.validate_crc()
    assert parsed.magic == 2 and parsed.attributes == 0
    assert parsed.last_offset_delta == len(records) - 1
    got = [(r.key, r.value, r.offset, r.timestamp) for r in parsed]
    assert got == [(k, v, i, ts) for i, (k, v) in enumerate(records)]
    # batchLength + 12 == the whole batch
    assert struct.unpack_from(">i", batch, 8)[0] + 12 == len(batch)


def test_bad_batches_are_bad_in_the_intended_way_only():
    ts = 1_700_000_000_000
    recs = [(b"a", b"1"), (b"b", b"2")]
    bad_crc = DefaultRecordBatch(
        bytearray(rk.record_batch(rk.BatchSpec(ts, recs, corrupt_crc=True)))
    )
    assert not bad_crc.validate_crc()
    wrong_count = rk.record_batch(rk.BatchSpec(ts, recs, records_count=3))
    parsed = DefaultRecordBatch(bytearray(wrong_count))
    assert parsed.validate_crc()  # the CRC is right: only the count is wrong
    assert struct.unpack_from(">i", wrong_count, 57)[0] == 3
    assert parsed.last_offset_delta == 1
    control = DefaultRecordBatch(bytearray(rk.control_batch(ts)))
    assert control.validate_crc() and control.is_control_batch and control.is_transactional


def test_produce_v3_layout():
    batch = rk.record_batch(rk.BatchSpec(1, [(None, b"v")]))
    msg = rk.produce_v3(7, "t", 0, batch, acks=-1, timeout_ms=1000)
    size, api_key, version, cid = struct.unpack_from(">ihhi", msg)
    assert (size, api_key, version, cid) == (len(msg) - 4, 0, 3, 7)
    # client_id "rawkafka", null transactional_id, acks, timeout, 1 topic "t", 1 partition 0
    rest = msg[4 + 8 + 2 + len(b"rawkafka") :]
    assert rest[:2] == b"\xff\xff"
    assert struct.unpack_from(">hii", rest, 2) == (-1, 1000, 1)
    assert rest[12:15] == b"\x00\x01t"
    assert struct.unpack_from(">iii", rest, 15) == (1, 0, len(batch))
    assert rest[27:] == batch


def test_parse_metadata_v1_reads_a_hand_built_response():
    body = (
        struct.pack(">i", 1)
        + struct.pack(">i", 1)
        + rk.string("h")
        + struct.pack(">i", 9)
        + rk.string(None)
        + struct.pack(">i", 1)  # controller
        + struct.pack(">i", 1)
        + struct.pack(">h", 0)
        + rk.string("t")
        + b"\x00"
        + struct.pack(">i", 2)
        + struct.pack(">hii", 0, 0, 1)
        + struct.pack(">ii", 1, 1)
        + struct.pack(">ii", 1, 1)
        + struct.pack(">hii", 5, 1, -1)
        + struct.pack(">i", 0)
        + struct.pack(">i", 0)
    )
    brokers, controller, topics = rk.parse_metadata_v1(body)
    assert brokers == [(1, "h", 9)] and controller == 1
    assert topics[0].name == "t" and topics[0].partitions == {0: (0, 1), 1: (5, -1)}
