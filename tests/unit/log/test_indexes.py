from __future__ import annotations

import bisect
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.log.errors import CorruptIndexError, IndexOffsetError
from pybroker.log.offset_index import OffsetIndex
from pybroker.log.time_index import TimeIndex


def test_preallocation_rounds_down_to_whole_entries(tmp_path):
    oi = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 10 * 1024 * 1024)
    ti = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0, 10 * 1024 * 1024)
    assert oi.max_entries == 1310720 and ti.max_entries == 873813
    # no file until the first entry (Kafka's LazyIndex); then a sparse preallocated one
    assert not oi.path.exists() and not ti.path.exists()
    oi.append(5, 100)
    ti.maybe_append(1000, 5)
    assert oi.path.stat().st_size == 10485760 and ti.path.stat().st_size == 10485756
    assert oi.path.stat().st_blocks * 512 < 1024 * 1024  # sparse: nothing zeroed
    oi.close(), ti.close()
    # closing trims to the entries actually written
    assert oi.path.stat().st_size == 8 and ti.path.stat().st_size == 12


def test_an_index_without_entries_makes_no_file(tmp_path):
    oi = OffsetIndex(tmp_path / "a.index", 0, 800)
    oi.trim_to_valid_size()
    oi.resize(800)
    assert oi.lookup(5) == (0, 0) and oi.entries == 0
    oi.flush()
    oi.close()
    assert not oi.path.exists()
    ti = TimeIndex(tmp_path / "a.timeindex", 0, 120)
    ti.close()
    assert not ti.path.exists()
    # a trimmed (full) time index still takes the final max timestamp on close: the file then
    # holds exactly that entry
    ti = TimeIndex(tmp_path / "b.timeindex", 0, 120)
    ti.trim_to_valid_size()
    ti.maybe_append(77, 3, skip_full_check=True)
    ti.close()
    assert ti.path.read_bytes() == struct.pack(">qI", 77, 3)


def test_rebuild_replaces_the_entries_and_drops_stale_ones(tmp_path):
    path = tmp_path / "a.index"
    oi = OffsetIndex(path, 0, 800)
    for i in range(1, 20):
        oi.append(i * 10, i * 100)
    oi.close_handler()  # crash: preallocated with 19 entries, then zeros
    crashed = OffsetIndex(path, 0, 800)
    assert crashed.entries == 100
    crashed.rebuild(struct.pack(">IIII", 10, 100, 20, 200))
    assert path.stat().st_size == 16 and crashed.entries == 2
    assert crashed.lookup(1000) == (20, 200)
    crashed.resize(800)  # the active segment grows back; the stale tail is gone, not zeroed by hand
    crashed.append(30, 300)
    crashed.close()
    assert path.read_bytes() == struct.pack(">IIIIII", 10, 100, 20, 200, 30, 300)
    with pytest.raises(ValueError):
        OffsetIndex(tmp_path / "c.index", 0, 80).rebuild(b"123")


def test_flush_syncs_an_unmapped_index_under_its_current_name(tmp_path):
    oi = OffsetIndex(tmp_path / "a.index", 0, 800)
    oi.append(10, 100)
    oi.trim_to_valid_size()  # unmapped now; its page is still dirty in the page cache
    oi.rename(tmp_path / "a.index.deleted")
    oi.flush()  # fsyncs a.index.deleted (no error for the old name)
    assert (tmp_path / "a.index.deleted").read_bytes() == struct.pack(">II", 10, 100)
    oi.delete()
    oi.flush()  # deleted: nothing to do


def test_entry_layout_is_big_endian_relative(tmp_path):
    oi = OffsetIndex(tmp_path / "x.index", 1000, 80)
    oi.append(1005, 4096)
    oi.append(1020, 8200)
    ti = TimeIndex(tmp_path / "x.timeindex", 1000, 120)
    ti.maybe_append(1_700_000_000_000, 1005)
    assert oi.read_bytes() == struct.pack(">IIII", 5, 4096, 20, 8200)
    assert ti.read_bytes() == struct.pack(">qI", 1_700_000_000_000, 5)
    oi.trim_to_valid_size()
    assert oi.path.read_bytes() == struct.pack(">IIII", 5, 4096, 20, 8200)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=0, max_size=200, unique=True),
       st.lists(st.integers(-5, 10_100), min_size=1, max_size=30))
def test_offset_lookup_matches_bisect_oracle(tmp_path_factory, rels, targets):
    base = 500
    rels = sorted(rels)
    oi = OffsetIndex(tmp_path_factory.mktemp("oi") / "a.index", base, 8 * 256)
    for i, rel in enumerate(rels):
        oi.append(base + rel, (i + 1) * 100)
    for target in targets:
        slot = bisect.bisect_right(rels, target) - 1
        expected = (base + rels[slot], (slot + 1) * 100) if slot >= 0 else (base, 0)
        assert oi.lookup(base + target) == expected
    oi.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10**12), min_size=0, max_size=200, unique=True),
       st.lists(st.integers(-1, 10**12 + 5), min_size=1, max_size=30))
def test_time_lookup_matches_bisect_oracle(tmp_path_factory, stamps, targets):
    base = 7
    stamps = sorted(stamps)
    ti = TimeIndex(tmp_path_factory.mktemp("ti") / "a.timeindex", base, 12 * 256)
    for i, ts in enumerate(stamps):
        ti.maybe_append(ts, base + i)
    for target in targets:
        slot = bisect.bisect_right(stamps, target) - 1
        expected = (stamps[slot], base + slot) if slot >= 0 else (-1, base)
        assert ti.lookup(target) == expected
    ti.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=100, unique=True), st.integers(0, 5100))
def test_truncate_to_removes_entries_at_and_above(tmp_path_factory, rels, cut):
    rels = sorted(rels)
    d = tmp_path_factory.mktemp("tr")
    oi = OffsetIndex(d / "a.index", 0, 8 * 128)
    ti = TimeIndex(d / "a.timeindex", 0, 12 * 128)
    for i, rel in enumerate(rels):
        oi.append(rel, (i + 1) * 10)
        ti.maybe_append(1000 + rel, rel)
    oi.truncate_to(cut)
    ti.truncate_to(cut)
    kept = [r for r in rels if r < cut]
    assert [oi.entry(i)[0] for i in range(oi.entries)] == kept
    assert [ti.entry(i)[1] for i in range(ti.entries)] == kept
    assert ti.last_entry == ((1000 + kept[-1], kept[-1]) if kept else (-1, 0))
    oi.close(), ti.close()


def test_append_rules(tmp_path):
    oi = OffsetIndex(tmp_path / "a.index", 100, 16)
    oi.append(110, 50)
    with pytest.raises(IndexOffsetError):
        oi.append(110, 60)  # not increasing
    oi.append(120, 60)
    assert oi.is_full()
    with pytest.raises(IndexOffsetError):
        oi.append(130, 70)
    ti = TimeIndex(tmp_path / "a.timeindex", 100, 24)
    ti.maybe_append(5, 101)
    ti.maybe_append(5, 102)  # same timestamp: no entry
    assert ti.entries == 1
    with pytest.raises(IndexOffsetError):
        ti.maybe_append(4, 103)  # timestamps never go back


def test_reopen_keeps_entries_and_sanity_check_catches_zero_tail(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    oi = OffsetIndex(path, 0, 800)
    oi.append(10, 4000)
    oi.append(20, 9000)
    oi.flush()
    oi.close_handler()  # crash: the preallocated zero tail stays on disk
    crashed = OffsetIndex(path, 0, 800)
    assert crashed.entries == 100
    with pytest.raises(CorruptIndexError):
        crashed.sanity_check()
    crashed.close_handler()
    clean = OffsetIndex(path, 0, 800)
    clean._entries = 2  # as if trimmed
    clean.trim_to_valid_size()
    clean.close()
    reopened = OffsetIndex(path, 0, 800)
    assert reopened.entries == 2 and reopened.lookup(25) == (20, 9000)
    reopened.sanity_check(log_size=10_000)
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check(log_size=9000)  # points past the log's end


def test_time_index_zero_tail_is_corrupt(tmp_path):
    path = tmp_path / "a.timeindex"
    ti = TimeIndex(path, 0, 120)
    ti.maybe_append(1_000, 3)
    ti.maybe_append(2_000, 7)
    ti.close_handler()
    crashed = TimeIndex(path, 0, 120)
    with pytest.raises(CorruptIndexError):
        crashed.sanity_check()
