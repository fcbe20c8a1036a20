"""A follower starts fetching a partition it is given within a round trip (replica_fetcher.py).

Node 2 follows t-0 from node 1 (in_process_leader.py: node 1's real Fetch handler, session cache
and fetch purgatory, the codec both ways) on virtual time, with replica.fetch.wait.max.ms and
replica.fetch.backoff.ms of 10 s (Kafka's are 500 ms and 1 s), and a task waking every 50
virtual ms, so that virtual time creeps while a worker thread creates a log on a busy machine
rather than jumping to the held Fetch's deadline. Once the
leader holds node 2's Fetch in its purgatory
(nothing new for t-0), node 1 creates u-0 and writes a record to it, then node 2 learns of u-0:

- the held Fetch does not name u-0; the fetcher abandons it and sends one that does, so node 2
  has the record while the held Fetch is still unanswered (it used to wait for its answer: up to
  replica.fetch.wait.max.ms, and the first write on a new topic as long for its high watermark);
- when node 2 learns of u-0 before node 1 (the same metadata commit reaches nodes at different
  moments), node 1 answers that it has no such partition; node 2 asks again after 10 ms, not
  after replica.fetch.backoff.ms, and has the record soon after node 1 applies the commit;
- a leader whose image lacks the topic a follower's Fetch names answers that Fetch at once
  (server/fetch.py), rather than holding it for the follower's other partitions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest
from pybroker.replication.replica_manager import ReplicaManager

from .in_process_leader import (
    InProcessLeader,
    node_config,
    open_logs,
    open_node,
    register,
    write,
)

T_ID = b"\x0c" * 16
U_ID = b"\x0d" * 16
WAIT_MAX_S = 10.0  # replica.fetch.wait.max.ms
BACKOFF_S = 10.0  # replica.fetch.backoff.ms
TICK_S = 0.05  # the largest jump of virtual time while the run waits for a worker thread


class Leader(InProcessLeader):
    """Also notes which Fetches (by index in `fetches`) were answered, not abandoned."""

    def __init__(self, rm: ReplicaManager) -> None:
        super().__init__(rm)
        self.answered: set[int] = set()

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        index = len(self.fetches)
        resp = await super().request(api_key, version, body)
        if api_key == ApiKey.FETCH:
            self.answered.add(index)
        return resp


def partition_records(topic: str, topic_id: bytes) -> list[object]:
    return [m.TopicRecord(name=topic, topic_id=topic_id),
            m.PartitionRecord(partition_id=0, topic_id=topic_id, replicas=[1, 2], isr=[1, 2], leader=1,
                              leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[])]


async def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    with trio.fail_after(timeout_s):  # virtual seconds
        while True:
            if check():
                return
            await trio.sleep(TICK_S)


def fetches_naming(leader: InProcessLeader, topic_id: bytes) -> int:
    """How many of the Fetches the leader was sent name `topic_id`."""
    return sum(1 for req, _ in leader.fetches if any(t.topic_id == topic_id for t in req.topics))


async def tick() -> None:
    while True:  # noqa: ASYNC110 - a clock's tick, not a wait for a condition
        await trio.sleep(TICK_S)


def run_pair(tmp_path: Path, body: Callable[[ReplicaManager, ReplicaManager, Leader, MetadataImage],
                                            Awaitable[None]]) -> None:
    """Node 1 leads t-0 (one record), node 2 follows it and has caught up; then `body`."""
    async def main() -> None:
        settings = {"replica.fetch.wait.max.ms": str(int(WAIT_MAX_S * 1000)),
                    "replica.fetch.backoff.ms": str(int(BACKOFF_S * 1000))}
        cfg1, cfg2 = node_config(1, tmp_path / "n1", **settings), node_config(2, tmp_path / "n2", **settings)
        lm1, lm2 = open_logs(cfg1, 1), open_logs(cfg2, 2)
        image = MetadataImage()
        register(image, 1, with_endpoint=False)  # no endpoint yet: node 2's fetcher waits for one
        register(image, 2, with_endpoint=False)
        for r in partition_records("t", T_ID):
            image.replay(r)
        async with trio.open_nursery() as nursery:
            rm1 = await open_node(cfg1, lm1, image, nursery)
            leader = Leader(rm1)
            rm2 = await open_node(cfg2, lm2, image, nursery, leader_end_points=lambda _leader, _fetcher: leader)
            p1, p2 = rm1.get_partition("t", 0), rm2.get_partition("t", 0)
            assert p1 is not None and p2 is not None
            write(p1.log, [(0, 1)], b"t")
            register(image, 1)  # now the fetcher finds its leader
            await wait_for(lambda: p2.log.log_end_offset == 1)
            # the follower's next Fetch finds nothing new: the leader holds it in its purgatory
            await wait_for(lambda: rm1.fetch_purgatory.watching(("t", 0)))
            nursery.start_soon(tick)
            await body(rm1, rm2, leader, image)
            rm2.fetcher_manager.shutdown()
            nursery.cancel_scope.cancel()
        for rm in (rm1, rm2):
            rm.log_manager.shutdown(0, {})

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.02))


def test_a_new_partition_is_fetched_without_waiting_for_the_fetch_the_leader_holds(tmp_path: Path) -> None:
    async def body(rm1: ReplicaManager, rm2: ReplicaManager, leader: Leader, image: MetadataImage) -> None:
        records = partition_records("u", U_ID)
        for r in records:
            image.replay(r)
        await rm1.apply_metadata_records(records)
        u1 = rm1.get_partition("u", 0)
        assert u1 is not None and u1.is_leader
        write(u1.log, [(0, 1)], b"u")
        held_since, held = trio.current_time(), len(leader.fetches) - 1
        assert rm1.fetch_purgatory.watching(("t", 0))  # still held: it would answer after WAIT_MAX_S
        await rm2.apply_metadata_records(records)
        u2 = rm2.get_partition("u", 0)
        assert u2 is not None and not u2.is_leader
        await wait_for(lambda: u2.log.log_end_offset == 1)
        assert held not in leader.answered, "the new partition was asked only after the held Fetch's answer"
        assert trio.current_time() - held_since < WAIT_MAX_S / 2

    run_pair(tmp_path, body)


def test_a_leader_behind_the_followers_metadata_is_asked_again_within_milliseconds(tmp_path: Path) -> None:
    async def body(rm1: ReplicaManager, rm2: ReplicaManager, leader: Leader, image: MetadataImage) -> None:
        records = partition_records("u", U_ID)
        for r in records:
            image.replay(r)
        asked_before = fetches_naming(leader, U_ID)
        await rm2.apply_metadata_records(records)  # the follower first: node 1 has no u-0 yet
        u2 = rm2.get_partition("u", 0)
        assert u2 is not None
        fetcher = rm2.fetcher_manager.fetchers[(1, 0)]
        state = fetcher.partitions[("u", 0)]
        # the leader answered u-0 with an error: the partition waits before it is asked again
        await wait_for(lambda: state.delayed_until > trio.current_time())
        assert fetches_naming(leader, U_ID) > asked_before
        assert rm1.get_partition("u", 0) is None
        await rm1.apply_metadata_records(records)
        u1 = rm1.get_partition("u", 0)
        assert u1 is not None and u1.is_leader
        write(u1.log, [(0, 1)], b"u")
        applied = trio.current_time()
        await wait_for(lambda: u2.log.log_end_offset == 1)
        assert trio.current_time() - applied < 1.0, \
            "the follower waited replica.fetch.backoff.ms after the leader's NOT_LEADER / UNKNOWN_TOPIC answer"

    run_pair(tmp_path, body)


def test_a_follower_fetch_naming_a_topic_the_leader_lacks_is_answered_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = node_config(1, tmp_path / "n1")
        lm = open_logs(cfg, 1)
        image = MetadataImage()
        register(image, 1)
        register(image, 2)
        for r in partition_records("t", T_ID):
            image.replay(r)
        async with trio.open_nursery() as nursery:
            rm = await open_node(cfg, lm, image, nursery)
            leader = InProcessLeader(rm)

            def asking(topic_id: bytes) -> FetchRequest.FetchTopic:
                return FetchRequest.FetchTopic(topic_id=topic_id, partitions=[FetchRequest.FetchPartition(
                    partition=0, current_leader_epoch=0, fetch_offset=0, last_fetched_epoch=-1,
                    log_start_offset=0, partition_max_bytes=1 << 20)])

            # t-0 has nothing past offset 0: alone, it would be held for max_wait_ms
            req = FetchRequest(replica_id=-1, replica_state=FetchRequest.ReplicaState(replica_id=2, replica_epoch=12),
                               max_wait_ms=int(WAIT_MAX_S * 1000), min_bytes=1, max_bytes=1 << 20,
                               isolation_level=0, session_id=0, session_epoch=0,
                               topics=[asking(T_ID), asking(U_ID)], forgotten_topics_data=[], rack_id="")
            asked = trio.current_time()
            resp = await leader.request(ApiKey.FETCH, 17, req)
            assert trio.current_time() - asked < WAIT_MAX_S / 2, "held for the follower's known partition"
            codes = {t.topic_id: [p.error_code for p in t.partitions] for t in resp.responses}
            assert codes[U_ID] == [Errors.UNKNOWN_TOPIC_ID]
            nursery.cancel_scope.cancel()
        lm.shutdown(0, {})

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.02))
