from __future__ import annotations

import os

from pybroker._native import records
from pybroker.log.segment import LogSegment
from pybroker.records.batch import iter_batches

from .conftest import make_batch


def put(segment: LogSegment, offset: int, n: int, ts: int, *, epoch: int = 0, value_size: int = 10,
        timestamps: list[int] | None = None, compression: int = 0) -> int:
    batch = make_batch(n, ts, value_size=value_size, timestamps=timestamps, compression=compression)
    records.assign_offsets(batch, 0, offset, epoch)
    header = records.read_batch_header(batch)
    segment.append(offset + n - 1, header[8], offset + n - 1, batch)
    return offset + n


def region_bytes(info) -> bytes:
    return b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)


def fill(segment: LogSegment, batches: int, per_batch: int = 3, start: int = 0, ts: int = 1000) -> list[int]:
    bases = []
    offset = start
    for i in range(batches):
        bases.append(offset)
        offset = put(segment, offset, per_batch, ts + 10 * i)
    return bases


def test_file_names_are_20_digits(tmp_path):
    seg = LogSegment(tmp_path, 1500, index_interval_bytes=0)
    # the index files are made on their first entries (Kafka's LazyIndex)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000001500.log"]
    put(seg, 1500, 2, 1000)
    put(seg, 1502, 2, 1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000001500.index", "00000000000000001500.log", "00000000000000001500.timeindex"]
    assert os.path.getsize(tmp_path / "00000000000000001500.index") == 10 * 1024 * 1024  # preallocated
    seg.close()
    assert os.path.getsize(tmp_path / "00000000000000001500.index") == 8


def test_read_inside_a_batch_starts_at_the_containing_batch(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100)
    bases = fill(seg, 20)
    for target in (0, 1, 2, 31, 32, 59):
        info = seg.read(target, 1)  # min_one_message: at least the whole first batch
        expected_base = max(b for b in bases if b <= target)
        assert info.first_batch_offset == expected_base
        (header, _), = list(iter_batches(region_bytes(info)))
        assert header.base_offset == expected_base and header.last_offset >= target
    assert seg.read(60, 1000) is None
    seg.close()


def test_read_respects_max_size_and_max_position(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=0)
    fill(seg, 10)
    whole = seg.read(0, 10**6)
    assert whole.size == seg.size
    batch_size = seg.size // 10
    two = seg.read(0, 2 * batch_size)
    assert len(list(iter_batches(region_bytes(two)))) == 2
    capped = seg.read(0, 10**6, max_position=3 * batch_size)
    assert capped.size == 3 * batch_size
    partial = seg.read(0, 5, min_one_message=False)
    assert partial.size == 5 and partial.first_entry_incomplete
    seg.close()


def test_find_offset_by_timestamp(tmp_path):
    seg = LogSegment(tmp_path, 100, index_interval_bytes=50)
    offset = 100
    # batches with record timestamps spread out: [1000,1001,1002], [1010,...], ...
    for i in range(10):
        offset = put(seg, offset, 3, 1000 + 10 * i)
    assert seg.find_offset_by_timestamp(1000, 100) == (1000, 100, 0)
    assert seg.find_offset_by_timestamp(1011, 100) == (1011, 104, 0)
    assert seg.find_offset_by_timestamp(1013, 100) == (1020, 106, 0)  # first ts >= target
    # offset 110 is the 2nd record of the batch at 109 (ts 1030..1032)
    assert seg.find_offset_by_timestamp(500, 110) == (1031, 110, 0)  # honours starting offset
    assert seg.find_offset_by_timestamp(2000, 100) is None
    seg.close()


def test_find_offset_by_timestamp_in_compressed_and_unordered_batches(tmp_path):
    seg = LogSegment(tmp_path, 0)
    put(seg, 0, 4, 0, timestamps=[50, 10, 70, 20], compression=1)  # gzip
    assert seg.find_offset_by_timestamp(60, 0) == (70, 2, 0)
    assert seg.find_offset_by_timestamp(15, 0) == (50, 0, 0)
    assert seg.offset_of_max_timestamp() == (70, 2, 0)
    seg.close()


def test_recover_rebuilds_identical_indexes(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=200)
    fill(seg, 50)
    seg.close()
    written_index = (tmp_path / "00000000000000000000.index").read_bytes()
    written_time = (tmp_path / "00000000000000000000.timeindex").read_bytes()
    assert len(written_index) > 16 and len(written_time) > 24
    seg = LogSegment(tmp_path, 0, index_interval_bytes=200)
    seg.offset_index.truncate()
    seg.time_index.truncate()
    assert seg.recover() == 0
    seg.close()
    assert (tmp_path / "00000000000000000000.index").read_bytes() == written_index
    assert (tmp_path / "00000000000000000000.timeindex").read_bytes() == written_time


def test_recover_truncates_torn_tail(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100)
    fill(seg, 10)
    good_size = seg.size
    seg.close()
    with open(tmp_path / "00000000000000000000.log", "ab") as f:
        f.write(make_batch(3)[:40])  # half a batch: a crash mid-write
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100)
    assert seg.recover() == 40
    assert seg.size == good_size == os.path.getsize(tmp_path / "00000000000000000000.log")
    assert seg.read_next_offset() == 30
    seg.close()


def test_recover_cuts_at_a_corrupt_crc_in_the_middle(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100)
    fill(seg, 10)
    batch_size = seg.size // 10
    seg.close()
    (tmp_path / "ref").mkdir()
    reference = LogSegment(tmp_path / "ref", 0, index_interval_bytes=100)
    fill(reference, 6)
    reference.close()
    path = tmp_path / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[6 * batch_size + 70] ^= 0xFF  # a record byte of batch 7: its CRC no longer matches
    path.write_bytes(bytes(data))
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100)
    assert seg.recover() == 4 * batch_size
    assert seg.read_next_offset() == 18
    seg.close()
    # the rebuilt indexes equal those of a segment that only ever held the 6 good batches
    for suffix in (".index", ".timeindex", ".log"):
        assert (tmp_path / f"00000000000000000000{suffix}").read_bytes() == \
            (tmp_path / "ref" / f"00000000000000000000{suffix}").read_bytes()


def test_should_roll_by_size_time_and_full_index(tmp_path):
    seg = LogSegment(tmp_path, 0, max_index_size=16, index_interval_bytes=0, now_ms=5_000)
    kw = dict(max_offset_in_messages=1, segment_bytes=1000, segment_ms=100)
    assert not seg.should_roll(messages_size=100, max_timestamp_in_messages=1000, now_ms=5_000, **kw)
    put(seg, 0, 1, 1000)
    size = seg.size
    assert seg.should_roll(messages_size=1000 - size + 1, max_timestamp_in_messages=1000, now_ms=0, **kw)
    assert not seg.should_roll(messages_size=1000 - size, max_timestamp_in_messages=1100, now_ms=0, **kw)
    # age is measured on record timestamps: 1101 - 1000 > 100
    assert seg.should_roll(messages_size=10, max_timestamp_in_messages=1101, now_ms=0, **kw)
    assert not seg.should_roll(messages_size=1, max_timestamp_in_messages=1001, now_ms=0,
                               max_offset_in_messages=1, segment_bytes=10**9, segment_ms=10**9)
    put(seg, 1, 1, 1001)  # first index entries; a 16-byte time index holds just one
    assert seg.time_index.is_full() and not seg.offset_index.is_full()
    assert seg.should_roll(messages_size=1, max_timestamp_in_messages=1002, now_ms=0,
                           max_offset_in_messages=2, segment_bytes=10**9, segment_ms=10**9)
    # an offset that does not fit the index's 32-bit relative offsets forces a roll too
    (tmp_path / "big").mkdir()
    big = LogSegment(tmp_path / "big", 0)
    assert big.should_roll(messages_size=1, max_timestamp_in_messages=1, now_ms=0,
                           max_offset_in_messages=2**31, segment_bytes=10**9, segment_ms=10**9)
    big.close()
    seg.close()


def test_time_based_roll_without_timestamps_uses_creation_time(tmp_path):
    seg = LogSegment(tmp_path, 0, now_ms=10_000)
    put(seg, 0, 1, -1)  # a batch without timestamps
    kw = dict(messages_size=1, max_timestamp_in_messages=-1, max_offset_in_messages=1,
              segment_bytes=10**9, segment_ms=500)
    assert not seg.should_roll(now_ms=10_500, **kw)
    assert seg.should_roll(now_ms=10_501, **kw)
    seg.close()


def test_roll_trims_indexes_and_keeps_the_max_timestamp(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=10**6)
    put(seg, 0, 3, 5000)
    put(seg, 3, 3, 4000)
    seg.on_become_inactive()
    assert not (tmp_path / "00000000000000000000.index").exists()  # no entry: never made
    assert (tmp_path / "00000000000000000000.timeindex").read_bytes() == \
        (5002).to_bytes(8, "big") + (2).to_bytes(4, "big")
    seg.close()


def test_truncate_to(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=100)
    fill(seg, 10)
    batch_size = seg.size // 10
    assert seg.truncate_to(15) == 5 * batch_size  # offset 15 sits in batch 5 (offsets 15-17)
    assert seg.read_next_offset() == 15
    assert seg.offset_index.last_offset < 15
    assert seg.max_timestamp_so_far == 1000 + 10 * 4 + 2
    seg.close()


def test_flush_then_delete(tmp_path):
    seg = LogSegment(tmp_path, 0)
    fill(seg, 2)
    seg.flush()
    seg.delete()
    seg.flush()  # no-op after close
    assert list(tmp_path.iterdir()) == []
