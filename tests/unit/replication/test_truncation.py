"""Follower truncation by leader epoch (KIP-101/279): `truncation_offset` against real logs, and
the loop a fetcher runs (ask the leader with the latest epoch, cut, ask again) ending with the
follower's log a prefix of the leader's, below the follower's high watermark too when the
leader was elected uncleanly (as Kafka does: keeping those records would diverge the logs)."""

from __future__ import annotations

from pathlib import Path

from pybroker.log.config import LogConfig
from pybroker.log.log import UnifiedLog
from pybroker.records.batch import build_batch
from pybroker.replication.replica_fetcher import truncation_offset


def open_log(path: Path, name: str) -> UnifiedLog:
    return UnifiedLog(path / f"{name}-0", LogConfig(), topic=name, partition=0)


def fill(log: UnifiedLog, epochs: list[tuple[int, int]], tag: bytes) -> None:
    """Append `count` one-record batches at `epoch` for each (epoch, count), as a follower would."""
    for epoch, count in epochs:
        for _ in range(count):
            base = log.log_end_offset
            log.append_as_follower(build_batch([(1000 + base, None, tag + b"%d" % base, ())], base_offset=base,
                                               partition_leader_epoch=epoch), 0)


def truncate_like_a_fetcher(follower: UnifiedLog, leader: UnifiedLog) -> int:
    """The fetcher's truncation loop: returns the number of OffsetForLeaderEpoch round trips."""
    for rounds in range(1, 20):
        latest = follower.latest_epoch()
        if latest is None:
            follower.truncate_to(follower.high_watermark, 0)
            return rounds
        epoch, end = leader.end_offset_for_epoch(latest)
        target, done = truncation_offset(follower, epoch, end)
        follower.truncate_to(target, 0)
        if done:
            return rounds
    raise AssertionError("truncation did not converge")


def test_a_follower_cuts_the_records_of_an_epoch_the_leader_never_had(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path, "l"), open_log(tmp_path, "f")
    fill(leader, [(0, 4)], b"a")
    fill(follower, [(0, 4)], b"a")
    fill(follower, [(1, 3)], b"stale")  # appended by an old leader of epoch 1, never replicated
    fill(leader, [(2, 2)], b"b")  # the new leader's epoch 2 starts at 4
    leader.maybe_assign_epoch_start_offset(2, 4)
    follower.high_watermark = 4
    epoch, end = leader.end_offset_for_epoch(1)
    assert (epoch, end) == (0, 4)  # the leader's largest epoch <= 1 is 0, which ends at 4
    assert truncation_offset(follower, epoch, end) == (4, True)
    assert truncate_like_a_fetcher(follower, leader) == 1
    assert follower.log_end_offset == 4 and follower.latest_epoch() == 0


def test_an_older_shared_epoch_takes_a_second_round(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path, "l"), open_log(tmp_path, "f")
    fill(leader, [(0, 2), (2, 3)], b"a")
    leader.maybe_assign_epoch_start_offset(4, 5)  # the leader of epoch 4 (makeLeader)
    fill(follower, [(0, 2)], b"a")
    fill(follower, [(3, 4)], b"x")
    assert leader.end_offset_for_epoch(3) == (2, 5)
    # asked for epoch 3, the leader answers epoch 2 ending at 5; the follower has no epoch 2: its
    # largest epoch <= 2 is 0, which ends at 2 on the follower -> cut at 2, then ask again
    assert truncation_offset(follower, 2, 5) == (2, False)
    assert truncate_like_a_fetcher(follower, leader) == 2
    assert follower.log_end_offset == 2 and follower.latest_epoch() == 0


def test_a_follower_that_is_a_prefix_keeps_everything(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path, "l"), open_log(tmp_path, "f")
    fill(leader, [(0, 3), (1, 5)], b"a")
    fill(follower, [(0, 3), (1, 2)], b"a")
    assert truncate_like_a_fetcher(follower, leader) == 1
    assert follower.log_end_offset == 5


def test_a_leader_that_knows_no_such_epoch_leaves_the_high_watermark(tmp_path: Path) -> None:
    follower = open_log(tmp_path, "f")
    fill(follower, [(0, 3), (1, 3)], b"a")
    follower.high_watermark = 5
    assert truncation_offset(follower, -1, -1) == (5, True)
    follower.high_watermark = 0
    assert truncation_offset(follower, -1, -1) == (0, True)
    # an answer beyond the follower's end never grows the log
    assert truncation_offset(follower, 1, 100) == (6, True)


def test_an_old_leader_back_after_an_unclean_election_cuts_below_its_high_watermark(tmp_path: Path) -> None:
    """The old leader acknowledged offsets 4-9 alone (ISR [itself], min.insync.replicas=1) and
    died; a follower holding 0-3 was elected uncleanly at epoch 1 and appended its own 4-6. Back,
    the old leader must drop its 4-9 although its HW (10) covered them: kept, offsets 4-6 would
    hold other records than the leader's, and it would append the leader's 7, 8, ... after its
    own (the divergence tests/cluster/faults/test_lone_leader.py found end to end)."""
    old, new = open_log(tmp_path, "old"), open_log(tmp_path, "new")
    fill(old, [(0, 10)], b"a")
    old.high_watermark = 10
    fill(new, [(0, 4)], b"a")
    new.maybe_assign_epoch_start_offset(1, 4)
    fill(new, [(1, 3)], b"b")
    assert new.end_offset_for_epoch(0) == (0, 4)
    assert truncation_offset(old, 0, 4) == (4, True)
    assert truncate_like_a_fetcher(old, new) == 1
    assert old.log_end_offset == 4 and old.high_watermark == 4
    # then it fetches the new leader's records from 4: one log again
    for batch_offset in range(4, 7):
        old.append_as_follower(build_batch([(1000 + batch_offset, None, b"b%d" % batch_offset, ())],
                                           base_offset=batch_offset, partition_leader_epoch=1), 0)
    assert old.latest_epoch() == 1 and old.end_offset_for_epoch(0) == (0, 4)


def test_a_first_round_may_cut_below_the_high_watermark_before_a_second(tmp_path: Path) -> None:
    old, new = open_log(tmp_path, "old"), open_log(tmp_path, "new")
    fill(old, [(0, 2), (2, 6)], b"a")  # led epoch 2 alone from offset 2 to 7
    old.high_watermark = 8
    fill(new, [(0, 2)], b"a")
    fill(new, [(1, 1)], b"x")  # offset 2 from an epoch-1 leader the old one never followed
    new.maybe_assign_epoch_start_offset(3, 3)  # elected uncleanly at epoch 3
    fill(new, [(3, 2)], b"c")
    # asked for epoch 2, the new leader answers epoch 1 ending at 3; the old leader has no
    # epoch 1, its epoch 0 ends at 2: cut there (below its HW) and ask again with epoch 0
    assert new.end_offset_for_epoch(2) == (1, 3)
    assert truncation_offset(old, 1, 3) == (2, False)
    assert truncate_like_a_fetcher(old, new) == 2
    assert old.log_end_offset == 2 and old.high_watermark == 2
