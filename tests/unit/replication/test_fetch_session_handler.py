"""A follower's fetch session (KIP-227 client side, Kafka's FetchSessionHandler).

First the handler alone: what a full and an incremental request name (new partitions, changed
ones, forgotten ones, a new topic id), and how each answer moves the next request's metadata.
Then a follower's fetcher of many partitions against a leader in the same trio run
(in_process_leader.py: node 1's real Fetch handler and session cache, the codec both ways):
one full request, then requests naming only what moved; a session error or a broken exchange
brings a full request back; a leader without a free session slot is asked in full every time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors
from pybroker.records.batch import build_batch
from pybroker.replication.fetch_session_handler import (
    FetchSessionHandler,
    PartitionData,
)
from pybroker.replication.replica_fetcher import ReplicaFetcher
from pybroker.replication.replica_manager import ReplicaManager

from .in_process_leader import InProcessLeader, node_config, open_logs, open_node, register

A, B = b"\x0a" * 16, b"\x0b" * 16


def pd(offset: int, topic_id: bytes = A, epoch: int = 0) -> PartitionData:
    return PartitionData(topic_id, offset, 0, 1 << 20, 5, epoch)


def response(handler: FetchSessionHandler, parts: list[tuple[str, int]], session_id: int, error: int = 0,
             throttle_ms: int = 0) -> Any:
    ids = {name: tid for tid, name in handler.session_topic_names.items()}
    topics = [m.FetchResponse.FetchableTopicResponse(topic_id=ids[t], partitions=[
        m.FetchResponse.PartitionData(partition_index=p)]) for t, p in parts]
    return m.FetchResponse(throttle_time_ms=throttle_ms, error_code=error, session_id=session_id, responses=topics)


# ---------------------------------------------------------------------------- the handler alone

def test_a_full_request_then_incremental_ones_naming_only_what_changed() -> None:
    h = FetchSessionHandler(1)
    b = h.new_builder()
    for p in range(3):
        b.add(("a", p), pd(10))
    b.add(("b", 0), pd(20, B))
    full = b.build()
    assert full.is_full and (full.session_id, full.epoch) == (0, 0)
    assert list(full.to_send) == [("a", 0), ("a", 1), ("a", 2), ("b", 0)] and not full.to_forget
    assert h.handle_response(response(h, list(full.to_send), 77))
    assert (h.session_id, h.epoch) == (77, 1)

    b = h.new_builder()  # nothing moved: an incremental request naming nothing
    for p in range(3):
        b.add(("a", p), pd(10))
    b.add(("b", 0), pd(20, B))
    idle = b.build()
    assert not idle.is_full and (idle.session_id, idle.epoch) == (77, 1)
    assert idle.to_send == {} and idle.to_forget == [] and len(idle.session_partitions) == 4
    assert h.handle_response(response(h, [], 77)) and h.epoch == 2

    # a-1 appended (its offset moved), a-2 is no longer wanted (another leader, a backoff), a-3
    # is new, b-0's last fetched epoch moved (a truncation): sent, forgotten, sent, sent
    b = h.new_builder()
    b.add(("a", 0), pd(10))
    b.add(("a", 1), pd(11))
    b.add(("a", 3), pd(0))
    b.add(("b", 0), pd(20, B, epoch=1))
    inc = b.build()
    assert list(inc.to_send) == [("a", 3), ("a", 1), ("b", 0)]  # new ones first, then changed
    assert inc.to_forget == [(A, ("a", 2))] and inc.to_replace == []
    assert list(inc.session_partitions) == [("a", 0), ("a", 1), ("b", 0), ("a", 3)]
    assert (inc.session_id, inc.epoch) == (77, 2)
    # an incremental answer names only partitions with news; one outside the session is refused
    assert h.handle_response(response(h, [("a", 1)], 77)) and h.epoch == 3


def test_a_topic_made_again_is_forgotten_under_its_old_id_and_sent_under_the_new() -> None:
    h = FetchSessionHandler(1)
    b = h.new_builder()
    b.add(("a", 0), pd(10))
    assert h.handle_response(response(h, list(b.build().to_send), 5))
    b = h.new_builder()
    b.add(("a", 0), pd(0, B))
    inc = b.build()
    assert inc.to_replace == [(A, ("a", 0))] and inc.to_send == {("a", 0): pd(0, B)} and inc.to_forget == []


def test_each_answer_moves_the_next_requests_metadata_as_kafkas() -> None:
    def session(id_: int = 9) -> FetchSessionHandler:
        h = FetchSessionHandler(1)
        b = h.new_builder()
        b.add(("a", 0), pd(1))
        b.build()
        assert h.handle_response(response(h, [("a", 0)], id_))
        return h

    h = session()
    assert not h.handle_response(response(h, [], 0, Errors.FETCH_SESSION_ID_NOT_FOUND))
    assert (h.session_id, h.epoch, h.is_full) == (0, 0, True)  # a new session, from scratch
    h = session()
    assert not h.handle_response(response(h, [], 0, Errors.INVALID_FETCH_SESSION_EPOCH))
    assert (h.session_id, h.epoch, h.is_full) == (9, 0, True)  # close 9, full, open a new one
    h = session()
    h.handle_error()  # a reset connection or a timeout
    assert (h.session_id, h.epoch) == (9, 0)
    h = session()
    assert h.handle_response(response(h, [], 0)) and (h.session_id, h.epoch) == (0, 0)  # closed by the leader
    h = session()
    bad = m.FetchResponse(session_id=9, responses=[m.FetchResponse.FetchableTopicResponse(topic_id=B, partitions=[
        m.FetchResponse.PartitionData(partition_index=0)])])
    assert not h.handle_response(bad) and (h.session_id, h.epoch) == (9, 0)  # a topic outside the session
    # a full answer must name every partition asked
    h = FetchSessionHandler(1)
    b = h.new_builder()
    b.add(("a", 0), pd(1))
    b.add(("a", 1), pd(1))
    b.build()
    assert not h.handle_response(response(h, [("a", 0)], 4)) and (h.session_id, h.epoch) == (0, 0)
    # the leader had no slot for a session: full again, and again
    b = h.new_builder()
    b.add(("a", 0), pd(1))
    b.build()
    assert h.handle_response(response(h, [("a", 0)], 0)) and (h.session_id, h.epoch, h.is_full) == (0, 0, True)
    # KIP-219: an empty full answer with a throttle time is no session, and no error logged
    b = h.new_builder()
    b.add(("a", 0), pd(1))
    b.build()
    assert not h.handle_response(response(h, [], 0, throttle_ms=100)) and h.is_full


def test_epochs_wrap_to_one() -> None:
    h = FetchSessionHandler(1)
    b = h.new_builder()
    b.add(("a", 0), pd(1))
    b.build()
    h.handle_response(response(h, [("a", 0)], 3))
    h.epoch = 2**31 - 1
    b = h.new_builder()
    b.add(("a", 0), pd(1))
    b.build()
    assert h.handle_response(response(h, [], 3)) and h.epoch == 1


# ---------------------------------------------------------------------------- a fetcher, a leader

PARTITIONS = 40


async def two_nodes(tmp_path: Path, nursery: trio.Nursery, slots: int = 1000
                    ) -> tuple[InProcessLeader, ReplicaManager, ReplicaManager, ReplicaFetcher]:
    """Node 1 leads topics "a" and "b" (PARTITIONS each), node 2 follows them all; node 2's fetcher
    is taken off its loop, so the test drives each request (`fetch_round`)."""
    cfg1 = node_config(1, tmp_path / "n1")
    cfg2 = node_config(2, tmp_path / "n2", **{"replica.fetch.wait.max.ms": "0"})
    image = MetadataImage()
    register(image, 1, with_endpoint=False)
    register(image, 2, with_endpoint=False)
    for name, tid in (("a", A), ("b", B)):
        image.replay(m.TopicRecord(name=name, topic_id=tid))
        for p in range(PARTITIONS):
            image.replay(m.PartitionRecord(partition_id=p, topic_id=tid, replicas=[1, 2], isr=[1, 2], leader=1,
                                           leader_epoch=0, partition_epoch=0, removing_replicas=[],
                                           adding_replicas=[]))
    rm1 = await open_node(cfg1, open_logs(cfg1, 1), image, nursery)
    rm2 = await open_node(cfg2, open_logs(cfg2, 2), image, nursery)
    running = rm2.fetcher_manager.fetchers[(1, 0)]
    running.cancel_scope.cancel()  # the test drives a fetcher of its own
    leader = InProcessLeader(rm1, slots)
    fetcher = ReplicaFetcher(rm2.fetcher_manager, 1, 0, leader)
    for state in running.partitions.values():
        fetcher.add(state)
    return leader, rm1, rm2, fetcher


async def fetch_round(fetcher: ReplicaFetcher) -> tuple[Any, int]:
    """One Fetch of every fetching partition ready now; the request as the leader decoded it and
    its size on the wire."""
    leader: InProcessLeader = fetcher.leader  # type: ignore[assignment]
    before = len(leader.fetches)
    truncating = [s for s in fetcher.partitions.values() if s.truncating]
    if truncating:  # new, empty logs: no epoch yet, so they keep their (zero) high watermark first
        await fetcher._truncate(truncating)
    ready = [s for s in fetcher.partitions.values() if not s.truncating and s.delayed_until <= trio.current_time()]
    await fetcher._fetch(ready)
    assert len(leader.fetches) == before + 1
    return leader.fetches[-1]


def named(req: Any) -> list[tuple[bytes, int]]:
    return [(t.topic_id, p.partition) for t in req.topics for p in t.partitions]


def run(test: Callable[[], Awaitable[None]]) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_follower_of_many_partitions_names_only_what_moved(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            leader, rm1, rm2, fetcher = await two_nodes(tmp_path, nursery)
            full, full_size = await fetch_round(fetcher)
            assert (full.session_id, full.session_epoch) == (0, 0) and len(named(full)) == 2 * PARTITIONS
            assert leader.fetch_manager.cache.num_sessions == 1
            idle, idle_size = await fetch_round(fetcher)
            assert idle.session_id == fetcher.session.session_id != 0 and idle.session_epoch == 1
            assert named(idle) == [] and idle.forgotten_topics_data == []
            assert idle_size < 80 < 2000 < full_size  # the header, ids, nothing per partition

            # records on the leader's a-7: the leader's incremental answer carries them
            p7 = rm1.get_partition("a", 7)
            rm1.append(p7, bytearray(build_batch([(1000, None, b"v", ())])))
            await fetch_round(fetcher)
            f7 = rm2.get_partition("a", 7)
            assert f7.log.log_end_offset == 1
            assert f7.log.high_watermark == 0
            # then the follower names a-7 alone, at its new offset; that fetch moves the leader's
            # HW, and the answer (naming a-7 alone) brings it
            moved, _ = await fetch_round(fetcher)
            assert named(moved) == [(A, 7)] and moved.topics[0].partitions[0].fetch_offset == 1
            assert moved.session_epoch == 3
            assert f7.log.high_watermark == 1 and rm1.get_partition("a", 7).high_watermark == 1
            quiet, _ = await fetch_round(fetcher)
            assert named(quiet) == []

            # b-3 goes to another fetcher (a leader change): forgotten, and gone from the session
            fetcher.remove(("b", 3))
            forget, _ = await fetch_round(fetcher)
            assert named(forget) == []
            assert [(t.topic_id, t.partitions) for t in forget.forgotten_topics_data] == [(B, [3])]
            session = leader.fetch_manager.cache.get(fetcher.session.session_id)
            assert session is not None and len(session.partitions) == 2 * PARTITIONS - 1
            nursery.cancel_scope.cancel()
        for rm in (rm1, rm2):
            rm.log_manager.shutdown(0, {})

    run(main)


def test_a_session_error_or_a_broken_exchange_brings_a_full_request(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            leader, rm1, rm2, fetcher = await two_nodes(tmp_path, nursery)
            await fetch_round(fetcher)
            first = fetcher.session.session_id
            await fetch_round(fetcher)
            # the leader lost the session (a restart, an eviction): FETCH_SESSION_ID_NOT_FOUND,
            # then a full request asking for a new one, at once (no backoff)
            shard = leader.fetch_manager.cache.shard_for(first)
            assert shard is not None and shard.remove(first) is not None
            lost, _ = await fetch_round(fetcher)
            assert lost.session_id == first and named(lost) == []
            assert all(s.delayed_until == 0.0 for s in fetcher.partitions.values())
            again, _ = await fetch_round(fetcher)
            assert (again.session_id, again.session_epoch) == (0, 0) and len(named(again)) == 2 * PARTITIONS
            second = fetcher.session.session_id
            assert second not in (0, first)
            # a broken exchange (reset, timeout): the next request closes that session and opens
            # another, in full
            leader.fail_next = OSError("connection reset")
            try:
                await fetch_round(fetcher)
            except OSError:
                pass
            after, _ = await fetch_round(fetcher)
            assert (after.session_id, after.session_epoch) == (second, 0) and len(named(after)) == 2 * PARTITIONS
            assert leader.fetch_manager.cache.get(second) is None and leader.fetch_manager.cache.num_sessions == 1
            # an epoch the leader did not expect (a duplicate): INVALID_FETCH_SESSION_EPOCH, full
            fetcher.session.epoch += 5
            await fetch_round(fetcher)
            full, _ = await fetch_round(fetcher)
            assert full.session_epoch == 0 and len(named(full)) == 2 * PARTITIONS
            nursery.cancel_scope.cancel()
        for rm in (rm1, rm2):
            rm.log_manager.shutdown(0, {})

    run(main)


def test_a_leader_without_a_free_session_slot_is_asked_in_full(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            # max.incremental.fetch.session.cache.slots=0 on the leader: no session is ever made
            leader, rm1, rm2, fetcher = await two_nodes(tmp_path, nursery, slots=0)
            for _ in range(3):
                req, _ = await fetch_round(fetcher)
                assert (req.session_id, req.session_epoch) == (0, 0) and len(named(req)) == 2 * PARTITIONS
            assert leader.fetch_manager.cache.num_sessions == 0
            nursery.cancel_scope.cancel()
        for rm in (rm1, rm2):
            rm.log_manager.shutdown(0, {})

    run(main)
