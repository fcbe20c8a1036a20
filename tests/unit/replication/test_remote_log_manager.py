"""The RemoteLogManager over a real UnifiedLog and the filesystem RemoteStorageManager, with an
in-process RLMM (the RemoteLogMetadataCache the topic-based one feeds, applied synchronously):
what is copied (segments below the LSO, their indexes), local retention removing only copied
segments, total retention and the log start offset moving the remote part, the copy a crash left
unfinished, the lineage filter, topic deletion and KIP-950. The live-broker tests with real
clients are tests/server/test_tiered_*.py."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
import trio

from pybroker.config import BrokerConfig
from pybroker.log.config import LogConfig
from pybroker.log.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    UnifiedLog,
)
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from pybroker.log.remote.remote_storage_manager import (
    LogSegmentData,
    RemoteStorageError,
    RemoteStorageManager,
)
from pybroker.log.remote.storage import create_remote_storage_manager
from pybroker.records.batch import build_batch
from pybroker.replication.remote_log_manager import (
    RemoteLogManager,
    is_within_leader_epochs,
    leader_epoch_checkpoint_bytes,
)
from tests.unit.remote.tiered_log import MemoryRlmm

FS = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
AIVEN_RSM = "io.aiven.kafka.tieredstorage.RemoteStorageManager"
NOW = 1_700_000_000_000
WAIT_S = 20


@dataclass
class FakePartition:
    """The replica manager's Partition as the remote log manager reads it."""

    topic: str
    partition: int
    topic_id: bytes
    log: UnifiedLog
    leader_epoch: int = 0
    leader: bool = True

    @property
    def is_leader(self) -> bool:
        return self.leader


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def wall_ms(self) -> int:
        return self.now


def make_log(tmp_path: Path, **overrides: object) -> UnifiedLog:
    cfg = LogConfig().with_overrides({"remote.storage.enable": True, "segment.bytes": 600,
                                      "retention.ms": -1, **overrides})
    return UnifiedLog(tmp_path / "orders-0", cfg, topic="orders", partition=0, topic_id=os.urandom(16),
                      remote_storage_system_enable=True)


def append(plog: UnifiedLog, count: int, *, epoch: int = 0, ts: int = NOW, size: int = 100) -> None:
    for n in range(count):
        batch = bytearray(build_batch([(ts, f"k{n}".encode(), bytes([n % 250]) * size)]))
        plog.append_as_leader(batch, epoch, ts)
    plog.high_watermark = plog.log_end_offset


def offset_for(plog: UnifiedLog, timestamp: int) -> int:
    found = plog.fetch_offset_by_timestamp(timestamp)
    assert found is not None
    return found.offset


def remote_objects(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


async def wait_until(predicate: Callable[[], bool], what: str) -> None:
    """Poll `predicate` (the manager's work happens in its own tasks and worker threads)."""
    with trio.move_on_after(WAIT_S):
        for _ in iter(int, 1):  # until it holds
            if predicate():
                return
            await trio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class FlakyStore:
    """The filesystem RSM, its uploads failing while `down` (an object store that went away
    mid-copy: the first chunk is written, then the store fails)."""

    def __init__(self, rsm: RemoteStorageManager) -> None:
        self.rsm = rsm
        self.down = False
        self.failed = 0

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        if self.down:
            self.failed += 1
            raise RemoteStorageError("store unavailable")
        return self.rsm.copy_log_segment_data(metadata, data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.rsm, name)


def run_with_rlm(tmp_path: Path, scenario: Callable[[RemoteLogManager, MemoryRlmm, Path], Awaitable[None]],
                 wrap: Callable[[RemoteStorageManager], RemoteStorageManager] | None = None,
                 broker: dict[str, str] | None = None) -> None:
    root = tmp_path / "remote"
    rsm = create_remote_storage_manager(AIVEN_RSM, {"storage.backend.class": FS, "storage.root": str(root),
                                                    "chunk.size": "4096"})
    if wrap is not None:
        rsm = wrap(rsm)
    rlmm = MemoryRlmm()
    config = BrokerConfig({"remote.log.storage.system.enable": "true",
                           "remote.log.manager.task.interval.ms": "20", **(broker or {})})

    async def main() -> None:
        rlm = RemoteLogManager(config, 1, rsm, rlmm, clock=clock)
        async with trio.open_nursery() as nursery:
            await nursery.start(rlm.run)
            await scenario(rlm, rlmm, root)
            await rlm.close()
            nursery.cancel_scope.cancel()

    clock = Clock()
    trio.run(main)


def finished(rlmm: MemoryRlmm, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    if not rlmm.is_ready(tip):
        return []  # the manager has not registered the partition yet
    return [m for m in rlmm.list_remote_log_segments(tip)
            if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


def test_leader_copies_rolled_segments_below_the_lso_with_their_indexes(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    append(plog, 20)  # ~5 segments of 600 bytes
    rolled = [s.base_offset for s in plog.segments[:-1]]
    assert len(rolled) >= 3
    # the last rolled segment ends above the high watermark: not copied
    plog.high_watermark = plog.segments[-2].base_offset
    p = FakePartition("orders", 0, plog.topic_id or b"", plog)

    async def scenario(rlm: RemoteLogManager, rlmm: MemoryRlmm, root: Path) -> None:
        rlm.on_partition(p)
        tip = TopicIdPartition(p.topic_id, "orders", 0)
        expected = rolled[:-1]  # segments whose successor starts at or below the HW
        await wait_until(lambda: len(finished(rlmm, tip)) == len(expected), "the copies")
        metas = sorted(finished(rlmm, tip), key=lambda m: m.start_offset)
        assert [m.start_offset for m in metas] == expected
        for m, nxt in zip(metas, rolled[1:], strict=False):
            assert m.end_offset == nxt - 1
            assert m.segment_leader_epochs == ((0, m.start_offset),)
        assert plog.highest_offset_in_remote_storage == metas[-1].end_offset
        # every copy went STARTED then FINISHED, and the store holds the segment and its indexes
        states = [e.state for e in rlmm.events if isinstance(e, RemoteLogSegmentMetadataUpdate)]
        assert states == [RemoteLogSegmentState.COPY_SEGMENT_FINISHED] * len(expected)
        assert len(remote_objects(root)) == 3 * len(expected)  # .log, .indexes, .rsm-manifest each
        fetched = rlm.rsm.fetch_log_segment(metas[0], 0)
        assert fetched == plog.segments[0].read_bytes(0, plog.segments[0].size)
        # ListOffsets -5 latest tiered, -6 earliest pending upload, -4 earliest local
        assert offset_for(plog, LATEST_TIERED_TIMESTAMP) == metas[-1].end_offset
        assert offset_for(plog, EARLIEST_PENDING_UPLOAD_TIMESTAMP) == metas[-1].end_offset + 1
        assert offset_for(plog, EARLIEST_LOCAL_TIMESTAMP) == 0

    run_with_rlm(tmp_path, scenario)


def test_local_retention_removes_only_copied_segments(tmp_path: Path) -> None:
    plog = make_log(tmp_path, **{"local.retention.bytes": 1})
    append(plog, 20)
    p = FakePartition("orders", 0, plog.topic_id or b"", plog)
    # before anything is copied local retention keeps everything
    assert plog.retention_start_offset(NOW) is None

    async def scenario(rlm: RemoteLogManager, rlmm: MemoryRlmm, root: Path) -> None:
        rlm.on_partition(p)
        bases = [s.base_offset for s in plog.segments]
        await wait_until(lambda: plog.highest_offset_in_remote_storage == bases[-1] - 1, "all rolled segments copied")
        start = plog.retention_start_offset(NOW)
        assert start == bases[-1]  # everything copied may go; the active segment stays
        doomed = plog.increment_local_log_start_offset(start)
        assert [s.base_offset for s in doomed] == bases[:-1]
        # the log start offset stays: the data is readable from remote storage
        assert plog.log_start_offset == 0
        assert plog.local_log_start_offset == bases[-1]
        assert offset_for(plog, EARLIEST_TIMESTAMP) == 0
        assert offset_for(plog, EARLIEST_LOCAL_TIMESTAMP) == bases[-1]

    run_with_rlm(tmp_path, scenario)


def test_total_retention_deletes_remote_segments_and_moves_the_log_start(tmp_path: Path) -> None:
    plog = make_log(tmp_path, **{"retention.ms": 60_000})
    append(plog, 8, ts=NOW - 3_600_000)  # an hour old
    old_end = plog.log_end_offset
    plog.roll(NOW)
    append(plog, 8, ts=NOW)
    p = FakePartition("orders", 0, plog.topic_id or b"", plog)

    async def scenario(rlm: RemoteLogManager, rlmm: MemoryRlmm, root: Path) -> None:
        rlm.on_partition(p)
        tip = TopicIdPartition(p.topic_id, "orders", 0)
        await wait_until(lambda: plog.log_start_offset == old_end, "the log start offset past the expired part")
        await wait_until(lambda: all(m.start_offset >= old_end for m in rlmm.list_remote_log_segments(tip)),
                         "the expired remote segments gone")
        deleted = [e for e in rlmm.events if isinstance(e, RemoteLogSegmentMetadataUpdate)
                   and e.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED]
        assert deleted
        kept = finished(rlmm, tip)
        assert kept and all(m.max_timestamp_ms >= NOW for m in kept)
        # the files of the expired segments are gone from the store
        assert len(remote_objects(root)) == 3 * len(list(rlmm.list_remote_log_segments(tip)))

    run_with_rlm(tmp_path, scenario)


def test_delete_records_moves_the_remote_part(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    append(plog, 20)
    p = FakePartition("orders", 0, plog.topic_id or b"", plog)

    async def scenario(rlm: RemoteLogManager, rlmm: MemoryRlmm, root: Path) -> None:
        rlm.on_partition(p)
        tip = TopicIdPartition(p.topic_id, "orders", 0)
        bases = [s.base_offset for s in plog.segments]
        await wait_until(lambda: plog.highest_offset_in_remote_storage == bases[-1] - 1, "copies")
        before = len(finished(rlmm, tip))
        plog.increment_log_start_offset(bases[2])  # DeleteRecords
        await wait_until(lambda: len(finished(rlmm, tip)) == before - 2, "the two segments below it deleted")
        assert min(m.start_offset for m in finished(rlmm, tip)) == bases[2]

    run_with_rlm(tmp_path, scenario)


def test_a_copy_left_unfinished_by_a_crash_is_deleted_and_copied_again(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    append(plog, 12)
    p = FakePartition("orders", 0, plog.topic_id or b"", plog)

    async def scenario(rlm: RemoteLogManager, rlmm: MemoryRlmm, root: Path) -> None:
        tip = TopicIdPartition(p.topic_id, "orders", 0)
        rlmm.on_partition_leadership_changes([tip], [])
        seg = plog.segments[0]
        dead = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, os.urandom(16)), seg.base_offset,
                                        plog.segments[1].base_offset - 1, NOW, 1, NOW, seg.size, ((0, 0),))
        rlmm.add_remote_log_segment_metadata(dead)  # this node crashed right after COPY_SEGMENT_STARTED
        rlm.on_partition(p)
        await wait_until(lambda: plog.highest_offset_in_remote_storage == plog.segments[-1].base_offset - 1,
                         "the copies")
        await wait_until(lambda: all(m.remote_log_segment_id != dead.remote_log_segment_id
                                     for m in rlmm.list_remote_log_segments(tip)), "the dead copy deleted")
        assert finished(rlmm, tip)[0].start_offset == seg.base_offset  # copied again under a new id

    run_with_rlm(tmp_path, scenario)


def test_copies_retry_while_the_store_is_down_and_leave_nothing_behind(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    append(plog, 12)
    p = FakePartition("orders", 0, plog.topic_id or b"", plog)
    flaky: list[FlakyStore] = []

    def wrap(rsm: RemoteStorageManager) -> RemoteStorageManager:
        flaky.append(FlakyStore(rsm))
        flaky[0].down = True
        return cast(RemoteStorageManager, flaky[0])

    async def scenario(rlm: RemoteLogManager, rlmm: MemoryRlmm, root: Path) -> None:
        store = flaky[0]
        rlm.on_partition(p)
        tip = TopicIdPartition(p.topic_id, "orders", 0)
        await wait_until(lambda: store.failed >= 3, "copies failing")
        # each failed attempt was rolled back: DELETE_SEGMENT_STARTED/FINISHED, nothing counted as remote
        assert finished(rlmm, tip) == []
        assert plog.highest_offset_in_remote_storage == -1
        assert plog.retention_start_offset(NOW) is None  # nothing local may go
        # every failed attempt is counted, but the partition's one task may be inside the next
        # attempt (the store's counter moves in the worker thread, the meter after it returns)
        failed, errors = store.failed, rlm.metrics.topic("orders").remote_copy_errors
        assert failed - 1 <= errors <= store.failed
        store.down = False
        await wait_until(lambda: plog.highest_offset_in_remote_storage == plog.segments[-1].base_offset - 1,
                         "the copies once the store is back")
        live = list(rlmm.list_remote_log_segments(tip))
        assert all(m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in live)
        assert len(remote_objects(root)) == 3 * len(live)  # no leftovers of the failed attempts

    run_with_rlm(tmp_path, scenario, wrap=wrap)


def test_follower_learns_the_highest_remote_offset(tmp_path: Path) -> None:
    plog = make_log(tmp_path, **{"local.retention.bytes": 1})
    append(plog, 12)
    p = FakePartition("orders", 0, plog.topic_id or b"", plog, leader=False)

    async def scenario(rlm: RemoteLogManager, rlmm: MemoryRlmm, root: Path) -> None:
        tip = TopicIdPartition(p.topic_id, "orders", 0)
        rlmm.on_partition_leadership_changes([], [tip])
        seg = plog.segments[0]
        end = plog.segments[1].base_offset - 1
        sid = RemoteLogSegmentId(tip, os.urandom(16))  # the leader's copy of the first segment
        rlmm.add_remote_log_segment_metadata(RemoteLogSegmentMetadata(sid, 0, end, NOW, 2, NOW, seg.size, ((0, 0),)))
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            sid, NOW, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 2))
        rlm.on_partition(p)
        await wait_until(lambda: plog.highest_offset_in_remote_storage == end, "the follower task")
        assert plog.retention_start_offset(NOW) == end + 1  # the follower's local retention may drop it
        assert not any(isinstance(e, RemoteLogSegmentMetadata) and e.broker_id == 1 for e in rlmm.events)

    run_with_rlm(tmp_path, scenario)


def test_topic_deletion_removes_all_remote_data(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    append(plog, 12)
    p = FakePartition("orders", 0, plog.topic_id or b"", plog)

    async def scenario(rlm: RemoteLogManager, rlmm: MemoryRlmm, root: Path) -> None:
        rlm.on_partition(p)
        tip = TopicIdPartition(p.topic_id, "orders", 0)
        await wait_until(lambda: len(finished(rlmm, tip)) >= 2, "copies")
        assert remote_objects(root)
        rlm.stop_partition("orders", 0, p.topic_id, delete_remote=True)
        await wait_until(lambda: not remote_objects(root), "the remote objects gone")

        def states() -> list[RemotePartitionDeleteState]:
            return [e.state for e in rlmm.events if isinstance(e, RemotePartitionDeleteMetadata)]

        # the objects go first, the FINISHED event after them
        await wait_until(lambda: RemotePartitionDeleteState.DELETE_PARTITION_FINISHED in states(), "the deletion done")
        assert states() == [RemotePartitionDeleteState.DELETE_PARTITION_MARKED,
                          RemotePartitionDeleteState.DELETE_PARTITION_STARTED,
                          RemotePartitionDeleteState.DELETE_PARTITION_FINISHED]
        await wait_until(lambda: tip in rlmm.stopped, "the RLMM told")

    run_with_rlm(tmp_path, scenario)


def test_kip950_disable_with_delete_removes_remote_data(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    append(plog, 12)
    p = FakePartition("orders", 0, plog.topic_id or b"", plog)

    async def scenario(rlm: RemoteLogManager, rlmm: MemoryRlmm, root: Path) -> None:
        rlm.on_partition(p)
        tip = TopicIdPartition(p.topic_id, "orders", 0)
        await wait_until(lambda: len(finished(rlmm, tip)) >= 2, "copies")
        plog.increment_local_log_start_offset(plog.segments[1].base_offset)
        plog.config = plog.config.with_overrides({"remote.storage.enable": False,
                                                  "remote.log.delete.on.disable": True})
        rlm.on_partition(p)
        await wait_until(lambda: not remote_objects(root), "the remote data deleted")
        # nothing below the local start is readable once the deletion is done
        await wait_until(lambda: plog.log_start_offset == plog.local_log_start_offset, "the log start moved")

    run_with_rlm(tmp_path, scenario)


def test_copy_throttle_holds_the_rate(tmp_path: Path) -> None:
    plog = make_log(tmp_path)
    append(plog, 12)
    p = FakePartition("orders", 0, plog.topic_id or b"", plog)

    async def scenario(rlm: RemoteLogManager, rlmm: MemoryRlmm, root: Path) -> None:
        rlm.on_partition(p)
        tip = TopicIdPartition(p.topic_id, "orders", 0)
        await wait_until(lambda: len(finished(rlmm, tip)) >= 2, "copies")
        assert rlm.metrics.copy_throttle_time_ms > 0  # a copy waited for the quota

    run_with_rlm(tmp_path, scenario, broker={"remote.log.manager.copy.max.bytes.per.second": "500"})


def test_lineage_check_and_epoch_checkpoint_bytes() -> None:
    tip = TopicIdPartition(b"\x01" * 16, "t", 0)

    def seg(start: int, end: int, epochs: tuple[tuple[int, int], ...]) -> RemoteLogSegmentMetadata:
        return RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, os.urandom(16)), start, end, 0, 1, 0, 10, epochs)

    lineage = [(0, 0), (2, 100), (5, 400)]
    assert is_within_leader_epochs(seg(0, 99, ((0, 0),)), 500, lineage)
    assert is_within_leader_epochs(seg(50, 150, ((0, 50), (2, 100))), 500, lineage)
    assert not is_within_leader_epochs(seg(50, 150, ((0, 50), (1, 100))), 500, lineage)  # epoch 1 not here
    assert not is_within_leader_epochs(seg(0, 120, ((0, 0),)), 500, lineage)  # epoch 0 ended at 99
    assert not is_within_leader_epochs(seg(400, 600, ((5, 400),)), 500, lineage)  # beyond the log end
    assert leader_epoch_checkpoint_bytes([(0, 0), (2, 100)]) == b"0\n2\n0 0\n2 100\n"


@pytest.mark.parametrize("enabled", [True, False])
def test_restart_keeps_the_log_start_below_the_local_segments(tmp_path: Path, enabled: bool) -> None:
    plog = make_log(tmp_path)
    append(plog, 12)
    local_start = plog.segments[2].base_offset
    plog.update_highest_offset_in_remote_storage(local_start - 1)
    plog.delete_segment_files(plog.increment_local_log_start_offset(local_start))
    plog.close()
    reopened = UnifiedLog(plog.dir, plog.config, topic="orders", partition=0, log_start_offset=0,
                          clean_shutdown=True, remote_storage_system_enable=enabled)
    if enabled:  # the checkpointed start of the whole log stays
        assert reopened.log_start_offset == 0
        assert reopened.local_log_start_offset == reopened.segments[0].base_offset
    else:  # not tiered on this node: the log starts at its first segment
        assert reopened.log_start_offset == reopened.segments[0].base_offset
    reopened.close()


def test_a_quiet_tiered_log_rolls_its_only_segment_once_local_retention_passes(tmp_path: Path) -> None:
    plog = make_log(tmp_path, **{"local.retention.ms": 1000, "segment.bytes": 1 << 20})
    append(plog, 3, ts=NOW)
    assert len(plog.segments) == 1
    assert not plog.retention_roll_due(NOW + 1000)  # not older than local.retention.ms yet
    assert plog.retention_roll_due(NOW + 1001)
    plog.high_watermark -= 1  # unreplicated data: never
    assert not plog.retention_roll_due(NOW + 5000)
    plog.high_watermark = plog.log_end_offset
    plog.roll(NOW + 5000)
    assert len(plog.segments) == 2 and not plog.retention_roll_due(NOW + 5000)
    off = make_log(tmp_path / "off", **{"remote.storage.enable": False, "retention.ms": 1000,
                                        "segment.bytes": 1 << 20})
    append(off, 3, ts=NOW)
    assert not off.retention_roll_due(NOW + 5000)  # a log that is not tiered keeps Kafka's old rule

