"""A follower's log replays producer state and transaction markers as the leader wrote them, so a
follower that becomes leader keeps deduplicating and keeps the last stable offset right."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybroker.log.config import LogConfig
from pybroker.log.errors import OutOfOrderSequenceError
from pybroker.log.log import UnifiedLog
from pybroker.records.batch import build_batch, iter_batches
from pybroker.records.end_txn_marker import ABORT, COMMIT, build_marker_batch


def open_log(path: Path, name: str) -> UnifiedLog:
    return UnifiedLog(path / f"{name}-0", LogConfig(), topic=name, partition=0)


def replicate(leader: UnifiedLog, follower: UnifiedLog) -> None:
    """Copy the leader's batches from the follower's end, as fetch responses would."""
    import os

    info = leader.read(follower.log_end_offset, 1 << 20)
    data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
    for _header, chunk in iter_batches(data):
        follower.append_as_follower(chunk, 0)


def txn_batch(pid: int, seq: int, value: bytes) -> bytearray:
    return bytearray(build_batch([(1000, None, value, ())], producer_id=pid, producer_epoch=0, base_sequence=seq,
                                 transactional=True))


def test_aborted_transactions_and_the_lso_match_the_leaders(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path, "l"), open_log(tmp_path, "f")
    leader.append_as_leader(txn_batch(7, 0, b"a"), 0, 0)
    leader.append_as_leader(txn_batch(8, 0, b"b"), 0, 0)
    leader.append_as_leader(build_marker_batch(7, 0, ABORT, 0, 1000), 0, 0, origin="coordinator")
    replicate(leader, follower)
    assert follower.producer_state.first_unstable_offset() == 1  # pid 8's transaction is open
    for log in (leader, follower):
        log.high_watermark = log.log_end_offset
    assert follower.last_stable_offset == leader.last_stable_offset == 1
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in follower.txn_index.collect(0, 3)] == \
        [(a.producer_id, a.first_offset, a.last_offset) for a in leader.txn_index.collect(0, 3)] == [(7, 0, 2)]
    leader.append_as_leader(build_marker_batch(8, 0, COMMIT, 0, 1000), 0, 0, origin="coordinator")
    replicate(leader, follower)
    assert follower.producer_state.first_unstable_offset() is None


def test_a_follower_turned_leader_deduplicates_and_checks_sequences(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path, "l"), open_log(tmp_path, "f")
    for seq in range(3):
        leader.append_as_leader(bytearray(build_batch([(1000, None, b"v%d" % seq, ())], producer_id=5,
                                                      producer_epoch=0, base_sequence=seq)), 0, 0)
    replicate(leader, follower)
    # the producer retries its last batch against the new leader: a duplicate, not a new record
    info = follower.append_as_leader(bytearray(build_batch([(1000, None, b"v2", ())], producer_id=5, producer_epoch=0,
                                                           base_sequence=2)), 1, 0)
    assert info.duplicate and info.first_offset == 2 and follower.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        follower.append_as_leader(bytearray(build_batch([(1000, None, b"v9", ())], producer_id=5, producer_epoch=0,
                                                        base_sequence=9)), 1, 0)


def test_a_new_leader_answers_any_of_the_last_five_retried_batches_with_their_original_offsets(
        tmp_path: Path) -> None:
    """Kafka keeps the metadata of a producer's last 5 batches, on followers too (replayed by
    append_as_follower), so a retried batch that the old leader had appended is answered by the
    new one with its original offsets, never DUPLICATE_SEQUENCE_NUMBER nor offset -1 (librdkafka
    reports those, and its implicit acks, without an offset)."""
    leader, follower = open_log(tmp_path, "l"), open_log(tmp_path, "f")
    firsts = []
    for seq in range(0, 14, 2):  # 7 batches of 2 records
        info = leader.append_as_leader(bytearray(build_batch(
            [(1000, None, b"a%d" % seq, ()), (1000, None, b"b%d" % seq, ())], producer_id=5, producer_epoch=0,
            base_sequence=seq)), 0, 0)
        firsts.append((seq, info.first_offset, info.last_offset))
    replicate(leader, follower)
    end = follower.log_end_offset
    for seq, first, last in firsts[-5:]:
        info = follower.append_as_leader(bytearray(build_batch(
            [(1000, None, b"a%d" % seq, ()), (1000, None, b"b%d" % seq, ())], producer_id=5, producer_epoch=0,
            base_sequence=seq)), 1, 0)
        assert info.duplicate and (info.first_offset, info.last_offset) == (first, last)
    assert follower.log_end_offset == end
    with pytest.raises(OutOfOrderSequenceError):  # older than the 5 kept: Kafka's answer too
        follower.append_as_leader(bytearray(build_batch(
            [(1000, None, b"a0", ()), (1000, None, b"b0", ())], producer_id=5, producer_epoch=0, base_sequence=0)), 1, 0)
