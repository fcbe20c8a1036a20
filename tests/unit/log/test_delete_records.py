"""UnifiedLog.delete_records_before / delete_segment_files: the log side of DeleteRecords."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.log.config import LogConfig
from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.log.log import UnifiedLog

from .conftest import make_batch


def open_log(path, **config):
    return UnifiedLog(path / "t-0", LogConfig(**config), topic="t", partition=0, now_ms=0)


def fill(log, batches, per_batch=2, epoch=0):
    for _ in range(batches):
        log.append_as_leader(make_batch(per_batch, value_size=20), leader_epoch=epoch, now_ms=0)
    log.high_watermark = log.log_end_offset


def names(log, suffix):
    return sorted(p.name for p in log.dir.iterdir() if p.name.endswith(suffix))


def test_offsets_outside_zero_to_high_watermark_are_refused(tmp_path):
    log = open_log(tmp_path)
    fill(log, 3)
    log.high_watermark = 4
    with pytest.raises(OffsetOutOfRangeError, match="larger than the high watermark 4"):
        log.delete_records_before(5)
    with pytest.raises(OffsetOutOfRangeError, match="not valid"):
        log.delete_records_before(-3)
    assert log.log_start_offset == 0


def test_segments_wholly_below_are_detached_renamed_then_removed(tmp_path):
    log = open_log(tmp_path, segment_bytes=200)
    fill(log, 5)  # one two-record batch per segment: bases 0, 2, 4, 6, 8
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8]
    doomed = log.delete_records_before(5)
    assert log.log_start_offset == 5
    assert [s.base_offset for s in doomed] == [0, 2]
    assert [s.base_offset for s in log.segments] == [4, 6, 8]
    assert names(log, ".log") == [f"{b:020d}.log" for b in (4, 6, 8)]
    # one batch per segment: no offset index entry, so no .index file (made on its first entry)
    assert names(log, ".deleted") == sorted(f"{b:020d}{s}.deleted" for b in (0, 2)
                                            for s in (".log", ".timeindex"))
    # a reader that already holds a region of a detached segment can still send it
    assert os.pread(doomed[0].fd, 8, 0) == (0).to_bytes(8, "big")
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1 << 20)
    info = log.read(5, 1 << 20)
    assert info.first_batch_offset == 4  # the batch holding offset 5, as Kafka answers
    log.delete_segment_files(doomed)
    assert names(log, ".deleted") == []
    assert not any(n.startswith(f"{b:020d}") for b in (0, 2) for n in os.listdir(log.dir))


def test_lower_offsets_change_nothing_and_the_active_segment_stays(tmp_path):
    log = open_log(tmp_path, segment_bytes=200)
    fill(log, 3)
    assert log.delete_records_before(0) == []
    doomed = log.delete_records_before(log.log_end_offset)
    assert [s.base_offset for s in doomed] == [0, 2]
    assert [s.base_offset for s in log.segments] == [4]
    assert log.delete_records_before(3) == []
    assert log.log_start_offset == 6
    log.append_as_leader(make_batch(1), leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 7


def test_an_epoch_wholly_below_the_start_leaves_the_epoch_cache(tmp_path):
    log = open_log(tmp_path)
    fill(log, 2, epoch=0)
    fill(log, 2, epoch=3)
    assert log.leader_epoch_cache.entries() == [(0, 0), (3, 4)]
    log.delete_records_before(2)
    assert log.leader_epoch_cache.entries() == [(0, 0), (3, 4)]  # epoch 0 still holds offset 2
    log.delete_records_before(5)
    assert log.leader_epoch_cache.entries() == [(3, 5)]
    assert log.fetch_offset_by_timestamp(-2).offset == 5
    assert log.fetch_offset_by_timestamp(-2).leader_epoch == 3


def test_reopening_finishes_an_interrupted_deletion(tmp_path):
    log = open_log(tmp_path, segment_bytes=200)
    fill(log, 4)
    log.delete_records_before(5)  # files renamed, never removed (a crash here)
    log.close()
    again = open_log(tmp_path, segment_bytes=200)
    assert names(again, ".deleted") == []
    assert [s.base_offset for s in again.segments] == [4, 6]
    assert again.log_start_offset == 4  # without the checkpoint: the first remaining segment
    assert again.log_end_offset == 8


@settings(max_examples=30, deadline=None)
@given(batches=st.integers(1, 8), cuts=st.lists(st.integers(0, 16), min_size=1, max_size=4))
def test_start_offset_only_rises_and_segments_never_straddle_it(tmp_path_factory, batches, cuts):
    log = open_log(tmp_path_factory.mktemp("prop"), segment_bytes=200)
    fill(log, batches)
    start = 0
    for cut in cuts:
        if cut > log.high_watermark:
            with pytest.raises(OffsetOutOfRangeError):
                log.delete_records_before(cut)
            continue
        doomed = log.delete_records_before(cut)
        start = max(start, cut)
        assert log.log_start_offset == start
        assert all(s.base_offset < log.segments[0].base_offset <= start for s in doomed)
        # the first kept segment holds the start offset (or is the active one)
        assert len(log.segments) == 1 or log.segments[1].base_offset > start
        log.delete_segment_files(doomed)
    assert log.log_end_offset == 2 * batches
