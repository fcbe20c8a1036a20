"""Segment recovery scans: native and pure agree on every log, valid or damaged, and on every
rejection; and the indexes they compute are the ones the append path writes."""

import struct

from _parity import assert_same
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker._native import pure as pure_of

TWIN = "recovery"
_records = pure_of("records")
_SECTION = _records.encode_records([(0, b"k", b"v" * 20, [])])

batch_spec = st.tuples(
    st.integers(0, 3),                 # gap before the batch's base offset (0 = contiguous)
    st.integers(0, 40),                # last offset delta
    st.integers(-1, 10_000),           # max timestamp
    st.integers(-2, 6),                # partition leader epoch
    st.sampled_from([-1, -1, 7, 12]),  # producer id
    st.integers(0, 300),               # padding bytes inside the batch (varies its size)
)


def make_log(base_offset, specs):
    out = bytearray()
    offset = base_offset
    for gap, delta, max_ts, epoch, pid, pad in specs:
        offset += gap
        section = _SECTION + b"\0" * pad
        out += _records.build_batch(section, offset, epoch, 0, delta, 0, max_ts, pid, 0 if pid >= 0 else -1,
                                    0 if pid >= 0 else -1, delta + 1)
        offset += delta + 1
    return bytes(out)


@settings(max_examples=200, deadline=None)
@given(base=st.integers(0, 2**40), specs=st.lists(batch_spec, max_size=25), interval=st.integers(0, 600),
       latest=st.integers(-1, 4), max_entries=st.integers(0, 30), final=st.booleans(), data=st.data())
def test_recover_segment_twins_agree(twins, base, specs, interval, latest, max_entries, final, data):
    native, pure = twins
    buf = bytearray(make_log(base, specs))
    mutation = data.draw(st.sampled_from(["none", "none", "flip", "truncate", "extend", "offsets"]))
    if mutation == "flip" and buf:
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] ^= data.draw(st.integers(1, 255))
    elif mutation == "truncate" and buf:
        buf = buf[: data.draw(st.integers(0, len(buf) - 1))]
    elif mutation == "extend":
        buf += data.draw(st.binary(min_size=1, max_size=80))
    elif mutation == "offsets" and buf:
        # an offset that goes back, or out of the segment's 32-bit range (outside the CRC)
        struct.pack_into(">q", buf, 0, data.draw(st.sampled_from([base - 1, base + 2**31, -5])))
    got = assert_same(native.recover_segment, pure.recover_segment, bytes(buf), base, interval, latest,
                      max_entries, max_entries, final)
    if got[0] == "ok" and mutation == "none":
        valid, next_offset, *_rest, producers, error = got[1]
        assert error is None and valid == len(buf)
        assert producers == sum(1 for s in specs if s[4] >= 0)


@settings(max_examples=150, deadline=None)
@given(specs=st.lists(batch_spec, max_size=25), start=st.integers(0, 500), cut=st.integers(0, 5000),
       pos_pick=st.integers(0, 30))
def test_producer_batches_twins_agree(twins, specs, start, cut, pos_pick):
    native, pure = twins
    buf = make_log(0, specs)
    buf = buf[: max(0, len(buf) - cut)]
    positions = [0]
    got = pure.producer_batches(buf, 0, -1, 0)
    positions += [p for p, _ in got]
    pos = positions[pos_pick % len(positions)]
    result = assert_same(native.producer_batches, pure.producer_batches, buf, pos, len(buf), start)
    assert result[0] == "ok"
    for position, header in result[1]:
        assert header == _records.read_batch_header(buf, position)
        assert header[9] >= 0 and header[0] + header[6] >= start
    assert_same(native.producer_batches, pure.producer_batches, buf, 5, 2, 0)  # bad range: ValueError


def test_full_index_is_refused(twins):
    native, pure = twins
    log = make_log(0, [(0, 0, 5, 0, -1, 100)] * 10)
    for twin in (native, pure):
        ok = twin.recover_segment(log, 0, 0, -1, 9, 9)
        assert len(ok[2]) == 9 * 8 and ok[9] is None
    assert_same(native.recover_segment, pure.recover_segment, log, 0, 0, -1, 8, 9)
    assert assert_same(native.recover_segment, pure.recover_segment, log, 0, 0, -1, 8, 9)[0] == "raise"


def test_epochs_and_final_time_entry(twins):
    native, pure = twins
    # batches at 100-101, 102, 103-105, 106, 107 with epochs 0, 0, 2, 1, 3 and max timestamps
    # 10, 30, 20, 40, -1; interval 0 indexes every batch but the first
    specs = [(0, 1, 10, 0, -1, 0), (0, 0, 30, 0, -1, 0), (0, 2, 20, 2, -1, 0), (0, 0, 40, 1, -1, 0),
             (0, 0, -1, 3, -1, 0)]
    log = make_log(100, specs)
    for twin in (native, pure):
        valid, next_offset, oi, ti, max_ts, max_ts_offset, last_index, epochs, producers, error = twin.recover_segment(
            log, 100, 0, -1, 100, 100)
        assert (valid, next_offset, producers, error) == (len(log), 108, 0, None)
        assert epochs == [(0, 100), (2, 103), (3, 107)]  # epoch 1 after 2 is not a new epoch
        assert (max_ts, max_ts_offset) == (40, 106)
        assert [struct.unpack_from(">I", oi, i)[0] for i in range(0, len(oi), 8)] == [2, 5, 6, 7]
        assert [struct.unpack_from(">qI", ti, i) for i in range(0, len(ti), 12)] == [(30, 2), (40, 6)]
        assert last_index == struct.unpack_from(">I", oi, len(oi) - 4)[0]
        # the same log seen with epoch 2 already known: only 3 is new
        assert twin.recover_segment(log, 100, 0, 2, 100, 100)[7] == [(3, 107)]
    # a segment whose last batch carries the max timestamp only gets it as the final time entry
    log = make_log(0, [(0, 0, 5, -1, -1, 0), (0, 0, 9, -1, -1, 0)])
    for twin in (native, pure):
        result = twin.recover_segment(log, 0, 10_000, -1, 100, 100)
        assert result[2] == b"" and result[3] == struct.pack(">qI", 9, 1) and result[7] == []
        # an active segment's final entry is left out (it stays in memory until the segment rolls)
        result = twin.recover_segment(log, 0, 10_000, -1, 100, 100, False)
        assert result[3] == b"" and (result[4], result[5]) == (9, 1)
