"""Arrow columns <-> records sections: native and pure agree byte for byte, and both are right.

Columns are built here in Arrow's layout from Python lists (validity bitmaps, int32/int64
offsets, a slice offset in front), so this runs without pyarrow; tests/spark checks the
pyarrow adapter against the same layout. Besides agreeing with each other, the sections
must decode (pybroker._pure.records) back to the rows that went in, keys must land where
Java's partitioner puts them, and the reader must return exactly the records in range.
"""

from __future__ import annotations

import struct

import pytest
from _parity import assert_same
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker._native import pure as pure_of

TWIN = "arrow_records"
records = pure_of("records")

# Java's Utils.murmur2 on these bytes (Kafka's UtilsTest).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def bitmap(valid: list[bool], pad: int) -> bytes:
    bits = [False] * pad + valid
    out = bytearray((len(bits) + 7) // 8)
    for i, ok in enumerate(bits):
        if ok:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def binary_column(values: list[bytes | None], pad: int = 0, width: int = 4,
                  force_validity: bool = False) -> tuple:
    """(validity, offsets, data, offset, width) with `pad` junk elements in front."""
    fmt = "<i" if width == 4 else "<q"
    data = bytearray(b"J" * pad)
    offsets = [0]
    for i in range(pad):
        offsets.append(i + 1)
    for v in values:
        if v is not None:
            data += v
        offsets.append(len(data))
    has_nulls = any(v is None for v in values)
    validity = bitmap([v is not None for v in values], pad) if has_nulls or force_validity else None
    return (validity, b"".join(struct.pack(fmt, o) for o in offsets), bytes(data), pad, width)


def int_column(values: list[int | None], fmt: str, pad: int = 0) -> tuple:
    raw = [0] * pad + [0 if v is None else v for v in values]
    validity = bitmap([v is not None for v in values], pad) if None in values else None
    return (validity, b"".join(struct.pack(fmt, v) for v in raw), pad)


def headers_column(rows: list[list[tuple[bytes, bytes | None]] | None], pad: int = 0,
                   width: int = 4) -> tuple:
    fmt = "<i" if width == 4 else "<q"
    offsets = [0] * (pad + 1)
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for hs in rows:
        for k, v in hs or []:
            keys.append(k)
            values.append(v)
        offsets.append(len(keys))
    validity = bitmap([hs is not None for hs in rows], pad) if None in rows else None
    return (validity, b"".join(struct.pack(fmt, o) for o in offsets), pad, width, None, 0,
            binary_column(keys), binary_column(values, pad=1 if values else 0))


def section_rows(section: bytes, count: int, base_ts: int):
    decoded = records.decode_records(section, 0, len(section), count)
    return [(base_ts + ts_delta, od, k, v, hs) for _, ts_delta, od, k, v, hs in decoded]


# ---- murmur2 -----------------------------------------------------------------------------

def test_murmur2_matches_java(twins):
    native, pure = twins
    for data, expected in JAVA_MURMUR2.items():
        assert native.murmur2(data) == expected
        assert pure.murmur2(data) == expected


@given(data=st.binary(max_size=64))
def test_murmur2_parity(twins, data):
    native, pure = twins
    assert native.murmur2(data) == pure.murmur2(data)
    assert native.murmur2(bytearray(data)) == native.murmur2(data)


# ---- assign_partitions ---------------------------------------------------------------------

maybe_key = st.none() | st.binary(max_size=24)


@given(keys=st.lists(maybe_key, max_size=40), data=st.data(), pad=st.integers(0, 9),
       width=st.sampled_from([4, 8]))
def test_assign_partitions(twins, keys, data, pad, width):
    native, pure = twins
    n = len(keys)
    topics = data.draw(st.integers(1, 3))
    counts = data.draw(st.lists(st.integers(1, 12), min_size=topics, max_size=topics))
    sticky = [data.draw(st.integers(0, c - 1)) for c in counts]
    tix = [data.draw(st.integers(0, topics - 1)) for _ in range(n)]
    use_part = data.draw(st.booleans())
    parts = [data.draw(st.none() | st.integers(0, counts[t] - 1)) for t in tix]
    key = binary_column(keys, pad, width)
    part = int_column(parts, "<i", pad) if use_part else None
    topic_index = b"".join(struct.pack("<i", t) for t in tix) if topics > 1 else None
    if topics == 1:
        tix = [0] * n
    got = assert_same(native.assign_partitions, pure.assign_partitions, n, key, part,
                      topic_index, counts, sticky)
    assert got[0] == "ok"
    dest = struct.unpack(f"<{n}i", got[1])
    base = [sum(counts[:t]) for t in range(topics)]
    for i in range(n):
        t = tix[i]
        if use_part and parts[i] is not None:
            want = parts[i]
        elif keys[i] is not None:
            want = (pure.murmur2(keys[i]) & 0x7FFFFFFF) % counts[t]
        else:
            want = sticky[t]
        assert dest[i] == base[t] + want


def test_assign_partitions_rejects_bad_input(twins):
    native, pure = twins
    key = binary_column([b"a", b"b"])
    # partition out of range, a topic index past the list, offsets outside the data
    assert assert_same(native.assign_partitions, pure.assign_partitions, 2, key,
                       int_column([0, 3], "<i"), None, [3], [0])[1] is ValueError
    assert assert_same(native.assign_partitions, pure.assign_partitions, 2, key, None,
                       struct.pack("<2i", 0, 1), [3], [0])[1] is ValueError
    bad = (None, struct.pack("<3i", 0, 100, 2), b"ab", 0, 4)
    assert assert_same(native.assign_partitions, pure.assign_partitions, 2, bad, None,
                       None, [3], [0])[1] is ValueError
    assert assert_same(native.assign_partitions, pure.assign_partitions, 1, key, None,
                       None, [0], [0])[1] is ValueError


# ---- encode_grouped ------------------------------------------------------------------------

header = st.tuples(st.binary(max_size=8), st.none() | st.binary(max_size=8))
row = st.tuples(maybe_key, st.none() | st.binary(max_size=40),
                st.none() | st.integers(-(1 << 50), 1 << 50),
                st.none() | st.lists(header, max_size=3))


@settings(max_examples=150)
@given(rows=st.lists(row, max_size=40), data=st.data(), pad=st.integers(0, 5),
       width=st.sampled_from([4, 8]), max_bytes=st.integers(1, 400),
       divisor=st.sampled_from([1, 1000, 7]))
def test_encode_grouped(twins, rows, data, pad, width, max_bytes, divisor):
    native, pure = twins
    n = len(rows)
    n_dest = data.draw(st.integers(1, 5))
    dests = [data.draw(st.integers(0, n_dest - 1)) for _ in range(n)]
    with_headers = data.draw(st.booleans())
    args = (n, b"".join(struct.pack("<i", d) for d in dests), n_dest,
            binary_column([r[0] for r in rows], pad, width),
            binary_column([r[1] for r in rows], pad, width),
            int_column([r[2] for r in rows], "<q", pad), divisor, 1234567,
            headers_column([r[3] for r in rows], pad, width) if with_headers else None,
            max_bytes)
    got = assert_same(native.encode_grouped, pure.encode_grouped, *args)
    assert got[0] == "ok"
    sections = got[1]
    # Decoding every section gives back each destination's rows in input order.
    seen: dict[int, list] = {}
    last_dest = -1
    for dest, section, count, base_ts, max_ts in sections:
        assert dest >= last_dest
        last_dest = dest
        decoded = section_rows(section, count, base_ts)
        assert [od for _, od, _, _, _ in decoded] == list(range(count))
        assert max_ts == max(ts for ts, *_ in decoded)
        assert count == 1 or len(section) <= max_bytes
        seen.setdefault(dest, []).extend(decoded)
    for d in range(n_dest):
        want = []
        for i in range(n):
            if dests[i] != d:
                continue
            key, value, ts, hs = rows[i]
            want.append((1234567 if ts is None else ts // divisor, key, value,
                         [(k, v) for k, v in (hs or [])] if with_headers else []))
        got_rows = [(ts, k, v, hs) for ts, _, k, v, hs in seen.get(d, [])]
        assert got_rows == want


def test_encode_grouped_rejects_bad_input(twins):
    native, pure = twins
    value = binary_column([b"x", b"y"])
    dest = struct.pack("<2i", 0, 1)
    cases = [
        (2, struct.pack("<2i", 0, 5), 2, None, value, None, 1, 0, None, 100),  # dest range
        (2, dest, 2, None, (None, struct.pack("<3i", 0, 9, 2), b"xy", 0, 4), None, 1, 0,
         None, 100),  # offsets past the data
        (2, dest, 2, None, value, None, 1, 0,
         headers_column([[(b"k", None)], None])[:6] + (binary_column([None]),
                                                        binary_column([b"v"])), 100),
        (2, dest[:4], 2, None, value, None, 1, 0, None, 100),  # dest too short
        (2, dest, 2, None, value, None, 0, 0, None, 100),  # divisor
    ]
    for args in cases:
        assert assert_same(native.encode_grouped, pure.encode_grouped, *args)[1] is ValueError


# ---- RecordColumns -------------------------------------------------------------------------

batch_record = st.tuples(st.integers(-(1 << 40), 1 << 40), maybe_key, st.none() | st.binary(max_size=30),
                         st.lists(header, max_size=3))


def finish_both(native_cols, pure_cols):
    a, b = native_cols.finish(), pure_cols.finish()
    assert a == b
    return a


@settings(max_examples=150)
@given(batches=st.lists(st.lists(batch_record, min_size=1, max_size=10), min_size=1, max_size=4),
       with_headers=st.booleans(), data=st.data())
def test_record_columns(twins, batches, with_headers, data):
    native, pure = twins
    cols = (native.RecordColumns(with_headers), pure.RecordColumns(with_headers))
    expected = []
    next_offset = data.draw(st.integers(0, 1 << 40))
    for recs in batches:
        section = records.encode_records(recs)
        base_ts = data.draw(st.integers(0, 1 << 41))
        log_append = data.draw(st.booleans())
        max_ts = data.draw(st.integers(0, 1 << 41))
        lo = next_offset + data.draw(st.integers(0, len(recs)))
        hi = data.draw(st.integers(lo, next_offset + len(recs) + 2))
        framed = b"\xff" * 3 + section + b"\xee"
        kept = [c.append(framed, 3, 3 + len(section), len(recs), next_offset, base_ts, log_append,
                         max_ts, lo, hi) for c in cols]
        assert kept[0] == kept[1]
        for delta, (ts_delta, k, v, hs) in enumerate(recs):
            offset = next_offset + delta
            if lo <= offset < hi:
                ts = max_ts if log_append else base_ts + ts_delta
                expected.append((offset, ts * 1000, 1 if log_append else 0, k, v,
                                 [(hk.encode() if isinstance(hk, str) else hk, hv) for hk, hv in hs]))
        next_offset += len(recs)
    assert cols[0].rows == cols[1].rows == len(expected)
    assert cols[0].data_bytes == cols[1].data_bytes
    out = finish_both(*cols)
    assert out["rows"] == len(expected)
    assert list(struct.unpack(f"<{len(expected)}q", out["offsets"])) == [e[0] for e in expected]
    assert list(struct.unpack(f"<{len(expected)}q", out["timestamps"])) == [e[1] for e in expected]
    assert list(struct.unpack(f"<{len(expected)}i", out["timestamp_types"])) == [e[2] for e in expected]
    for name, pos in (("key", 3), ("value", 4)):
        offs = struct.unpack(f"<{len(expected) + 1}i", out[f"{name}_offsets"])
        got = []
        for i in range(len(expected)):
            valid = out[f"{name}_validity"][i >> 3] >> (i & 7) & 1
            got.append(out[f"{name}_data"][offs[i]:offs[i + 1]] if valid else None)
        assert got == [e[pos] for e in expected]
        assert out[f"{name}_nulls"] == sum(e[pos] is None for e in expected)
    if with_headers:
        assert out["header_count"] == sum(len(e[5]) for e in expected)
    assert cols[0].rows == cols[1].rows == 0  # finish starts over


@settings(max_examples=200)
@given(recs=st.lists(batch_record, min_size=1, max_size=6), data=st.data(), with_headers=st.booleans())
def test_record_columns_corrupt_sections(twins, recs, data, with_headers):
    """Flipped, cut or padded sections: same verdict, and a failing batch leaves nothing."""
    native, pure = twins
    section = bytearray(records.encode_records(recs))
    mutation = data.draw(st.sampled_from(["flip", "truncate", "extend", "count"]))
    count = len(recs)
    if mutation == "flip":
        i = data.draw(st.integers(0, len(section) - 1))
        section[i] ^= data.draw(st.integers(1, 255))
    elif mutation == "truncate":
        section = section[:data.draw(st.integers(0, len(section) - 1))]
    elif mutation == "extend":
        section += data.draw(st.binary(min_size=1, max_size=8))
    else:
        count = data.draw(st.integers(-2, count + 2))
    cols = (native.RecordColumns(with_headers), pure.RecordColumns(with_headers))
    good = records.encode_records([(0, b"k", b"v", [(b"h", b"x")])])
    for c in cols:
        c.append(good, 0, len(good), 1, 0, 5, False, 5, 0, 1 << 62)
    buf = bytes(section)
    assert_same(cols[0].append, cols[1].append, buf, 0, len(buf), count, 10, 5, False, 5, 0, 1 << 62)
    finish_both(*cols)


def test_record_columns_bad_range(twins):
    native, pure = twins
    for bad in ((5, 2), (-1, 2), (0, 99)):
        assert assert_same(native.RecordColumns().append, pure.RecordColumns().append, b"abc",
                           bad[0], bad[1], 0, 0, 0, False, 0, 0, 1)[1] is ValueError


@pytest.mark.parametrize("with_headers", [False, True])
def test_record_columns_empty_finish(twins, with_headers):
    native, pure = twins
    a, b = native.RecordColumns(with_headers).finish(), pure.RecordColumns(with_headers).finish()
    assert a == b and a["rows"] == 0 and a["key_offsets"] == b"\x00\x00\x00\x00"
