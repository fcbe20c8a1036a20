"""Recovery after a crash, step by step: what the compiled segment scan, the index rebuild, the
deferred small checkpoints and the parallel loader must leave behind is exactly what a log that
was never interrupted has.

A "crash" here is `close_handlers()` (files closed, nothing trimmed, no snapshot, no checkpoint
written) followed by opening the dir again without the clean-shutdown flag, as the log manager
does after SIGKILL.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest

from pybroker.log import manager as manager_mod
from pybroker.log.config import LogConfig
from pybroker.log.leader_epoch_cache import LeaderEpochFileCache
from pybroker.log.log import UnifiedLog
from pybroker.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from pybroker.records.end_txn_marker import ABORT, build_marker_batch

from .conftest import make_batch

TOPIC_ID = bytes(range(16))


def open_log(path: Path, config: LogConfig, **kw) -> UnifiedLog:
    return UnifiedLog(path / "t-0", config, topic="t", partition=0, now_ms=0, **kw)


def index_files(log: UnifiedLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.dir.iterdir())
            if p.suffix in (".index", ".timeindex")}


def fill(log: UnifiedLog, n: int, *, epoch=lambda i: 0, pid: int = -1) -> None:
    for i in range(n):
        batch = make_batch(1 + i % 3, timestamp=1_000 + 7 * i, value_size=30 + i % 50, producer_id=pid,
                           producer_epoch=0 if pid >= 0 else -1,
                           base_sequence=(sum(1 + k % 3 for k in range(i)) if pid >= 0 else -1))
        log.append_as_leader(batch, epoch(i), now_ms=0)


CONFIG = LogConfig(segment_bytes=2_000, index_interval_bytes=150)


def test_rebuilt_indexes_are_byte_identical_to_the_appended_ones(tmp_path):
    log = open_log(tmp_path, CONFIG, topic_id=TOPIC_ID)
    fill(log, 60)
    log.close()
    written = index_files(log)
    assert len([n for n in written if n.endswith(".index")]) >= 3
    # a crash: every index gone or left untrimmed, nothing flushed
    for name in written:
        if name.endswith(".index"):
            (log.dir / name).unlink()
        else:
            with open(log.dir / name, "r+b") as f:
                f.truncate(10 * 1024 * 1024 - 4)  # a preallocated, zero-tailed time index
    again = open_log(tmp_path, CONFIG)
    assert again.log_end_offset == log.log_end_offset
    again.close()
    assert index_files(again) == written


def test_a_torn_tail_is_cut_and_the_active_indexes_grow_back_lazily(tmp_path):
    config = LogConfig(index_interval_bytes=150)  # one segment
    log = open_log(tmp_path, config)
    fill(log, 25)
    end = log.log_end_offset
    active = log.active_segment
    entries = active.offset_index.entries
    assert entries >= 5
    log.close_handlers()  # crash: the active indexes stay preallocated (zero tail), no snapshot
    assert os.path.getsize(active.offset_index.path) == 10 * 1024 * 1024
    with open(active.log_path, "ab") as f:
        f.write(make_batch(3)[:40])  # half a batch
    again = open_log(tmp_path, config)
    assert again.log_end_offset == end
    seg = again.active_segment
    assert seg.recovery_error == "truncated"
    assert os.path.getsize(seg.log_path) == seg.size  # the file ends at the last whole batch
    # rebuilt to exactly its entries, then grown back (sparse) for appends: no 10 MB of zeros
    # was ever written, the file holds a few KiB of blocks
    assert seg.offset_index.entries == entries
    assert seg.offset_index.max_entries == config.segment_index_bytes // 8
    assert os.stat(seg.offset_index.path).st_blocks * 512 <= 64 * 1024
    fill(again, 5)
    assert seg.offset_index.entries > entries
    assert again.read(0, 1 << 20).size > 0
    again.close()
    assert os.path.getsize(seg.offset_index.path) == seg.offset_index.entries * 8


def test_recovery_writes_nothing_for_an_unchanged_small_log(tmp_path):
    """A nearly empty partition recovered twice: the second recovery finds the same indexes and
    rewrites no file (a rewrite cost a block reallocation each)."""
    log = open_log(tmp_path, CONFIG, topic_id=TOPIC_ID)
    fill(log, 1)
    log.flush()
    log.close_handlers()
    open_log(tmp_path, CONFIG).close_handlers()  # first recovery: rebuilds the crash-left files
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "t-0").iterdir()}
    open_log(tmp_path, CONFIG).close_handlers()
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "t-0").iterdir()}
    assert after == before


def test_producer_state_after_a_crash_with_and_without_producers_per_segment(tmp_path):
    """Segments without a producer id are skipped by the producer-state replay (the scan counted
    none); a later segment's idempotent producer is replayed exactly."""
    log = open_log(tmp_path, CONFIG)
    fill(log, 30)               # no producer id: several segments
    fill(log, 12, pid=42)       # an idempotent producer, from the middle of a segment on
    last_seq = log.producer_state.producers[42].last_seq
    end = log.log_end_offset
    log.close_handlers()
    for p in (tmp_path / "t-0").glob("*.snapshot"):
        p.unlink()  # no snapshot at all: everything is replayed from the log
    again = open_log(tmp_path, CONFIG)
    assert again.producer_state.producers[42].last_seq == last_seq
    assert [s.producer_free for s in again.segments[:2]] == [True, True]
    # the next batch in sequence is accepted, a retry of the last one is a duplicate
    dup = again.append_as_leader(make_batch(3, producer_id=42, producer_epoch=0,
                                            base_sequence=last_seq - 2), 0, now_ms=0)
    assert dup.duplicate
    nxt = again.append_as_leader(make_batch(1, producer_id=42, producer_epoch=0, base_sequence=last_seq + 1),
                                 0, now_ms=0)
    assert nxt.first_offset == end
    again.close()


def test_open_transaction_and_aborted_index_after_a_crash(tmp_path):
    log = open_log(tmp_path, CONFIG)
    fill(log, 10)
    txn = make_batch(2, producer_id=5, producer_epoch=0, base_sequence=0)
    struct.pack_into(">h", txn, 21, 0x10)  # transactional (attributes sit under the CRC: rebuild it)
    from pybroker._native import crc32c
    struct.pack_into(">I", txn, 17, crc32c.crc32c(bytes(txn[21:])))
    first = log.log_end_offset
    log.append_as_leader(txn, 0, now_ms=0)
    other = bytearray(txn)
    struct.pack_into(">q", other, 43, 6)  # producer 6, also transactional
    struct.pack_into(">I", other, 17, crc32c.crc32c(bytes(other[21:])))
    log.append_as_leader(other, 0, now_ms=0)
    log.append_as_leader(build_marker_batch(5, 0, ABORT, 0, 2_000), 0, now_ms=0)
    entries = list(log.txn_index.entries)
    log.close_handlers()
    (log.dir / "aborted.txnindex").unlink()
    for p in log.dir.glob("*.snapshot"):
        p.unlink()
    again = open_log(tmp_path, CONFIG)
    assert again.txn_index.entries == entries and entries[0].first_offset == first
    assert again.first_unstable_offset() == first + 2  # producer 6 is still open
    again.close()


def test_leader_epochs_come_back_from_the_batches_when_the_checkpoint_was_never_written(tmp_path):
    log = open_log(tmp_path, CONFIG, topic_id=TOPIC_ID)
    fill(log, 40, epoch=lambda i: 0 if i < 10 else 3 if i < 25 else 7)
    entries = log.leader_epoch_cache.entries()
    assert [e for e, _ in entries] == [0, 3, 7]
    assert log.metadata_dirty  # the appends only marked the checkpoint dirty
    log.close_handlers()       # crash before any flush: no leader-epoch-checkpoint on disk
    assert not (log.dir / "leader-epoch-checkpoint").exists()
    again = open_log(tmp_path, CONFIG)
    assert again.leader_epoch_cache.entries() == entries
    assert again.end_offset_for_epoch(3) == (3, entries[2][1])
    again.close_handlers()


def test_the_epoch_checkpoint_is_durable_before_the_recovery_point_passes_its_data(tmp_path):
    """Recovery rebuilds epochs only above the recovery point; so flush() writes the checkpoint
    before it moves the recovery point, and a crash afterwards keeps every entry."""
    log = open_log(tmp_path, CONFIG, topic_id=TOPIC_ID)
    fill(log, 30, epoch=lambda i: 1 if i < 12 else 4)
    log.flush()
    assert not log.metadata_dirty
    assert LeaderEpochFileCache(log.dir).entries() == log.leader_epoch_cache.entries()
    recovery_point = log.recovery_point
    entries = log.leader_epoch_cache.entries()
    fill(log, 5, epoch=lambda i: 9)  # after the flush: its epoch lives only in the batches
    log.close_handlers()
    again = open_log(tmp_path, CONFIG, recovery_point=recovery_point)
    assert again.leader_epoch_cache.entries() == entries + [(9, recovery_point)]
    again.close_handlers()


def test_stale_epochs_past_the_end_are_dropped_in_memory_and_written_later(tmp_path):
    log = open_log(tmp_path, CONFIG, topic_id=TOPIC_ID)
    fill(log, 10, epoch=lambda i: 2)
    log.flush()
    log.close()
    # a checkpoint that knows an epoch the log lost (its data was never flushed)
    (log.dir / "leader-epoch-checkpoint").write_text(f"0\n2\n2 0\n5 {log.log_end_offset + 3}\n")
    again = open_log(tmp_path, CONFIG, clean_shutdown=True)
    assert again.leader_epoch_cache.entries() == [(2, 0)]
    assert "5 " in (again.dir / "leader-epoch-checkpoint").read_text()  # not written on the load path
    assert again.metadata_dirty
    again.flush_metadata()
    assert (again.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n2 0\n"
    again.close()


def test_a_clean_start_of_small_logs_writes_no_file(tmp_path):
    """Per partition, a clean start only reads: no checkpoint rewritten, no index made or grown."""
    mgr = LogManager([tmp_path / "d"], 1, default_config=CONFIG)
    mgr.load(now_ms=0)
    for p in range(20):
        plog = mgr.get_or_create_log("t", p, TOPIC_ID)
        plog.maybe_assign_epoch_start_offset(0, 0)
        fill(plog, 1 + p % 2)
    mgr.shutdown(now_ms=0)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "d").rglob("*") if p.is_file()}
    sizes = {p: p.stat().st_size for p in stamps}
    mgr2 = LogManager([tmp_path / "d"], 1, default_config=CONFIG)
    mgr2.load(now_ms=0)
    assert {p: p.stat().st_mtime_ns for p in stamps if p.exists()} == {
        p: t for p, t in stamps.items() if p.name != CLEAN_SHUTDOWN_FILE}
    assert {p: p.stat().st_size for p in stamps if p.exists()} == {
        p: s for p, s in sizes.items() if p.name != CLEAN_SHUTDOWN_FILE}
    assert all(not plog.metadata_dirty for plog in mgr2.logs.values())
    assert sorted(plog.log_end_offset for plog in mgr2.logs.values()) == sorted(
        sum(1 + k % 3 for k in range(1 + p % 2)) for p in range(20))


@pytest.mark.parametrize("threads", [1, 3])
def test_a_mix_of_large_and_small_logs_recovers_alike_on_any_thread_count(tmp_path, monkeypatch, threads):
    monkeypatch.setattr(manager_mod, "PARALLEL_MIN_BYTES", 3_000)  # "large" = a few segments here
    config = LogConfig(segment_bytes=1_000, index_interval_bytes=100)
    mgr = LogManager([tmp_path / "d"], 1, default_config=config, recovery_threads=threads)
    mgr.load(now_ms=0)
    expected = {}
    for p in range(8):
        plog = mgr.get_or_create_log("t", p, TOPIC_ID)
        fill(plog, 4 if p % 2 else 60, epoch=lambda i: i // 20)
        plog.close()
        expected[p] = (plog.log_end_offset, index_files(plog), plog.leader_epoch_cache.entries())
        for name in expected[p][1]:
            (plog.dir / name).unlink()  # a crash that lost every index
    mgr2 = LogManager([tmp_path / "d"], 1, default_config=config, recovery_threads=threads)
    mgr2.load(now_ms=0)
    for p, (end, _files, epochs) in expected.items():
        plog = mgr2.get_log("t", p)
        assert plog.log_end_offset == end and plog.leader_epoch_cache.entries() == epochs
        plog.close()
        assert index_files(plog) == expected[p][1]


def test_a_long_load_logs_its_progress(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(manager_mod, "PROGRESS_INTERVAL_S", 0.0)
    mgr = LogManager([tmp_path / "d"], 1, default_config=CONFIG)
    mgr.load(now_ms=0)
    for p in range(3):
        fill(mgr.get_or_create_log("t", p, TOPIC_ID), 2)
    for plog in mgr.logs.values():
        plog.close_handlers()
    with caplog.at_level(logging.INFO, logger="pybroker.log"):
        LogManager([tmp_path / "d"], 1, default_config=CONFIG).load(now_ms=0)
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("Recovering 3 logs from ") and m.endswith("since no clean shutdown file was found")
               for m in lines)
    assert sum(" logs in " in m and "/3 completed in " in m for m in lines) == 3
    assert any(m.startswith("Loaded 3 logs in ") and "unclean log dirs" in m for m in lines)
