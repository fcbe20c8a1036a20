"""The log manager's background tasks (Kafka's LogManager scheduler), on virtual time: retention
every log.retention.check.interval.ms with the files removed file.delete.delay.ms later, the
flush policy (after an append and on the flusher's pass), the recovery-point and
log-start-offset checkpoints on their own timers and none after shutdown, producer-id
expiration, the cleaner over the compacted logs only, the small checkpoints' flusher, and the
removal of deleted logs. Each waits on a condition, polled on trio's MockClock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from pybroker.clock import TrioClock
from pybroker.config import BrokerConfig
from pybroker.log.checkpoint import OffsetCheckpointFile
from pybroker.log.config import LogConfig
from pybroker.log.manager import LogManager
from pybroker.records.batch import build_batch

from .conftest import make_batch

DAY = 86_400_000
NOW = 10 * DAY
TP = ("t", 0)


def run(main: Callable[[], Awaitable[None]]) -> None:
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.01))


async def until(condition: Callable[[], bool]) -> None:
    """Wait (virtual time) for what a task does on the loop or in a worker thread; a condition
    never met fails after 10 virtual minutes instead of hanging."""
    with trio.fail_after(600):
        while True:
            if condition():
                return
            await trio.sleep(0.1)


def manager(tmp_path: Path, nursery: trio.Nursery, config: LogConfig, **broker: str) -> LogManager:
    lm = LogManager([tmp_path / "d"], 1, default_config=config, config=BrokerConfig(broker),
                    clock=TrioClock(start_ms=NOW), spawn=nursery.start_soon)
    lm.load(0)
    return lm


def fill(plog: Any, timestamps: list[int]) -> None:
    for ts in timestamps:
        plog.append_as_leader(make_batch(2, ts, value_size=20), leader_epoch=0, now_ms=ts)
    plog.high_watermark = plog.log_end_offset


def checkpoint(path: Path) -> dict:
    return OffsetCheckpointFile(path).read() if path.exists() else {}


def test_retention_runs_every_check_interval_and_files_go_after_file_delete_delay(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            lm = manager(tmp_path, nursery, LogConfig(segment_bytes=200, retention_ms=DAY, file_delete_delay_ms=60_000),
                         **{"log.retention.check.interval.ms": "30000"})
            plog = lm.get_or_create_log(*TP, None)
            fill(plog, [1_000, 2_000, NOW, NOW + 1])
            assert [s.base_offset for s in plog.segments] == [0, 2, 4, 6]
            old = [s.log_path for s in plog.segments[:2]]
            start = trio.current_time()
            await nursery.start(lm.run_retention)
            await until(lambda: plog.log_start_offset == 4)
            assert 30.0 <= trio.current_time() - start < 31.0
            await until(lambda: all(Path(f"{p}.deleted").exists() for p in old))
            assert not any(p.exists() for p in old)  # renamed at once, removed later
            await until(lambda: not any(Path(f"{p}.deleted").exists() for p in old))
            assert trio.current_time() - start >= 30.0 + 60.0
            assert [s.base_offset for s in plog.segments] == [4, 6]
            nursery.cancel_scope.cancel()
        lm.shutdown(0)

    run(main)


def test_enforce_retention_counts_removed_segments_and_keeps_the_active_one(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            lm = manager(tmp_path, nursery, LogConfig(segment_bytes=200, retention_ms=DAY, file_delete_delay_ms=0))
            plog = lm.get_or_create_log(*TP, None)
            fill(plog, [1_000, 2_000, 3_000])
            lone = lm.get_or_create_log("u", 0, None)
            fill(lone, [1_000])  # one segment: the active one, never removed
            assert await lm.enforce_retention(NOW) == 2
            assert [s.base_offset for s in plog.segments] == [4] and lone.log_start_offset == 0
            assert await lm.enforce_retention(NOW) == 0
            nursery.cancel_scope.cancel()
        lm.shutdown(0)

    run(main)


def test_flush_after_append_runs_in_a_worker_thread_one_at_a_time(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            lm = manager(tmp_path, nursery, LogConfig(flush_messages=2))
            spawned: list[Any] = []

            def spawn(fn: Callable[..., Any], *args: Any) -> None:
                spawned.append(fn)
                nursery.start_soon(fn, *args)

            lm.spawn = spawn
            plog = lm.get_or_create_log(*TP, None)
            plog.append_as_leader(make_batch(1), 0, NOW)
            lm.maybe_flush(plog)
            assert not spawned  # one unflushed message: flush.messages is 2
            plog.append_as_leader(make_batch(1), 0, NOW)
            lm.maybe_flush(plog)
            lm.maybe_flush(plog)  # the first flush still runs: no second one
            assert len(spawned) == 1
            await until(lambda: plog.recovery_point == 2 and not lm._flushing)
            assert lm.log_flush_stats.snapshot().count == 1  # LogFlushRateAndTimeMs
            lm.maybe_flush(plog)
            assert len(spawned) == 1  # nothing left to flush
            nursery.cancel_scope.cancel()
        lm.shutdown(0)

    run(main)


def test_the_flusher_flushes_logs_whose_flush_ms_elapsed(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            lm = manager(tmp_path, nursery, LogConfig(flush_ms=5_000),
                         **{"log.flush.scheduler.interval.ms": "1000"})
            assert lm.flush_check_interval_s() == 1.0
            plog = lm.get_or_create_log(*TP, None, now_ms=lm.clock.wall_ms())  # its last flush: now
            plog.append_as_leader(make_batch(3), 0, NOW)
            start = trio.current_time()
            await nursery.start(lm.run_flusher)
            await until(lambda: plog.recovery_point == 3)
            assert 5.0 <= trio.current_time() - start <= 5.0 + 1.5
            nursery.cancel_scope.cancel()
        lm.shutdown(0)

    run(main)


def test_the_flusher_pass_keeps_its_cadence_when_the_scheduler_interval_is_unset() -> None:
    # riding the checkpoint timers as it did: the smallest of them (the HW's 5 s by default)
    lm = LogManager([], 1, config=BrokerConfig())
    assert lm.flush_check_interval_s() == 5.0
    lm.config = BrokerConfig({"log.flush.offset.checkpoint.interval.ms": "2000"})
    assert lm.flush_check_interval_s() == 2.0


def test_recovery_points_and_log_start_offsets_are_checkpointed_on_their_own_timers(tmp_path: Path) -> None:
    async def main() -> None:
        rp_file = tmp_path / "d" / "recovery-point-offset-checkpoint"
        lso_file = tmp_path / "d" / "log-start-offset-checkpoint"
        async with trio.open_nursery() as nursery:
            lm = manager(tmp_path, nursery, LogConfig(segment_bytes=200, file_delete_delay_ms=0),
                         **{"log.flush.offset.checkpoint.interval.ms": "10000",
                            "log.flush.start.offset.checkpoint.interval.ms": "30000"})
            plog = lm.get_or_create_log(*TP, None)
            fill(plog, [1_000, 2_000, 3_000])
            plog.flush(now_ms=NOW)
            # mid-segment: Kafka lists only a start offset past its log's first segment's base
            lm.schedule_segment_deletion(plog, plog.increment_log_start_offset(3))
            start = trio.current_time()
            await nursery.start(lm.run_recovery_point_checkpointer)
            await nursery.start(lm.run_log_start_offset_checkpointer)
            await until(lambda: checkpoint(rp_file).get(TP) == 6)
            assert 10.0 <= trio.current_time() - start < 30.0
            assert TP not in checkpoint(lso_file)
            await until(lambda: checkpoint(lso_file).get(TP) == 3)
            assert trio.current_time() - start >= 30.0
            nursery.cancel_scope.cancel()
        lm.shutdown(NOW, {TP: 6})
        # shutdown's checkpoints are the last: a late periodic one writes nothing
        written = (rp_file.read_text(), lso_file.read_text())
        plog.recovery_point, plog.log_start_offset = 0, 4
        lm.checkpoint_recovery_points()
        lm.checkpoint_log_start_offsets()
        lm.checkpoint_high_watermarks({TP: 0})
        assert (rp_file.read_text(), lso_file.read_text()) == written
        assert checkpoint(tmp_path / "d" / "replication-offset-checkpoint") == {TP: 6}

    run(main)


def test_producers_idle_past_their_expiration_are_forgotten_every_check_interval(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            lm = LogManager([tmp_path / "d"], 1, default_config=LogConfig(), producer_id_expiration_ms=5_000,
                            config=BrokerConfig({"producer.id.expiration.check.interval.ms": "1000"}),
                            clock=TrioClock(start_ms=NOW), spawn=nursery.start_soon)
            lm.load(0)
            plog = lm.get_or_create_log(*TP, None)
            batch = build_batch([(NOW, None, b"v", ())], producer_id=7, producer_epoch=0, base_sequence=0)
            plog.append_as_leader(bytearray(batch), 0, NOW)
            assert 7 in plog.producer_state.producers
            start = trio.current_time()
            await nursery.start(lm.run_producer_expiration)
            await until(lambda: not plog.producer_state.producers)
            assert 5.0 <= trio.current_time() - start <= 6.0 + 0.5
            nursery.cancel_scope.cancel()
        lm.shutdown(0)

    run(main)


def test_the_cleaner_compacts_the_tracked_logs_only(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            compact = LogConfig(cleanup_policy="compact", segment_bytes=300, file_delete_delay_ms=0)
            lm = manager(tmp_path, nursery, compact, **{"log.cleaner.backoff.ms": "1000"})
            plogs = [lm.get_or_create_log(topic, 0, None) for topic in ("a", "b")]
            for plog in plogs:
                for i in range(8):
                    rows = [(1_000 + i, b"k%d" % (i % 2), b"v" * 100, ())]
                    plog.append_as_leader(bytearray(build_batch(rows)), 0, 1_000 + i)
                plog.high_watermark = plog.log_end_offset
            a, b = plogs
            lm.track_compacted(a)  # b: as if its topic's config were not applied yet
            sizes = (a.size_in_bytes(), b.size_in_bytes())
            await nursery.start(lm.run_cleaner)
            await until(lambda: a.size_in_bytes() < sizes[0])
            assert b.size_in_bytes() == sizes[1]
            await until(lambda: (tmp_path / "d" / "cleaner-offset-checkpoint").exists())
            # a delete-only policy and a deleted log leave the cleaner's view
            b.config = LogConfig(cleanup_policy="delete")
            lm.track_compacted(b)
            lm.track_compacted(a)
            assert set(lm._compacted) == {("a", 0)}
            lm.remove_logs([lm.detach_log("a", 0)])
            assert not lm._compacted
            nursery.cancel_scope.cancel()
        lm.shutdown(0)

    run(main)


def test_the_cleaner_stays_off_when_disabled(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            lm = manager(tmp_path, nursery, LogConfig(), **{"log.cleaner.enable": "false"})
            with trio.move_on_after(1) as waited:
                await lm.run_cleaner()  # returns at once
            assert not waited.cancelled_caught, "run_cleaner kept running with log.cleaner.enable=false"
        lm.shutdown(0)

    run(main)


def test_small_checkpoints_are_written_as_soon_as_they_fall_behind(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            lm = manager(tmp_path, nursery, LogConfig())
            plog = lm.get_or_create_log(*TP, None)
            await nursery.start(lm.run)  # every task, the small checkpoints' flusher among them
            assert lm.on_metadata_dirty is not None
            plog.assign_topic_id(b"\x07" * 16)  # partition.metadata falls behind
            assert lm.has_dirty_metadata()
            start = trio.current_time()
            await until(lambda: not lm.has_dirty_metadata())
            assert trio.current_time() - start < 1.0  # woken, not the 10 s retry
            assert "topic_id" in (plog.dir / "partition.metadata").read_text()
            nursery.cancel_scope.cancel()
        lm.shutdown(0)

    run(main)


def test_removed_logs_are_renamed_away_and_purged(tmp_path: Path) -> None:
    lm = LogManager([tmp_path / "d"], 1, default_config=LogConfig())
    lm.load(0)
    plog = lm.get_or_create_log(*TP, None)
    detached = [lm.detach_log(*TP)]
    lm.remove_logs(detached)
    assert not detached and not plog.dir.exists()
    assert not [p for p in (tmp_path / "d").iterdir() if p.name.startswith("t-0")]
    lm.shutdown(0)
