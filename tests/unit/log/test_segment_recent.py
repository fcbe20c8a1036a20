"""The recent-batch position cache of LogSegment agrees with the index + scan path."""

from __future__ import annotations

from pybroker.log.segment import LogSegment

from .test_segment import fill, put, region_bytes


def reads(seg, offsets, max_size=10_000):
    out = []
    for o in offsets:
        info = seg.read(o, max_size)
        out.append(None if info is None else (info.first_batch_offset, info.position, region_bytes(info)))
    return out


def test_cached_reads_equal_uncached_reads(tmp_path):
    seg = LogSegment(tmp_path, 0, index_interval_bytes=300)
    bases = fill(seg, 200, per_batch=3)
    offsets = list(range(0, 605, 7)) + bases + [bases[-1] + 2, 600, 601]
    cached = reads(seg, offsets)
    seg._recent.clear()
    assert reads(seg, offsets) == cached
    assert len(seg._recent) == 0  # reads never populate it; only appends do
    seg.close()


def test_cache_is_bounded_and_forgets_truncated_batches(tmp_path):
    seg = LogSegment(tmp_path, 0)
    bases = fill(seg, 300, per_batch=2)
    assert 0 < len(seg._recent) <= 128
    seg.truncate_to(bases[250])
    assert seg.read(bases[260], 1000) is None  # truncated away: no stale cached position
    nxt = put(seg, bases[250], 5, 5000)  # rewritten with a different batch shape
    info = seg.read(bases[250], 10_000)
    assert info.first_batch_offset == bases[250] and info.size > 0
    assert seg.read(nxt, 1000) is None
    seg.close()
