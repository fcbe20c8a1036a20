"""Time- and size-based retention (Kafka's deleteOldSegments), on the log alone."""

from __future__ import annotations

from pybroker.log.config import LogConfig
from pybroker.log.log import UnifiedLog

from .conftest import make_batch

DAY = 86_400_000


def open_log(path, **config):
    return UnifiedLog(path / "t-0", LogConfig(**config), topic="t", partition=0, now_ms=0)


def fill(log, timestamps):
    """One two-record batch per segment (segment.bytes is small), stamped as given."""
    for ts in timestamps:
        log.append_as_leader(make_batch(2, ts, value_size=20), leader_epoch=0, now_ms=ts)
    log.high_watermark = log.log_end_offset


def test_time_retention_drops_old_segments_but_never_the_active_one(tmp_path):
    log = open_log(tmp_path, segment_bytes=200, retention_ms=DAY)
    fill(log, [1_000, 2_000, 3 * DAY, 3 * DAY + 1])
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    assert log.retention_start_offset(3 * DAY + 10) == 4  # the two day-old segments go
    assert log.retention_start_offset(10 * DAY) == 6  # everything older, except the active
    assert log.retention_start_offset(DAY + 1_001) is None  # the oldest record is exactly a day old: kept


def test_size_retention_keeps_at_least_retention_bytes(tmp_path):
    log = open_log(tmp_path, segment_bytes=200, retention_ms=-1)
    fill(log, [1_000] * 5)
    size = log.segments[0].size
    log.config = LogConfig(segment_bytes=200, retention_ms=-1, retention_bytes=2 * size)
    assert log.retention_start_offset(0) == 6  # 5 segments, keep 2 worth: 3 oldest go
    log.config = LogConfig(segment_bytes=200, retention_ms=-1, retention_bytes=2 * size + 1)
    assert log.retention_start_offset(0) == 4  # cannot drop a third without going below


def test_nothing_beyond_the_high_watermark_or_with_compact_only(tmp_path):
    log = open_log(tmp_path, segment_bytes=200, retention_ms=0)
    fill(log, [1_000] * 4)
    log.high_watermark = 3  # segments 2.. are not fully replicated
    assert log.retention_start_offset(DAY) == 2
    log.config = LogConfig(segment_bytes=200, retention_ms=0, cleanup_policy="compact")
    assert log.retention_start_offset(DAY) is None
    log.high_watermark = log.log_end_offset


def test_retention_then_delete_records_moves_the_start_and_detaches(tmp_path):
    log = open_log(tmp_path, segment_bytes=200, retention_ms=DAY)
    fill(log, [1_000, 2_000, 3 * DAY])
    start = log.retention_start_offset(3 * DAY)
    doomed = log.delete_records_before(start)
    assert log.log_start_offset == 4 and [s.base_offset for s in doomed] == [0, 2]
    log.delete_segment_files(doomed)
    assert sorted(p.name for p in log.dir.iterdir() if p.suffix == ".log") == ["00000000000000000004.log"]
