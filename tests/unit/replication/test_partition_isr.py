"""The leader's view of its followers (Partition / ReplicaState): the high watermark rules, ISR
shrink and expansion decisions, on an injected wall clock (numbers, no sleeps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybroker.log.config import LogConfig
from pybroker.log.log import UnifiedLog
from pybroker.records.batch import build_batch
from pybroker.replication.partition import Partition

LAG = 30_000  # replica.lag.time.max.ms


@pytest.fixture
def leader(tmp_path: Path) -> Partition:
    log = UnifiedLog(tmp_path / "t-0", LogConfig(), topic="t", partition=0)
    p = Partition("t", 0, b"\x01" * 16, log, local_id=1, leader_id=1, leader_epoch=3, partition_epoch=0,
                  replicas=[1, 2, 3], isr=[1, 2, 3])
    p.make_leader(now_ms=1_000)
    return p


def append(p: Partition, n: int = 1) -> None:
    for _ in range(n):
        p.log.append_as_leader(bytearray(build_batch([(1000, None, b"v", ())])), p.leader_epoch, 0)


def test_the_high_watermark_waits_for_every_isr_member(leader: Partition) -> None:
    append(leader, 5)
    assert not leader.maybe_increment_high_watermark(1_000, LAG)  # followers' offsets unknown
    leader.update_follower_fetch_state(2, 5, leader.log.log_end_offset, 1_100)
    assert not leader.maybe_increment_high_watermark(1_100, LAG)  # 3 has not fetched yet
    leader.update_follower_fetch_state(3, 2, leader.log.log_end_offset, 1_200)
    assert leader.maybe_increment_high_watermark(1_200, LAG) and leader.high_watermark == 2
    leader.update_follower_fetch_state(3, 5, leader.log.log_end_offset, 1_300)
    assert leader.maybe_increment_high_watermark(1_300, LAG) and leader.high_watermark == 5
    # it never goes back, even when a follower is seen behind (a restarted one)
    leader.update_follower_fetch_state(3, 1, leader.log.log_end_offset, 1_400)
    assert not leader.maybe_increment_high_watermark(1_400, LAG) and leader.high_watermark == 5


def test_a_shrunk_isr_lets_the_high_watermark_move(leader: Partition) -> None:
    append(leader, 4)
    leader.update_follower_fetch_state(2, 4, 4, 1_100)
    leader.update_follower_fetch_state(3, 0, 4, 1_100)
    assert not leader.maybe_increment_high_watermark(1_100, LAG)
    leader.isr = [1, 2]  # the controller accepted the shrink; 3 is far behind (not caught up)
    assert leader.maybe_increment_high_watermark(1_100 + LAG + 1, LAG) and leader.high_watermark == 4


def test_a_pending_expansion_counts_in_the_maximal_isr(leader: Partition) -> None:
    leader.isr = [1, 2]
    append(leader, 3)
    leader.update_follower_fetch_state(2, 3, 3, 1_100)
    leader.update_follower_fetch_state(3, 1, 3, 1_100)
    leader.pending_isr = [1, 2, 3]  # AlterPartition in flight: the HW waits for 3 as well
    assert leader.maximal_isr == [1, 2, 3]
    leader.maybe_increment_high_watermark(1_100, 0)
    assert leader.high_watermark == 1


def test_shrink_picks_the_followers_not_caught_up_within_the_lag(leader: Partition) -> None:
    append(leader, 2)
    leader.update_follower_fetch_state(2, 2, 2, 2_000)  # caught up at 2 s
    leader.update_follower_fetch_state(3, 2, 2, 2_000)
    append(leader, 3)  # the log end is now 5
    leader.update_follower_fetch_state(2, 5, 5, 10_000)  # 2 keeps up; 3 stops fetching
    assert leader.out_of_sync_replicas(2_000 + LAG, LAG) == []
    assert leader.out_of_sync_replicas(2_000 + LAG + 1, LAG) == [3]
    # an idle partition whose follower holds the whole log is in sync however long it waits
    leader.update_follower_fetch_state(3, 5, 5, 40_000)
    assert leader.out_of_sync_replicas(10**9, LAG) == []


def test_a_follower_behind_but_reaching_the_previous_log_end_counts_as_caught_up_then(leader: Partition) -> None:
    append(leader, 10)
    leader.update_follower_fetch_state(2, 4, 10, 5_000)  # behind at 5 s (the log ended at 10)
    append(leader, 10)
    leader.update_follower_fetch_state(2, 10, 20, 7_000)  # reached 10, what the leader had at 5 s
    assert leader.remote[2].last_caught_up_ms == 5_000
    assert 2 not in leader.out_of_sync_replicas(5_000 + LAG, LAG)
    assert 2 in leader.out_of_sync_replicas(5_000 + LAG + 1, LAG)


def test_expansion_needs_the_high_watermark_and_the_epoch_start(tmp_path: Path) -> None:
    log = UnifiedLog(tmp_path / "t-0", LogConfig(), topic="t", partition=0)
    p = Partition("t", 0, b"\x01" * 16, log, local_id=1, leader_id=1, leader_epoch=0, partition_epoch=0,
                  replicas=[1, 2, 3], isr=[1, 2])
    append(p, 4)
    p.leader_epoch = 1
    p.make_leader(0)  # epoch 1 starts at 4
    p.update_follower_fetch_state(2, 4, 4, 10)
    assert p.maybe_increment_high_watermark(10, LAG) and p.high_watermark == 4
    p.update_follower_fetch_state(3, 3, 4, 10)
    assert not p.is_expansion_candidate(3)  # below the HW
    p.update_follower_fetch_state(3, 4, 4, 20)
    assert p.is_expansion_candidate(3)
    assert not p.is_expansion_candidate(2)  # already in the ISR
    assert not p.update_follower_fetch_state(9, 4, 4, 20)  # not a replica


def test_a_caught_up_follower_outside_the_isr_holds_the_hw_only_while_isr_eligible(leader: Partition) -> None:
    # Kafka's maybeIncrementLeaderHW: a caught-up follower outside the ISR holds the HW (it is
    # about to join), unless the controller would refuse it (fenced, shutting down): a broker in
    # controlled shutdown that fetched once on its way out must not hold acks=all produces
    leader.isr = [1, 2]
    append(leader, 2)
    leader.update_follower_fetch_state(3, 2, 2, 1_100)  # 3 caught up at 2
    leader.update_follower_fetch_state(2, 2, 2, 1_100)
    assert leader.maybe_increment_high_watermark(1_100, LAG) and leader.high_watermark == 2
    append(leader, 3)
    leader.update_follower_fetch_state(2, 5, 5, 1_200)  # 3 stays at 2 (it stopped)
    assert not leader.maybe_increment_high_watermark(1_200, LAG, eligible=lambda b: True)
    assert leader.high_watermark == 2  # 3 is still "caught up" (within the lag) and eligible
    assert leader.maybe_increment_high_watermark(1_200, LAG, eligible=lambda b: b != 3)
    assert leader.high_watermark == 5


def test_a_leader_re_elected_at_a_new_epoch_keeps_its_followers_offsets(leader: Partition) -> None:
    """Kafka's resetReplicaState(isNewLeader=false): a leader epoch bump that keeps the leader (a
    replica removed by a reassignment, an election that kept it) keeps the followers' log start
    and end offsets, so the HW moves without waiting for each to fetch again; a new leader
    (is_new_leader) starts from unknown states."""
    append(leader, 4)
    leader.update_follower_fetch_state(2, 4, 4, 1_100, log_start_offset=1)
    leader.update_follower_fetch_state(3, 4, 4, 1_100, log_start_offset=1)
    assert leader.maybe_increment_high_watermark(1_100, LAG) and leader.high_watermark == 4
    append(leader, 2)
    leader.update_follower_fetch_state(2, 6, 6, 1_200)
    leader.leader_epoch, leader.replicas, leader.isr = 4, [1, 2], [1, 2]  # 3 removed
    leader.make_leader(now_ms=2_000, is_new_leader=False)
    assert sorted(leader.remote) == [2]
    state = leader.remote[2]
    assert (state.log_end_offset, state.last_caught_up_ms, state.last_fetch_leader_leo) == (6, 2_000, 6)
    assert leader.maybe_increment_high_watermark(2_000, LAG) and leader.high_watermark == 6
    leader.leader_epoch = 5
    leader.make_leader(now_ms=3_000)  # a new leader: nothing known
    assert leader.remote[2].log_end_offset == -1 and leader.remote[2].log_start_offset == -1


def test_the_high_watermark_stays_while_the_isr_is_under_min_insync(tmp_path: Path) -> None:
    """Kafka's isUnderMinIsr (KIP-966): a leader alone in its ISR with min.insync.replicas=2
    appends (acks=1; an acks=all produce waits and times out) but exposes nothing more to
    consumers: an eligible leader replica elected after it dies may lack those records.
    The effective minimum is min(replicas, min ISR), so a one-replica partition still moves."""
    log = UnifiedLog(tmp_path / "t-0", LogConfig(min_insync_replicas=2), topic="t", partition=0)
    p = Partition("t", 0, b"\x01" * 16, log, local_id=1, leader_id=1, leader_epoch=3, partition_epoch=0,
                  replicas=[1, 2, 3], isr=[1])
    p.make_leader(now_ms=1_000)
    append(p, 4)
    assert not p.maybe_increment_high_watermark(1_100, LAG) and p.high_watermark == 0
    p.isr = [1, 2]  # the follower caught up and the controller took it back in
    p.update_follower_fetch_state(2, 4, 4, 1_200)
    assert p.maybe_increment_high_watermark(1_200, LAG) and p.high_watermark == 4

    single = UnifiedLog(tmp_path / "u-0", LogConfig(min_insync_replicas=2), topic="u", partition=0)
    q = Partition("u", 0, b"\x02" * 16, single, local_id=1, leader_id=1, leader_epoch=0, partition_epoch=0,
                  replicas=[1], isr=[1])
    q.make_leader(now_ms=1_000)
    append(q, 2)
    assert q.maybe_increment_high_watermark(1_100, LAG) and q.high_watermark == 2
