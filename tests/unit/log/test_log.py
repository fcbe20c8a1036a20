from __future__ import annotations

import os

import pytest

from pybroker.log.config import LogConfig
from pybroker.log.errors import (
    InvalidProducerEpochError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from pybroker.log.log import UnifiedLog, read_partition_metadata
from pybroker.records.batch import iter_batches

from .conftest import make_batch

TOPIC_ID = bytes(range(16))


def open_log(path, config=None, **kw):
    kw.setdefault("now_ms", 0)
    return UnifiedLog(path / "orders-0", config or LogConfig(), topic="orders", partition=0, **kw)


def regions_bytes(info):
    return b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)


def test_append_assigns_offsets_and_epoch(tmp_path):
    log = open_log(tmp_path, topic_id=TOPIC_ID)
    a = log.append_as_leader(make_batch(3), leader_epoch=4, now_ms=10)
    b = log.append_as_leader(make_batch(2), leader_epoch=4, now_ms=10)
    assert (a.first_offset, a.last_offset, a.log_append_time) == (0, 2, -1)
    assert (b.first_offset, b.last_offset) == (3, 4)
    assert log.log_end_offset == 5
    batches = [h for h, _ in iter_batches(regions_bytes(log.read(0, 10**6)), verify_crc=True)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in batches] == [(0, 4), (3, 4)]
    assert log.leader_epoch_cache.entries() == [(4, 0)]
    # both checkpoints are written by a metadata flush (the log manager's background flusher,
    # or flush()/close()), never on the append path
    assert not (tmp_path / "orders-0" / "leader-epoch-checkpoint").exists()
    assert log.metadata_dirty
    log.flush_metadata()
    assert not log.metadata_dirty
    assert (tmp_path / "orders-0" / "partition.metadata").read_text() == \
        "version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw\n"
    assert read_partition_metadata(tmp_path / "orders-0") == TOPIC_ID
    assert (tmp_path / "orders-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n4 0\n"
    log.close()


def test_log_append_time(tmp_path):
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(make_batch(2, timestamp=5), leader_epoch=0, now_ms=777)
    assert info.log_append_time == 777
    (h, _), = list(iter_batches(regions_bytes(log.read(0, 10**6)), verify_crc=True))
    assert h.max_timestamp == 777 and h.timestamp_type == 1
    log.close()


def test_idempotent_duplicates_append_nothing(tmp_path):
    log = open_log(tmp_path)
    first = log.append_as_leader(make_batch(3, producer_id=9, producer_epoch=0, base_sequence=0), 0, 0)
    size = log.size_in_bytes()
    dup = log.append_as_leader(make_batch(3, producer_id=9, producer_epoch=0, base_sequence=0), 0, 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (first.first_offset, first.last_offset)
    assert log.size_in_bytes() == size and log.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(make_batch(1, producer_id=9, producer_epoch=0, base_sequence=7), 0, 0)
    log.append_as_leader(make_batch(1, producer_id=9, producer_epoch=1, base_sequence=0), 0, 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(make_batch(1, producer_id=9, producer_epoch=0, base_sequence=3), 0, 0)
    assert log.log_end_offset == 4
    log.close()


def test_too_large(tmp_path):
    log = open_log(tmp_path, LogConfig(max_message_bytes=100))
    with pytest.raises(RecordTooLargeError) as err:
        log.append_as_leader(make_batch(5, value_size=50), 0, 0)
    assert err.value.error_code == 10
    log.close()


def test_roll_by_size_and_time(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=300, segment_ms=1000))
    for _ in range(6):
        log.append_as_leader(make_batch(1, timestamp=1000), 0, now_ms=0)
    sizes = [s.size for s in log.segments]
    assert len(log.segments) > 1 and all(s <= 300 for s in sizes)
    names = sorted(p.name for p in (tmp_path / "orders-0").glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]
    # inactive segments have trimmed indexes and a producer snapshot at their end offset
    for s in log.segments[:-1]:
        # an index file is made on its first entry: a one-batch segment has none
        assert s.offset_index.entries == 0 and not s.offset_index.path.exists()
        assert os.path.getsize(s.time_index.path) == s.time_index.entries * 12 == 12
    snapshots = sorted(p.name for p in (tmp_path / "orders-0").glob("*.snapshot"))
    assert snapshots == [f"{s.base_offset:020d}.snapshot" for s in log.segments[1:]]
    n = len(log.segments)
    log.append_as_leader(make_batch(1, timestamp=2001), 0, now_ms=0)  # 1001 ms after the first
    assert len(log.segments) == n + 1
    log.close()


def test_read_bounds_and_high_watermark(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=400))
    for _ in range(10):
        log.append_as_leader(make_batch(2), 0, 0)
    assert log.log_end_offset == 20
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 1000)
    assert log.read(20, 1000).empty
    for hw in (2, 4, 11, 20):
        info = log.read(0, 10**6, max_offset=hw)
        batches = [h for h, _ in iter_batches(regions_bytes(info))]
        # everything below the HW in the first segment, never a batch at/after the HW
        assert batches and batches[-1].last_offset < hw
        assert batches[0].base_offset == 0
    assert log.read(4, 10**6, max_offset=4).empty
    # a read in the middle of a batch and in a later segment
    info = log.read(13, 1)
    (h, _), = list(iter_batches(regions_bytes(info)))
    assert h.base_offset == 12 and info.first_batch_offset == 12
    log.close()


def test_list_offsets(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    log.append_as_leader(make_batch(2, timestamps=[100, 300]), 1, 0)
    log.append_as_leader(make_batch(2, timestamps=[900, 200]), 2, 0)
    log.append_as_leader(make_batch(2, timestamps=[400, 500]), 2, 0)
    assert log.fetch_offset_by_timestamp(-1) == (-1, 6, 2)
    assert log.fetch_offset_by_timestamp(-2) == (-1, 0, 1)
    assert log.fetch_offset_by_timestamp(-3) == (900, 2, 2)
    assert log.fetch_offset_by_timestamp(250) == (300, 1, 1)
    assert log.fetch_offset_by_timestamp(350) == (900, 2, 2)
    assert log.fetch_offset_by_timestamp(901) is None
    log.close()


def test_truncate_to(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    for epoch in (0, 0, 1, 1, 2, 2):
        log.append_as_leader(make_batch(2, producer_id=5, producer_epoch=0,
                                        base_sequence=log.log_end_offset), epoch, 0)
    assert log.truncate_to(6, now_ms=0)
    assert log.log_end_offset == 6
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 4)]
    assert log.producer_state.producers[5].last_seq == 5
    log.append_as_leader(make_batch(2, producer_id=5, producer_epoch=0, base_sequence=6), 3, 0)
    assert log.log_end_offset == 8
    log.truncate_to(0, now_ms=0)
    assert log.log_end_offset == 0 and log.read(0, 100).empty
    log.close()


def test_flush_policy(tmp_path):
    log = open_log(tmp_path, LogConfig(flush_messages=3, flush_ms=1000, segment_bytes=10**6))
    log.append_as_leader(make_batch(2), 0, 0)
    assert not log.needs_flush(now_ms=10)
    log.append_as_leader(make_batch(1), 0, 0)
    assert log.needs_flush(now_ms=10)
    log.flush(now_ms=10)
    assert log.recovery_point == 3 and not log.needs_flush(now_ms=10)
    log.append_as_leader(make_batch(1), 0, 0)
    assert not log.needs_flush(now_ms=1009)
    assert log.needs_flush(now_ms=1010)
    log.close()


def test_reopen_after_clean_close(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=300))
    for i in range(8):
        log.append_as_leader(make_batch(1, producer_id=3, producer_epoch=0, base_sequence=i), i // 3, 0)
    log.flush()
    log.close()
    again = open_log(tmp_path, LogConfig(segment_bytes=300), clean_shutdown=True)
    assert again.log_end_offset == 8 and again.recovery_point == 8
    assert again.producer_state.producers[3].last_seq == 7
    assert again.leader_epoch_cache.entries() == [(0, 0), (1, 3), (2, 6)]
    assert again.active_segment.offset_index.max_entries == LogConfig().segment_index_bytes // 8
    info = again.append_as_leader(make_batch(1, producer_id=3, producer_epoch=0, base_sequence=8), 2, 0)
    assert info.first_offset == 8
    again.close()


def test_unclean_reopen_recovers_torn_tail_and_producer_state(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=400))
    for i in range(10):
        log.append_as_leader(make_batch(2, producer_id=3, producer_epoch=0, base_sequence=2 * i), 0, 0)
    log.flush()
    recovery_point = log.recovery_point
    log.append_as_leader(make_batch(2, producer_id=3, producer_epoch=0, base_sequence=20), 0, 0)
    active = log.active_segment.log_path
    log.close_handlers()  # crash: no snapshot at the end, indexes untrimmed
    with open(active, "ab") as f:
        f.write(b"\x00" * 30)
    again = open_log(tmp_path, LogConfig(segment_bytes=400), recovery_point=recovery_point)
    assert again.log_end_offset == 22
    assert again.producer_state.producers[3].last_seq == 21
    dup = again.append_as_leader(make_batch(2, producer_id=3, producer_epoch=0, base_sequence=20), 0, 0)
    assert dup.duplicate and dup.first_offset == 20
    again.close()


def test_inconsistent_topic_id(tmp_path):
    open_log(tmp_path, topic_id=TOPIC_ID).close()
    with pytest.raises(Exception) as err:
        open_log(tmp_path, topic_id=bytes(16))
    assert err.value.error_code == 103
