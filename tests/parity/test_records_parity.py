"""Record batch codec: native and pure agree on encoding, decoding and every rejection.

Valid batches come from random records; invalid ones from flipping, truncating and
extending bytes of valid ones, from wrong count fields, and from random bytes.
"""

import struct

import pytest
from _parity import assert_same
from hypothesis import given, settings
from hypothesis import strategies as st

TWIN = "records"

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
I32 = st.integers(-(1 << 31), (1 << 31) - 1)
I16 = st.integers(-(1 << 15), (1 << 15) - 1)
maybe_bytes = st.none() | st.binary(max_size=300)
header = st.tuples(st.binary(max_size=20) | st.text(max_size=10), maybe_bytes)
record = st.tuples(I64, maybe_bytes, maybe_bytes, st.lists(header, max_size=4))
records_lists = st.lists(record, min_size=1, max_size=12)


def make_batch(mod, records, base_offset=0, attributes=0, epoch=-1):
    section = mod.encode_records(records)
    n = len(records)
    return mod.build_batch(section, base_offset, epoch, attributes, n - 1, 1_000, 2_000,
                           -1, -1, -1, n)


def normalise(records):
    return [(ts, k, v, [(hk.encode() if isinstance(hk, str) else hk, hv) for hk, hv in hs])
            for ts, k, v, hs in records]


@given(records=records_lists, base_offset=I64, attributes=I16, epoch=I32)
def test_encode_build_decode_round_trip(twins, records, base_offset, attributes, epoch):
    native, pure = twins
    section = native.encode_records(records)
    assert section == pure.encode_records(records)
    batch = make_batch(native, records, base_offset, attributes, epoch)
    assert batch == make_batch(pure, records, base_offset, attributes, epoch)
    header = native.validate_batch(batch)
    assert header == pure.validate_batch(batch) == native.read_batch_header(batch)
    assert header[0] == base_offset and header[2] == epoch and header[5] == attributes
    end = len(batch)
    n = len(records)
    counted = native.count_records(batch, 61, end, n)
    assert counted == pure.count_records(batch, 61, end, n)
    assert counted == (n, max(r[0] for r in records))
    decoded = native.decode_records(batch, 61, end, n)
    assert decoded == pure.decode_records(batch, 61, end, n)
    assert [(ts, k, v, hs) for _, ts, _, k, v, hs in decoded] == normalise(records)
    assert [od for _, _, od, _, _, _ in decoded] == list(range(n))


@given(records=records_lists, data=st.data())
def test_corrupted_batches(twins, records, data):
    """Flip, truncate or extend a valid batch: both twins reach the same verdict."""
    native, pure = twins
    batch = bytearray(make_batch(pure, records))
    mutation = data.draw(st.sampled_from(["flip", "truncate", "extend", "count"]))
    if mutation == "flip":
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(batch) - 1))
            batch[i] ^= data.draw(st.integers(1, 255))
    elif mutation == "truncate":
        batch = batch[: data.draw(st.integers(0, len(batch) - 1))]
    elif mutation == "extend":
        batch += data.draw(st.binary(min_size=1, max_size=40))
    else:  # a wrong recordsCount or lastOffsetDelta, with a correct CRC
        field = data.draw(st.sampled_from([23, 57]))
        struct.pack_into(">i", batch, field, data.draw(I32))
        from pybroker._native import pure as pure_of
        struct.pack_into(">I", batch, 17, pure_of("crc32c").crc32c(bytes(batch[21:])))
    buf = bytes(batch)
    assert_same(native.validate_batch, pure.validate_batch, buf)
    assert_same(native.read_batch_header, pure.read_batch_header, buf)
    for verify in (True, False):
        assert_same(native.scan_batches, pure.scan_batches, buf, 0, -1, verify)
    if len(buf) >= 61:
        expected = len(records)
        assert_same(native.count_records, pure.count_records, buf, 61, len(buf), expected)
        assert_same(native.decode_records, pure.decode_records, buf, 61, len(buf), expected)


def test_flip_is_detected(twins):
    """A flipped byte inside the CRC range is always a CorruptRecordError."""
    from pybroker._native.errors import CorruptRecordError
    native, pure = twins
    batch = bytearray(make_batch(pure, [(0, b"key", b"value" * 20, [("h", b"v")])]))
    for i in range(21, len(batch)):
        bad = bytearray(batch)
        bad[i] ^= 0x40
        for mod in (native, pure):
            with pytest.raises(CorruptRecordError):
                mod.validate_batch(bytes(bad))


@settings(max_examples=300)
@given(section=st.binary(max_size=200), expected=st.integers(-2, 20))
def test_random_sections(twins, section, expected):
    native, pure = twins
    assert_same(native.count_records, pure.count_records, section, 0, len(section), expected)
    assert_same(native.decode_records, pure.decode_records, section, 0, len(section), expected)


@given(parts=st.lists(records_lists, min_size=1, max_size=4), tail=st.binary(max_size=70),
       pos=st.integers(0, 5))
def test_scan_batches(twins, parts, tail, pos):
    native, pure = twins
    batches = [make_batch(pure, r, base_offset=i * 100) for i, r in enumerate(parts)]
    buf = b"\x00" * pos + b"".join(batches) + tail
    result = assert_same(native.scan_batches, pure.scan_batches, buf, pos, -1, True)
    entries, valid_end, error = result[1]
    assert [e[4] for e in entries[: len(batches)]] == [len(b) for b in batches][: len(entries)]
    if not tail:
        assert (len(entries), valid_end, error) == (len(batches), len(buf), None)


@given(records=records_lists, base_offset=I64, epoch=I32, ts=I64, pos=st.integers(0, 3))
def test_in_place_rewrites(twins, records, base_offset, epoch, ts, pos):
    native, pure = twins
    batch = b"\xee" * pos + make_batch(pure, records)
    out = []
    for mod in (native, pure):
        buf = bytearray(batch)
        base_ts = mod.read_batch_header(buf, pos)[7]
        mod.assign_offsets(buf, pos, base_offset, epoch)
        mod.set_log_append_time(buf, pos, ts)
        header = mod.validate_batch(buf, pos)
        # Kafka's setMaxTimestamp: only attributes and maxTimestamp change (then the CRC)
        assert (header[0], header[2], header[5] & 0x08, header[7], header[8]) == (
            base_offset, epoch, 0x08, base_ts, ts)
        out.append(bytes(buf))
    assert out[0] == out[1]


@pytest.mark.parametrize("call", [
    ("assign_offsets", (b"\x00" * 61, 0, 1, 1)),            # read-only buffer
    ("assign_offsets", (bytearray(60), 0, 1, 1)),           # too short
    ("assign_offsets", (bytearray(61), -1, 1, 1)),
    ("assign_offsets", (bytearray(61), 0, 1 << 63, 1)),
    ("set_log_append_time", (bytearray(61), 0, 5)),         # batchLength 0
    ("read_batch_header", (b"\x00" * 60,)),
    ("read_batch_header", (b"\x00" * 61, -1)),
    ("validate_batch", (b"\x00" * 80, 10, 5)),
    ("validate_batch", (b"\x00" * 80, 0, 81)),
    ("scan_batches", (b"\x00" * 80, 0, 81)),
    ("count_records", (b"", 0, 0, 1)),
    ("decode_records", (b"", 0, 0, -1)),
    ("encode_records", ([(0, "str key", None, [])],)),
    ("encode_records", ([(0, None, None, [(None, b"")])],)),
    ("encode_records", ([(1 << 63, None, None, [])],)),
    ("encode_records", ([(0, None, None)],)),
    ("build_batch", (b"", 0, 0, 1 << 15, 0, 0, 0, 0, 0, 0, 1)),
    ("build_batch", (b"", 0, 0, 0, 0, 0, 0, 0, -(1 << 15) - 1, 0, 1)),
])
def test_rejections_match(twins, call):
    native, pure = twins
    name, args = call
    kind, _ = assert_same(getattr(native, name), getattr(pure, name), *args)
    assert kind == "raise"


def test_empty_and_edge_cases(twins):
    native, pure = twins
    assert native.encode_records([]) == pure.encode_records([]) == b""
    assert native.count_records(b"", 0, 0, 0) == pure.count_records(b"", 0, 0, 0) == (0, 0)
    assert native.decode_records(b"xx", 1, 1, 0) == pure.decode_records(b"xx", 1, 1, 0) == []
    assert native.scan_batches(b"") == pure.scan_batches(b"") == ([], 0, None)
    # headers=None encodes like no headers
    assert native.encode_records([(0, b"", b"", None)]) == pure.encode_records([(0, b"", b"", [])])


@given(value=st.integers(-(1 << 31), (1 << 31) - 1), extra=st.binary(max_size=2))
def test_long_varints(twins, value, extra):
    """Non-canonical 5-byte varints (Kafka accepts them) and 6-byte ones (rejected)."""
    native, pure = twins
    raw = ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF
    padded = bytes([(raw >> (7 * i)) & 0x7F | 0x80 for i in range(4)]) + bytes([raw >> 28])
    too_long = padded[:4] + bytes([padded[4] | 0x80]) + b"\x00"
    for length in (padded, too_long):
        section = length + extra
        assert_same(native.count_records, pure.count_records, section, 0, len(section), 1)
        assert_same(native.decode_records, pure.decode_records, section, 0, len(section), 1)
