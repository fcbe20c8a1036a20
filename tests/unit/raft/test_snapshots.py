"""Snapshot files in Kafka's checkpoint format, and the snapshot triggers."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybroker.raft.control_records import SNAPSHOT_FOOTER, SNAPSHOT_HEADER, decode_control_record
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.snapshot_policy import SnapshotPolicy
from pybroker.raft.snapshots import (
    FileRawSnapshotReader,
    FileRawSnapshotWriter,
    SnapshotReader,
    SnapshotWriter,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from pybroker.records.batch import iter_batch_records, iter_batches


def test_file_name_is_twenty_offset_and_ten_epoch_digits() -> None:
    assert snapshot_file_name(OffsetAndEpoch(12345, 7)) == "00000000000000012345-0000000007.checkpoint"
    assert parse_snapshot_file_name("00000000000000012345-0000000007.checkpoint.part") == (
        OffsetAndEpoch(12345, 7), ".checkpoint.part")
    assert parse_snapshot_file_name("00000000000000012345.log") is None


def test_writer_frames_records_with_header_and_footer_and_renames_on_freeze(tmp_path: Path) -> None:
    frozen = []
    snapshot_id = OffsetAndEpoch(100, 3)
    raw = FileRawSnapshotWriter(tmp_path, snapshot_id, frozen.append)
    writer = SnapshotWriter(raw, last_contained_log_timestamp=555, now_ms=1000, max_batch_bytes=64)
    writer.append([b"record-%d" % i for i in range(10)])
    assert (tmp_path / "00000000000000000100-0000000003.checkpoint.part").exists()
    assert not (tmp_path / "00000000000000000100-0000000003.checkpoint").exists()
    size = writer.freeze()
    final = tmp_path / "00000000000000000100-0000000003.checkpoint"
    assert final.exists() and final.stat().st_size == size and frozen == [snapshot_id]
    assert not (tmp_path / "00000000000000000100-0000000003.checkpoint.part").exists()
    data = final.read_bytes()
    batches = [iter_batch_records(chunk) for _, chunk in iter_batches(data, verify_crc=True)]
    assert len(batches) > 3  # the 64-byte limit split the data
    assert all(h.partition_leader_epoch == 3 for h, _ in batches)
    first, last = batches[0], batches[-1]
    assert first[0].is_control and decode_control_record(first[1][0].key, first[1][0].value).type == SNAPSHOT_HEADER
    assert last[0].is_control and decode_control_record(last[1][0].key, last[1][0].value).type == SNAPSHOT_FOOTER
    offsets = [r.offset for _, records in batches for r in records]
    assert offsets == list(range(len(offsets)))  # offsets count from 0 inside the file
    reader = SnapshotReader(FileRawSnapshotReader(final, snapshot_id))
    assert [r for b in reader for r in b.records] == [b"record-%d" % i for i in range(10)]
    assert reader.last_contained_log_timestamp == 555
    reader.close()


def test_abandoned_writer_leaves_no_file(tmp_path: Path) -> None:
    writer = SnapshotWriter(FileRawSnapshotWriter(tmp_path, OffsetAndEpoch(5, 1)),
                            last_contained_log_timestamp=0, now_ms=0)
    writer.append([b"x"])
    writer.close()
    assert list(tmp_path.iterdir()) == []


def test_policy_triggers_on_bytes_and_on_interval() -> None:
    policy = SnapshotPolicy(max_bytes_between_snapshots=100, max_interval_ms=1000, now_ms=0)
    assert policy.should_snapshot(5000) is None  # nothing committed yet
    policy.record_committed_bytes(60)
    assert policy.should_snapshot(10) is None
    policy.record_committed_bytes(40)
    assert "100 bytes" in policy.should_snapshot(20)
    policy.snapshot_started()
    assert policy.should_snapshot(20) is None
    policy.snapshot_done(20)
    policy.record_committed_bytes(1)
    assert policy.should_snapshot(500) is None
    assert "ms since" in policy.should_snapshot(1020)


def test_policy_defaults_are_kafkas_and_zero_interval_disables_time() -> None:
    policy = SnapshotPolicy.from_properties({})
    assert (policy.max_bytes, policy.max_interval_ms) == (20971520, 3600000)
    policy = SnapshotPolicy.from_properties({"metadata.log.max.snapshot.interval.ms": "0"})
    policy.record_committed_bytes(1)
    assert policy.should_snapshot(10**12) is None
    with pytest.raises(ValueError):
        SnapshotPolicy(max_bytes_between_snapshots=0)
