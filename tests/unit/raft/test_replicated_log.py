"""The two ReplicatedLog implementations obey the same rules (Kafka's ReplicatedLog contract):
leader/follower appends, epochs, validate_offset_and_epoch, divergence truncation, snapshots
and cleaning behind them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybroker.raft.kafka_metadata_log import KafkaMetadataLog
from pybroker.raft.memory_log import MemoryLog
from pybroker.raft.offset_and_epoch import OffsetAndEpoch, ValidKind
from pybroker.raft.raft_log import RaftLogError, ReplicatedLog
from pybroker.raft.snapshots import SnapshotWriter
from pybroker.records.batch import build_batch, iter_batches


def batch(*values: bytes, ts: int = 1000) -> bytes:
    return build_batch([(ts, None, v, ()) for v in values])


@pytest.fixture(params=["memory", "file"])
def make_log(request: pytest.FixtureRequest, tmp_path: Path):
    logs: list[ReplicatedLog] = []

    def make(**kw) -> ReplicatedLog:
        if request.param == "memory":
            log: ReplicatedLog = MemoryLog(**kw)
        else:
            log = KafkaMetadataLog(tmp_path, segment_bytes=kw.pop("segment_bytes", 1024 * 1024), **kw)
        logs.append(log)
        return log

    yield make
    for log in logs:
        if isinstance(log, KafkaMetadataLog):
            log.close()


def fill(log: ReplicatedLog, epochs: list[tuple[int, int]]) -> None:
    """Append `count` one-record batches at each `epoch`."""
    for epoch, count in epochs:
        for i in range(count):
            log.append_as_leader(batch(b"e%d-%d" % (epoch, i)), epoch)


def test_leader_append_assigns_offsets_and_epochs(make_log) -> None:
    log = make_log()
    info = log.append_as_leader(batch(b"a", b"b"), 3)
    assert (info.first_offset, info.last_offset) == (0, 1)
    info = log.append_as_leader(batch(b"c"), 3)
    assert (info.first_offset, info.last_offset) == (2, 2)
    assert log.end_offset == 3 and log.last_fetched_epoch() == 3
    data = log.read(0, None, 1 << 20)
    headers = [h for h, _ in iter_batches(data)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 3), (2, 3)]


def test_follower_append_takes_the_leaders_batches_verbatim(make_log) -> None:
    leader, follower = make_log(), MemoryLog()
    fill(leader, [(1, 3), (2, 2)])
    follower.append_as_follower(leader.read(0, None, 1 << 20))
    assert follower.end_offset == 5 and follower.last_fetched_epoch() == 2
    assert follower.read(0, None, 1 << 20) == leader.read(0, None, 1 << 20)


def test_follower_append_ignores_a_trailing_partial_batch_and_rejects_a_gap(make_log) -> None:
    leader, follower = MemoryLog(), make_log()
    fill(leader, [(1, 3)])
    data = leader.read(0, None, 1 << 20)
    assert follower.append_as_follower(data[:-5]).last_offset == 1
    assert follower.end_offset == 2
    with pytest.raises(RaftLogError):
        follower.append_as_follower(data)  # starts at 0, the log ends at 2


def test_validate_offset_and_epoch_detects_divergence(make_log) -> None:
    log = make_log()
    fill(log, [(1, 3), (3, 3)])  # epoch 1: [0, 3), epoch 3: [3, 6)
    assert log.validate_offset_and_epoch(6, 3).kind == ValidKind.VALID
    assert log.validate_offset_and_epoch(3, 1).kind == ValidKind.VALID
    # a follower that wrote epoch 2 records from offset 3 must truncate to 3
    verdict = log.validate_offset_and_epoch(5, 2)
    assert verdict.kind == ValidKind.DIVERGING and verdict.offset_and_epoch == OffsetAndEpoch(3, 1)
    # one that has more epoch-1 records than the leader must truncate to the leader's end of 1
    verdict = log.validate_offset_and_epoch(4, 1)
    assert verdict.kind == ValidKind.DIVERGING and verdict.offset_and_epoch == OffsetAndEpoch(3, 1)


def test_truncate_to_end_offset_follows_the_diverging_epoch(make_log) -> None:
    log = make_log()
    fill(log, [(1, 3), (2, 4)])  # epoch 2 is stale: the leader says epoch 1 ends at 3
    assert log.truncate_to_end_offset(OffsetAndEpoch(3, 1)) == 3
    assert log.end_offset == 3 and log.last_fetched_epoch() == 1
    with pytest.raises(RaftLogError):
        log.update_high_watermark(3)
        log.truncate_to(2)


def test_snapshot_round_trip_and_fetch_verdict_below_the_log_start(make_log) -> None:
    log = make_log(retention_bytes=0)
    fill(log, [(1, 10)])
    log.update_high_watermark(10)
    writer = SnapshotWriter(log.create_new_snapshot(OffsetAndEpoch(8, 1)), last_contained_log_timestamp=5,
                            now_ms=7)
    writer.append([b"state-a", b"state-b"])
    assert writer.freeze() > 0
    assert log.latest_snapshot_id() == OffsetAndEpoch(8, 1)
    assert log.create_new_snapshot(OffsetAndEpoch(8, 1)) is None  # exists
    fill(log, [(1, 2)])
    log.update_high_watermark(12)
    writer = SnapshotWriter(log.create_new_snapshot(OffsetAndEpoch(11, 1)), last_contained_log_timestamp=6,
                            now_ms=7)
    writer.append([b"state-c"])
    writer.freeze()
    assert log.maybe_clean(0)  # retention 0: the older snapshot goes, the log starts at the newer
    assert log.snapshot_ids() == [OffsetAndEpoch(11, 1)]
    assert log.start_offset == 11
    verdict = log.validate_offset_and_epoch(4, 1)
    assert verdict.kind == ValidKind.SNAPSHOT and verdict.offset_and_epoch == OffsetAndEpoch(11, 1)
    for work in getattr(log, "take_deferred", list)():
        work()


def test_create_snapshot_past_the_high_watermark_is_refused(make_log) -> None:
    log = make_log()
    fill(log, [(1, 4)])
    log.update_high_watermark(2)
    with pytest.raises(RaftLogError):
        log.create_new_snapshot(OffsetAndEpoch(3, 1))


def test_truncate_to_latest_snapshot_starts_an_empty_log_there(make_log) -> None:
    log = make_log()
    fill(log, [(1, 2)])
    raw = log.create_new_snapshot_unchecked(OffsetAndEpoch(50, 4))
    SnapshotWriter(raw, last_contained_log_timestamp=0, now_ms=0).freeze()
    assert log.truncate_to_latest_snapshot()
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (50, 50, 4)
    log.append_as_leader(batch(b"x"), 5)
    assert log.end_offset == 51 and log.end_offset_for_epoch(4) == OffsetAndEpoch(50, 4)


def test_memory_log_crash_loses_only_what_was_not_flushed() -> None:
    log = MemoryLog()
    fill(log, [(1, 3)])
    log.flush(3)
    fill(log, [(2, 2)])
    log.truncate_to(4)
    log.crash(lose_unflushed=True)
    assert log.end_offset == 3 and log.last_fetched_epoch() == 1
    fill(log, [(3, 1)])
    log.crash(lose_unflushed=False)  # a process crash: the page cache survives
    assert log.end_offset == 4 and log.last_fetched_epoch() == 3


def test_file_log_reopens_with_its_epochs_snapshots_and_start(tmp_path: Path) -> None:
    log = KafkaMetadataLog(tmp_path, segment_bytes=200, retention_bytes=0)
    fill(log, [(1, 5), (2, 5)])
    log.update_high_watermark(10)
    for end in (4, 9):
        SnapshotWriter(log.create_new_snapshot(OffsetAndEpoch(end, 1 if end < 5 else 2)),
                       last_contained_log_timestamp=0, now_ms=0).freeze()
    segments_before = len(log.log.segments)
    assert log.maybe_clean(0)
    for work in log.take_deferred():
        work()
    assert len(log.log.segments) < segments_before
    names = sorted(p.name for p in log.dir.iterdir())
    assert "00000000000000000009-0000000002.checkpoint" in names
    assert not any(n.endswith((".deleted", ".part")) for n in names)
    log.close()
    (log.dir / "00000000000000000010-0000000002.checkpoint.part").write_bytes(b"partial")
    reopened = KafkaMetadataLog(tmp_path, segment_bytes=200)
    try:
        assert reopened.end_offset == 10 and reopened.last_fetched_epoch() == 2
        assert reopened.snapshot_ids() == [OffsetAndEpoch(9, 2)]
        assert reopened.start_offset <= 9
        assert reopened.end_offset_for_epoch(2) == OffsetAndEpoch(10, 2)
        assert not (reopened.dir / "00000000000000000010-0000000002.checkpoint.part").exists()
        assert (reopened.dir / "leader-epoch-checkpoint").read_text().startswith("0\n")
        assert "AAAAAAAAAAAAAAAAAAAAAQ" in (reopened.dir / "partition.metadata").read_text()
    finally:
        reopened.close()
