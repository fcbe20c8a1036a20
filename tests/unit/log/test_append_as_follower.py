"""UnifiedLog.append_as_follower: batches whose offsets and leader epochs were assigned
elsewhere (a follower's fetch, the KRaft leader) go in as they are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pybroker._native.errors import CorruptRecordError
from pybroker.log.config import LogConfig
from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.log.log import UnifiedLog
from pybroker.records.batch import build_batch, iter_batches


def open_log(path: Path, **config: object) -> UnifiedLog:
    return UnifiedLog(path / "t-0", LogConfig(**config), topic="t", partition=0)


def read_all(log: UnifiedLog) -> bytes:
    out = b""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        chunk = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
        out += chunk
        offset = [h for h, _ in iter_batches(chunk)][-1].next_offset
    return out


def batch(base: int, epoch: int, n: int = 2, ts: int = 1000) -> bytes:
    return build_batch([(ts, None, b"v%d" % i, ()) for i in range(n)], base_offset=base,
                       partition_leader_epoch=epoch)


def test_batches_keep_their_offsets_and_epochs_and_roll_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    for base, epoch in ((0, 1), (2, 1), (4, 3), (6, 3), (8, 4)):
        info = log.append_as_follower(batch(base, epoch), now_ms=5)
        assert (info.first_offset, info.last_offset) == (base, base + 1)
    assert log.log_end_offset == 10 and len(log.segments) > 1
    assert log.leader_epoch_cache.entries() == [(1, 0), (3, 4), (4, 8)]
    assert [(h.base_offset, h.partition_leader_epoch) for h, _ in iter_batches(read_all(log))] == [
        (0, 1), (2, 1), (4, 3), (6, 3), (8, 4)]
    log.close()
    reopened = open_log(tmp_path, segment_bytes=200)
    assert reopened.log_end_offset == 10 and reopened.latest_epoch() == 4
    reopened.close()


def test_a_gap_or_a_corrupt_batch_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_follower(batch(0, 1), now_ms=0)
    with pytest.raises(OffsetOutOfRangeError):
        log.append_as_follower(batch(5, 1), now_ms=0)
    corrupt = bytearray(batch(2, 1))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(corrupt, now_ms=0)
    assert log.log_end_offset == 2
    assert [h.base_offset for h, _ in iter_batches(read_all(log))] == [0]
    log.close()
