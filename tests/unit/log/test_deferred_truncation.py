"""A follower's truncation with its file work left to worker threads
(UnifiedLog.truncate_to_deferred, LogSegment.complete_truncation): the log reads as truncated at
once, whatever the files still hold; the segments above the cut are renamed `*.deleted` at once
(a new segment at their base offset never meets them) and removed later without the live log's
producer snapshots; the last segment's file is cut by a worker, or first by the next append or
close, so nothing written after the cut is lost and nothing past it survives a clean shutdown.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from pybroker.log.config import LogConfig
from pybroker.log.log import UnifiedLog
from pybroker.log.producer_state import snapshot_file
from pybroker.records.batch import iter_batches

from .conftest import make_batch


def open_log(path: Path, segment_bytes: int = 400) -> UnifiedLog:
    return UnifiedLog(path / "t-0", LogConfig(segment_bytes=segment_bytes), topic="t", partition=0)


def fill(log: UnifiedLog, batches: int, epoch: int = 0) -> None:
    for _ in range(batches):
        log.append_as_leader(make_batch(2, producer_id=7, producer_epoch=0, base_sequence=log.log_end_offset),
                             epoch, 0)


def offsets(log: UnifiedLog, start: int = 0) -> list[int]:
    """Base offsets of the batches reads from `start` return, segment after segment, as a
    consumer would fetch them (each read holds one segment's batches)."""
    out: list[int] = []
    while True:
        info = log.read(start, 1 << 20)
        data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
        headers = [h for h, _ in iter_batches(data, verify_crc=True)]
        if not headers:
            return out
        out += [h.base_offset for h in headers]
        start = headers[-1].base_offset + headers[-1].last_offset_delta + 1


def test_the_log_reads_truncated_before_any_file_is_touched(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 12)  # 24 records in several segments
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    active_file = log.segments[1].log_path
    size_before = os.path.getsize(active_file)
    cut = bases[1] + 2  # inside the second segment
    work = log.truncate_to_deferred(cut, 0)
    assert work.truncated and log.log_end_offset == cut
    # what a reader sees: the truncated log, though the second segment's file still has its tail
    assert offsets(log) == list(range(0, cut, 2))
    assert log.read(cut, 1 << 20).empty
    assert work.active is log.active_segment and work.active.truncation_pending
    assert os.path.getsize(active_file) == size_before > work.active.size
    # the segments above the cut are out of the log and renamed, their fds still open
    assert [s.base_offset for s in work.segments] == bases[2:]
    for s in work.segments:
        assert s.log_path.name.endswith(".deleted") and s.log_path.exists()
        assert not (tmp_path / "t-0" / s.log_path.name.removesuffix(".deleted")).exists()
        os.fstat(s.fd)
    # the worker's part: the file is cut where the segment ends
    done = threading.Thread(target=work.active.complete_truncation)
    done.start()
    done.join()
    assert os.path.getsize(active_file) == work.active.size and not work.active.truncation_pending
    log.delete_segment_files(work.segments, snapshots=False)
    assert not any(s.log_path.exists() for s in work.segments)
    log.close()


def test_an_append_before_the_worker_cuts_first(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=10**6)
    fill(log, 6)
    work = log.truncate_to_deferred(6, 0)
    active = work.active
    assert active is not None and active.truncation_pending
    fill(log, 2, epoch=1)  # the follower fetched again before the worker ran
    assert not active.truncation_pending
    assert os.path.getsize(active.log_path) == active.size
    assert offsets(log) == [0, 2, 4, 6, 8] and log.log_end_offset == 10
    active.complete_truncation()  # the worker comes late: nothing left to cut
    assert os.path.getsize(active.log_path) == active.size
    log.close()


def test_a_close_cuts_a_pending_truncation_so_a_clean_restart_does_not_see_the_tail(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=10**6)
    fill(log, 6)
    work = log.truncate_to_deferred(4, 0)
    assert work.active is not None and work.active.truncation_pending
    log.close()  # shutdown before the worker ran
    again = open_log(tmp_path, segment_bytes=10**6)
    assert again.log_end_offset == 4 and offsets(again) == [0, 2]
    again.close()


def test_a_segment_made_again_at_a_removed_base_offset_keeps_its_files_and_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 12)
    old = log.segments[-1]
    base = old.base_offset
    work = log.truncate_to_deferred(base - 2, 0)  # the last batch of the segment before it
    assert old in work.segments and log.log_end_offset == base - 2
    # the follower fetches past the old base again: a roll there takes a snapshot of that name
    fill(log, 1, epoch=1)
    log.roll(0)
    fill(log, 3, epoch=1)
    again = next(s for s in log.segments if s.base_offset == base)
    snap = snapshot_file(log.dir, base)
    assert again is not old and again.log_path.exists() and snap.exists()
    # the removal of the old segment, after file.delete.delay.ms, leaves both alone
    log.delete_segment_files(work.segments, snapshots=False)
    assert again.log_path.exists() and snap.exists() and not old.log_path.exists()
    assert offsets(log, base) == list(range(base, log.log_end_offset, 2))
    log.close()


def test_a_full_truncation_renames_every_old_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 8)
    old = list(log.segments)
    work = log.truncate_fully_and_start_at_deferred(100, 0)
    assert work.segments == old and work.active is None
    assert all(s.log_path.name.endswith(".deleted") for s in old)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100) and log.read(100, 10).empty
    log.delete_segment_files(work.segments)
    log.close()
