"""Truncation from the fetch response (KIP-320, Kafka 2.7+).

The leader's rule (`Partition.diverging_epoch`, Kafka's Partition.readRecords) for each case,
then a follower's fetcher against a leader in the same trio run (in_process_leader.py: node 1's
real Fetch handler and session cache, the codec both ways) on virtual time: after makeFollower
it fetches at once with its latest epoch, cuts its log where the leader's diverging epoch says
(the same rules as the OffsetForLeaderEpoch rounds: `truncation_offset`) and ends byte for byte
the leader's, with no OffsetForLeaderEpoch request at all.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from pybroker.log.config import LogConfig
from pybroker.log.segment import LogSegment
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.replication.fetch_params import FETCH_LOG_END, FetchParams, LogRead
from pybroker.replication.replica_fetcher_manager import ReplicaFetcherManager
from pybroker.replication.replica_manager import ReplicaManager

from .in_process_leader import InProcessLeader, node_config, open_logs, open_node, register, write

TID = b"\x0b" * 16
OLE = ApiKey.OFFSET_FOR_LEADER_EPOCH


def segments(rm: ReplicaManager) -> bytes:
    p = rm.get_partition("t", 0)
    assert p is not None
    return b"".join(f.read_bytes() for f in sorted(Path(p.log.dir).glob("*.log")))


# ---------------------------------------------------------------------------- the leader's answer

def test_the_leader_answers_a_diverging_epoch_as_kafkas_read_records(tmp_path: Path) -> None:
    """Leader epoch cache [(0, 0), (2, 4), (3, 7)], log end 7: epoch 0 holds 0-3, epoch 2 4-6,
    epoch 3 (this leader's, makeLeader) nothing yet."""

    async def main() -> None:
        cfg = node_config(1, tmp_path)
        lm = open_logs(cfg, 1)
        write(lm.get_or_create_log("t", 0, TID), [(0, 4), (2, 3)], b"a")
        image = MetadataImage()
        register(image, 1)
        register(image, 2, with_endpoint=False)
        image.replay(m.TopicRecord(name="t", topic_id=TID))
        image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2], isr=[1, 2], leader=1,
                                       leader_epoch=3, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        async with trio.open_nursery() as nursery:
            rm = await open_node(cfg, lm, image, nursery)
            p = rm.get_partition("t", 0)
            assert p is not None and p.is_leader
            assert p.log.leader_epoch_cache.entries() == [(0, 0), (2, 4), (3, 7)]
            def d(_p: Any, epoch: int, offset: int) -> tuple[int, tuple[int, int] | None]:
                return p.diverging_epoch(epoch, offset)

            # same epoch, the fetch offset within it: no divergence
            assert d(p, 3, 7) == (0, None)
            assert d(p, 2, 7) == (0, None)  # epoch 2 ends where 3 starts: at 7
            assert d(p, 0, 4) == (0, None)
            assert d(p, -1, 5) == (0, None)  # no last fetched epoch (a consumer, an old follower)
            # the fetch offset past the end of its epoch here: the follower has records of
            # epoch 0 beyond 3 that this log replaced with epoch 2's
            assert d(p, 0, 6) == (0, (0, 4))
            # an older epoch ending earlier: epoch 1 never was here; the largest epoch <= 1 is
            # 0, which ends at 4
            assert d(p, 1, 6) == (0, (0, 4))
            assert d(p, 1, 3) == (0, (0, 4))  # even at an offset below that end: the epoch differs
            # an epoch the cache cannot place (larger than any here), or a fetch offset below
            # the log start: OFFSET_OUT_OF_RANGE, whatever the epochs say
            assert d(p, 5, 7) == (Errors.OFFSET_OUT_OF_RANGE, None)
            p.log.high_watermark = 7
            p.log.increment_log_start_offset(2)
            assert d(p, 0, 1) == (Errors.OFFSET_OUT_OF_RANGE, None)
            # a diverging read carries the offsets and no records, even with data after it, and
            # is not taken as the follower's log end
            r = LogRead(p, 6, 1 << 20, last_fetched_epoch=0)
            follower = FetchParams(replica_id=2, isolation=FETCH_LOG_END)
            assert rm.read_from_log(follower, [r]) == 0
            assert r.diverging_epoch == (0, 4) and r.error_code == 0
            assert r.regions is None and r.size == 0 and r.high_watermark == p.log.high_watermark
            assert r.log_start_offset == 2 and p.remote[2].log_end_offset == -1
            nursery.cancel_scope.cancel()
        lm.shutdown(0, {})

    trio.run(main)


# ---------------------------------------------------------------------------- a follower's fetcher

async def follow(tmp_path: Path, leader_epochs: list[tuple[int, int]], follower_epochs: list[tuple[int, int]],
                 leader_epoch: int, *, follower_hw: int | None = None, follower_led: int | None = None,
                 on_fetch: bool = True, follower_segment_bytes: int | None = None
                 ) -> tuple[InProcessLeader, ReplicaManager, ReplicaManager]:
    """Node 1 leads t-0 at `leader_epoch` with a log of `leader_epochs` ((epoch, count) of
    one-record batches); node 2 follows with a log of `follower_epochs`: "a" records while they
    match the leader's, "x" ones after; `follower_led`: node 2 led that epoch from its log end
    and wrote nothing. Runs until node 2 has the leader's log end and high watermark. Returns
    the leader stand-in and both replica managers (their logs still open: `shut`)."""
    cfg1 = node_config(1, tmp_path / "n1")
    cfg2 = node_config(2, tmp_path / "n2", **{"replica.fetch.wait.max.ms": "500"})
    lm1, lm2 = open_logs(cfg1, 1), open_logs(cfg2, 2)
    leader_log = lm1.get_or_create_log("t", 0, TID)
    follower_log = lm2.get_or_create_log("t", 0, TID, None if follower_segment_bytes is None
                                         else LogConfig(segment_bytes=follower_segment_bytes))
    write(leader_log, leader_epochs, b"a")
    leader_batches = [e for e, n in leader_epochs for _ in range(n)]
    for i, epoch in enumerate(e for e, n in follower_epochs for _ in range(n)):
        shared = i < len(leader_batches) and leader_batches[i] == epoch and follower_log.log_end_offset == i
        write(follower_log, [(epoch, 1)], b"a" if shared else b"x")
    if follower_led is not None:
        follower_log.maybe_assign_epoch_start_offset(follower_led, follower_log.log_end_offset)
    image = MetadataImage()
    register(image, 1, with_endpoint=False)  # no endpoint yet: node 2's fetcher waits for one
    register(image, 2, with_endpoint=False)
    image.replay(m.TopicRecord(name="t", topic_id=TID))
    image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2], isr=[1, 2], leader=1,
                                   leader_epoch=leader_epoch, partition_epoch=0, removing_replicas=[],
                                   adding_replicas=[]))
    saved = ReplicaFetcherManager.truncation_on_fetch
    ReplicaFetcherManager.truncation_on_fetch = on_fetch
    try:
        async with trio.open_nursery() as nursery:
            rm1 = await open_node(cfg1, lm1, image, nursery)
            leader = InProcessLeader(rm1)
            rm2 = await open_node(cfg2, lm2, image, nursery, lambda leader_id, fetcher_id: leader)
            p1, p2 = rm1.get_partition("t", 0), rm2.get_partition("t", 0)
            assert p1 is not None and p1.is_leader and p2 is not None and not p2.is_leader
            if follower_hw is not None:
                p2.log.high_watermark = follower_hw
            register(image, 1)  # now the fetcher finds its leader
            with trio.fail_after(600):  # virtual seconds
                while True:
                    if p2.log.log_end_offset == p1.log.log_end_offset \
                            and p2.log.high_watermark == p1.log.high_watermark == p1.log.log_end_offset:
                        break
                    await trio.sleep(0.05)
            rm2.fetcher_manager.shutdown()
            nursery.cancel_scope.cancel()
    finally:
        ReplicaFetcherManager.truncation_on_fetch = saved
    return leader, rm1, rm2


def run(test: Callable[[], Awaitable[None]]) -> None:
    # time jumps only once the run has been idle for 20 real ms: with a threshold of 0 it would
    # race ahead while a worker thread (the truncation's file work, log creation) runs
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0.02))


def shut(*rms: ReplicaManager) -> None:
    for rm in rms:
        rm.log_manager.shutdown(0, {})


def asked(leader: InProcessLeader) -> list[tuple[int, int]]:
    """(fetch offset, last fetched epoch) of t-0 in each Fetch that named it."""
    return [(fp.fetch_offset, fp.last_fetched_epoch) for req, _ in leader.fetches for t in req.topics
            for fp in t.partitions]


def test_a_stale_tail_of_the_same_epoch_is_cut_from_the_fetch_response(tmp_path: Path) -> None:
    async def main() -> None:
        # both logs hold 0-4 of epoch 0; the follower also 5-7 of epoch 0 that the leader lost
        # (an acks=1 tail); the leader leads epoch 1 from 5 and wrote 5-6 since
        leader, rm1, rm2 = await follow(tmp_path, [(0, 5), (1, 2)], [(0, 8)], 1)
        assert leader.requests[OLE] == 0 and leader.requests[ApiKey.LIST_OFFSETS] == 0
        assert asked(leader)[:2] == [(8, 0), (5, 0)]  # at once with its epoch; then from the cut
        assert leader.diverged == [(0, 5)]
        assert segments(rm2) == segments(rm1)
        assert rm2.get_partition("t", 0).log.leader_epoch_cache.entries() == [(0, 0), (1, 5)]
        shut(rm1, rm2)

    run(main)


def test_a_diverging_fetch_is_not_taken_as_the_followers_log_end(tmp_path: Path) -> None:
    async def main() -> None:
        leader, rm1, rm2 = await follow(tmp_path, [(0, 5), (1, 2)], [(0, 8)], 1)
        # the leader recorded node 2's fetches from the cut on, never offset 8 (Kafka's
        # fetchRecords: no updateFollowerFetchState with a diverging epoch)
        p1 = rm1.get_partition("t", 0)
        assert p1.remote[2].log_end_offset == 7 and p1.high_watermark == 7
        shut(rm1, rm2)

    run(main)


def test_an_epoch_the_leader_never_had_takes_a_second_diverging_answer(tmp_path: Path) -> None:
    async def main() -> None:
        # the leader: epoch 0 (0-1), epoch 2 (2-4), leads epoch 4 from 5; the follower: epoch 0
        # (0-1) then epoch 3 (2-5), which the leader never had. Asked with epoch 3, the leader
        # answers (2, 5); the follower has no epoch 2: it cuts at the end of its epoch 0 (2) and
        # asks with epoch 0, which the leader takes (its epoch 0 ends at 2 too)
        leader, rm1, rm2 = await follow(tmp_path, [(0, 2), (2, 3)], [(0, 2), (3, 4)], 4)
        assert leader.requests[OLE] == 0
        assert leader.diverged == [(2, 5)]
        assert asked(leader)[:2] == [(6, 3), (2, 0)]
        assert segments(rm2) == segments(rm1)
        shut(rm1, rm2)

    run(main)


def test_an_old_leader_back_after_an_unclean_election_cuts_below_its_high_watermark(tmp_path: Path) -> None:
    async def main() -> None:
        # the old leader committed 0-9 of epoch 0 alone (HW 10); a replica holding 0-3 was elected
        # uncleanly at epoch 1 and wrote 4-6: the old leader keeps 0-3 only, then takes 4-6
        leader, rm1, rm2 = await follow(tmp_path, [(0, 4), (1, 3)], [(0, 10)], 1, follower_hw=10)
        assert leader.requests[OLE] == 0
        assert leader.diverged == [(0, 4)]
        assert segments(rm2) == segments(rm1)
        assert rm2.get_partition("t", 0).log.log_end_offset == 7
        shut(rm1, rm2)

    run(main)


def test_a_replica_that_led_an_epoch_without_writing_stops_diverging(tmp_path: Path) -> None:
    async def main() -> None:
        # node 2 led epoch 1 from 3 and wrote nothing (its cache ends (1, 3), at its log end);
        # node 1 leads epoch 2 from 3 and wrote 3-4. Asked with epoch 1, the leader answers (0, 3):
        # no record to cut, but the empty epoch leaves node 2's cache (Kafka's truncateTo does
        # the same), or node 2 would ask with epoch 1 again, and be answered (0, 3), for ever
        leader, rm1, rm2 = await follow(tmp_path, [(0, 3), (2, 2)], [(0, 3)], 2, follower_led=1)
        assert leader.diverged == [(0, 3)]
        assert asked(leader)[:2] == [(3, 1), (3, 0)]
        assert segments(rm2) == segments(rm1)
        shut(rm1, rm2)

    run(main)


def test_without_truncation_on_fetch_the_follower_asks_offset_for_leader_epoch_first(tmp_path: Path) -> None:
    async def main() -> None:
        leader, rm1, rm2 = await follow(tmp_path, [(0, 5), (1, 2)], [(0, 8)], 1, on_fetch=False)
        assert leader.requests[OLE] == 1  # the round trip before Kafka 2.7
        assert leader.diverged == [] and {e for _, e in asked(leader)} == {-1}
        assert segments(rm2) == segments(rm1)
        shut(rm1, rm2)

    run(main)


def test_the_truncations_file_work_runs_in_worker_threads(tmp_path: Path, monkeypatch: Any) -> None:
    """The follower's stale tail spans several segments: the log is cut on the event loop, the
    segments above the cut are removed and the last one's file cut in worker threads."""
    loop_thread = threading.current_thread()
    where: dict[str, list[bool]] = {"delete": [], "cut": []}
    delete, cut = LogSegment.delete, LogSegment.complete_truncation

    def recording_delete(self: LogSegment) -> None:
        where["delete"].append(threading.current_thread() is loop_thread)
        delete(self)

    def recording_cut(self: LogSegment) -> None:
        where["cut"].append(threading.current_thread() is loop_thread)
        cut(self)

    monkeypatch.setattr(LogSegment, "delete", recording_delete)
    monkeypatch.setattr(LogSegment, "complete_truncation", recording_cut)

    async def main() -> None:
        leader, rm1, rm2 = await follow(tmp_path, [(0, 5), (1, 3)], [(0, 20)], 1, follower_segment_bytes=300)
        assert leader.diverged == [(0, 5)] and segments(rm2) == segments(rm1)
        assert where["cut"] == [False]  # one cut, in a worker thread
        assert where["delete"] and not any(where["delete"])  # the stale segments, all off the loop
        shut(rm1, rm2)

    run(main)
