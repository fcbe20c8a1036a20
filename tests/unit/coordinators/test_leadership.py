"""The coordinators follow the leadership of their partitions, on a real one-node broker in
virtual time (trio's MockClock, tests/server/test_virtual_time.py): the leadership of
__consumer_offsets-0 / __transaction_state-0 is moved away from this node and back by hand
(the hosted Partition's leader and epoch, then the coordinator's metadata callback, as the
metadata publisher runs it after a PartitionChangeRecord), and real requests on loopback check
what clients see: NOT_COORDINATOR once resigned (pending joins included, in-flight transaction
state dropped), COORDINATOR_LOAD_IN_PROGRESS while the new leader replays the partition (held by
a gate around the real loader), and the state rebuilt from the log afterwards; a transaction
whose completion was cut by the move is completed by the next leader, with markers carrying
its coordinator epoch (older ones are fenced)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

from pybroker.clock import TrioClock
from pybroker.coordinators import runtime
from pybroker.coordinators.runtime import ShardStatus
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    HeartbeatRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    WriteTxnMarkersRequest,
)
from pybroker.records.batch import build_batch
from pybroker.server.broker import Broker
from tests.server.test_virtual_time import (
    AsyncWire,
    create_topic,
    find_coordinator,
    list_offset,
    produce,
    run_virtual,
)

GROUPS = "__consumer_offsets"
TXNS = "__transaction_state"
OTHER_NODE = 2  # a node that leads the partition once this one resigns


def move_leadership(broker: Broker, topic: str, leader: int, partition: int = 0) -> None:
    """What a PartitionChangeRecord naming a new leader does to this node: the hosted partition
    takes the leader and a bumped epoch, then the coordinators' metadata publishers run."""
    p = broker.replica_manager.get_partition(topic, partition)
    assert p is not None
    p.leader_id = leader
    p.leader_epoch += 1
    broker.group_coordinator.on_metadata()
    broker.txn_coordinator.on_metadata()


class LoadGate:
    """Holds the real loader (runtime.load_shard, a worker thread) until `open()`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.event = threading.Event()
        self.started = threading.Event()
        real = runtime.load_shard

        def gated(*args: Any, **kwargs: Any) -> int:
            self.started.set()
            assert self.event.wait(30), "the test never opened the load gate"
            return real(*args, **kwargs)

        monkeypatch.setattr(runtime, "load_shard", gated)

    def open(self) -> None:
        self.event.set()


async def second_wire(wire: AsyncWire) -> AsyncWire:
    host, port = wire.stream.socket.getpeername()[:2]
    return AsyncWire(await trio.open_tcp_stream(host, port))


async def until(call: Any, retry: tuple[int, ...] = (Errors.COORDINATOR_LOAD_IN_PROGRESS,),
                code: Any = lambda r: r.error_code) -> Any:
    for _ in range(200):
        resp = await call()
        if code(resp) not in retry:
            return resp
        await trio.sleep(0.05)
    raise AssertionError(f"still {code(resp)} after 200 tries")


PROTOCOLS = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]


def join_request(group: str, member_id: str) -> JoinGroupRequest:
    return JoinGroupRequest(group_id=group, session_timeout_ms=300_000, rebalance_timeout_ms=300_000,
                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                            protocols=PROTOCOLS)


def offset_fetch(group: str, topic: str) -> OffsetFetchRequest:
    return OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id=group, topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])],
        require_stable=False)


def test_a_group_coordinator_resigns_with_not_coordinator_and_reloads_its_partition(monkeypatch) -> None:
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        group, topic = "g-move", "t-move"
        await create_topic(wire, topic)
        await find_coordinator(wire, group, 0)
        first = await until(lambda: wire.request(ApiKey.JOIN_GROUP, 5, join_request(group, "")))
        assert first.error_code == Errors.MEMBER_ID_REQUIRED
        a = first.member_id
        joined = await wire.request(ApiKey.JOIN_GROUP, 5, join_request(group, a))
        assert joined.error_code == 0 and joined.generation_id == 1
        synced = await wire.request(ApiKey.SYNC_GROUP, 3, SyncGroupRequest(
            group_id=group, generation_id=1, member_id=a, group_instance_id=None,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=a, assignment=b"")]))
        assert synced.error_code == 0
        commit = await wire.request(ApiKey.OFFSET_COMMIT, 8, OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=1, member_id=a, group_instance_id=None,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=7,
                                                                 committed_leader_epoch=-1,
                                                                 committed_metadata="m")])]))
        assert commit.topics[0].partitions[0].error_code == 0

        # member B's join waits for the rebalance that A has not rejoined yet
        wire_b = await second_wire(wire)
        b = (await wire_b.request(ApiKey.JOIN_GROUP, 5, join_request(group, ""))).member_id
        pending: list[Any] = []

        async def join_b() -> None:
            pending.append(await wire_b.request(ApiKey.JOIN_GROUP, 5, join_request(group, b)))

        with trio.fail_after(60):  # virtual seconds: an unanswered join fails the test, not hangs it
            async with trio.open_nursery() as nursery:
                nursery.start_soon(join_b)
                shard = broker.group_coordinator.runtime.shards[0].shard
                for _ in range(100):  # until B's join is parked in the rebalance
                    if shard.groups.group(group).state.name == "PREPARING_REBALANCE":
                        break
                    await trio.sleep(0.01)
                assert shard.groups.group(group).state.name == "PREPARING_REBALANCE"
                move_leadership(broker, GROUPS, OTHER_NODE)  # this node resigns
        assert pending[0].error_code == Errors.NOT_COORDINATOR  # the pending join is answered at once
        assert broker.group_coordinator.runtime.shards == {}
        hb = await wire.request(ApiKey.HEARTBEAT, 3, HeartbeatRequest(group_id=group, generation_id=1,
                                                                      member_id=a, group_instance_id=None))
        assert hb.error_code == Errors.NOT_COORDINATOR
        fetched = await wire.request(ApiKey.OFFSET_FETCH, 8, offset_fetch(group, topic))
        assert fetched.groups[0].error_code == Errors.NOT_COORDINATOR
        assert fetched.groups[0].topics == []  # a group-level error carries no topics, as in Kafka
        single = await wire.request(ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(
            group_id=group, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])],
            require_stable=False))
        assert (single.error_code, single.topics) == (Errors.NOT_COORDINATOR, [])  # v2-v7: the top-level error
        old_style = await wire.request(ApiKey.OFFSET_FETCH, 1, OffsetFetchRequest(
            group_id=group, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]))
        # v0/v1 have no top-level error: it is each partition's
        assert [p.error_code for t in old_style.topics for p in t.partitions] == [Errors.NOT_COORDINATOR]

        gate = LoadGate(monkeypatch)
        move_leadership(broker, GROUPS, broker.node_id)  # leader again, one epoch later: a reload
        assert broker.group_coordinator.runtime.shards[0].status == ShardStatus.LOADING
        fetched = await wire.request(ApiKey.OFFSET_FETCH, 8, offset_fetch(group, topic))
        assert fetched.groups[0].error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS
        rejoin = await wire.request(ApiKey.JOIN_GROUP, 5, join_request(group, a))
        assert rejoin.error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS
        gate.open()
        fetched = await until(lambda: wire.request(ApiKey.OFFSET_FETCH, 8, offset_fetch(group, topic)),
                              code=lambda r: r.groups[0].error_code)
        p = fetched.groups[0].topics[0].partitions[0]
        assert (p.error_code, p.committed_offset, p.metadata) == (0, 7, "m")  # rebuilt from the log
        ctx = broker.group_coordinator.runtime.shards[0]
        assert ctx.epoch == 2

        # still the leader at a later epoch (an ISR change, say): the shard stays, with the new epoch
        move_leadership(broker, GROUPS, broker.node_id)
        assert broker.group_coordinator.runtime.shards[0] is ctx
        assert (ctx.status, ctx.epoch) == (ShardStatus.ACTIVE, 3)
        fetched = await wire.request(ApiKey.OFFSET_FETCH, 8, offset_fetch(group, topic))
        assert fetched.groups[0].topics[0].partitions[0].committed_offset == 7
        await wire_b.stream.aclose()

    run_virtual({}, scenario)


async def begin_transaction(wire: AsyncWire, clock: TrioClock, tid: str, topic: str) -> tuple[int, int]:
    await find_coordinator(wire, tid, 1)
    init = await until(lambda: wire.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=600_000, producer_id=-1, producer_epoch=-1)),
        retry=(Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR))
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch
    add = await add_partition(wire, tid, pid, epoch, topic)
    assert add == 0
    batch = build_batch([(clock.wall_ms(), None, b"in a transaction", ())], producer_id=pid,
                        producer_epoch=epoch, base_sequence=0, transactional=True)
    assert (await produce(wire, topic, batch)).error_code == 0
    assert await list_offset(wire, topic, -1, isolation=1) == 0  # the open transaction holds the LSO
    return pid, epoch


async def add_partition(wire: AsyncWire, tid: str, pid: int, epoch: int, topic: str) -> int:
    add = await wire.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])]))
    return int(add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def end_txn(tid: str, pid: int, epoch: int) -> EndTxnRequest:
    return EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True)


def test_a_transaction_coordinator_drops_its_state_on_resign_and_the_next_leadership_commits(monkeypatch) -> None:
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        tid, topic = "tx-move", "txn-move"
        await create_topic(wire, topic)
        pid, epoch = await begin_transaction(wire, clock, tid, topic)
        old_coordinator_epoch = broker.txn_coordinator.runtime.shards[0].epoch

        move_leadership(broker, TXNS, OTHER_NODE)
        assert broker.txn_coordinator.runtime.shards == {}  # the in-flight transaction state is gone
        assert (await wire.request(ApiKey.END_TXN, 3, end_txn(tid, pid, epoch))).error_code == Errors.NOT_COORDINATOR
        assert await add_partition(wire, tid, pid, epoch, topic) == Errors.NOT_COORDINATOR

        gate = LoadGate(monkeypatch)
        move_leadership(broker, TXNS, broker.node_id)
        ended = await wire.request(ApiKey.END_TXN, 3, end_txn(tid, pid, epoch))
        assert ended.error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS
        gate.open()
        ended = await until(lambda: wire.request(ApiKey.END_TXN, 3, end_txn(tid, pid, epoch)))
        assert ended.error_code == 0  # the Ongoing state was reloaded from __transaction_state
        assert await list_offset(wire, topic, -1, isolation=1) == 2  # the record + the COMMIT marker
        new_epoch = broker.txn_coordinator.runtime.shards[0].epoch
        assert new_epoch > old_coordinator_epoch

        # a marker from the coordinator of the older epoch is fenced by the partition's log
        R = WriteTxnMarkersRequest
        stale = await wire.request(ApiKey.WRITE_TXN_MARKERS, 1, R(markers=[R.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=old_coordinator_epoch,
            topics=[R.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])]))
        assert stale.markers[0].topics[0].partitions[0].error_code == Errors.TRANSACTION_COORDINATOR_FENCED
        assert await list_offset(wire, topic, -1, isolation=1) == 2

    run_virtual({}, scenario)


def test_markers_cut_by_a_leadership_move_are_resent_by_the_next_leader() -> None:
    """The data partition's leader is away, so the markers retry; the coordinator resigns (the
    sender gives up), then, with the data partition back, leads again: loading the PrepareCommit
    state sends the markers and completes the transaction."""
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        tid, topic = "tx-cut", "txn-cut"
        await create_topic(wire, topic)
        pid, epoch = await begin_transaction(wire, clock, tid, topic)
        move_leadership(broker, topic, OTHER_NODE)  # the data partition is led elsewhere for now
        # EndTxn writes PrepareCommit; the marker cannot be written, so the answer comes after the
        # bounded wait (as Kafka answers after Prepare*) and the transaction stays PrepareCommit
        assert (await wire.request(ApiKey.END_TXN, 3, end_txn(tid, pid, epoch))).error_code == 0
        assert broker.txn_coordinator.transaction_state(tid)[1].state.name == "PREPARE_COMMIT"
        assert tid in broker.txn_coordinator._completions  # still retrying

        move_leadership(broker, TXNS, OTHER_NODE)
        await trio.sleep(2)  # the sender notices within its backoff
        assert tid not in broker.txn_coordinator._completions  # abandoned: not the coordinator any more
        move_leadership(broker, topic, broker.node_id)
        assert await list_offset(wire, topic, -1, isolation=1) == 0  # no marker was written

        move_leadership(broker, TXNS, broker.node_id)
        for _ in range(100):
            if await list_offset(wire, topic, -1, isolation=1) == 2:
                break
            await trio.sleep(0.1)
        assert await list_offset(wire, topic, -1, isolation=1) == 2  # the new leadership committed it
        for _ in range(100):
            code, md = broker.txn_coordinator.transaction_state(tid)
            if code == 0 and md is not None and md.state.name == "COMPLETE_COMMIT":
                break
            await trio.sleep(0.1)
        assert md is not None and md.state.name == "COMPLETE_COMMIT"

    run_virtual({}, scenario)


def test_a_follower_waiting_in_sync_group_is_answered_not_coordinator_when_the_node_resigns() -> None:
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        group = "g-sync"
        await find_coordinator(wire, group, 0)
        wire_b = await second_wire(wire)
        a = (await until(lambda: wire.request(ApiKey.JOIN_GROUP, 5, join_request(group, "")))).member_id
        b = (await wire_b.request(ApiKey.JOIN_GROUP, 5, join_request(group, ""))).member_id
        joined: dict[str, Any] = {}

        async def join(w: AsyncWire, member: str) -> None:
            joined[member] = await w.request(ApiKey.JOIN_GROUP, 5, join_request(group, member))

        async with trio.open_nursery() as nursery:  # both join one generation
            nursery.start_soon(join, wire, a)
            nursery.start_soon(join, wire_b, b)
        assert {m: r.error_code for m, r in joined.items()} == {a: 0, b: 0}
        leader = joined[a].leader
        follower_wire, follower = (wire_b, b) if leader == a else (wire, a)
        generation = joined[a].generation_id
        synced: list[Any] = []

        async def sync_follower() -> None:  # waits for the leader's SyncGroup, which never comes
            synced.append(await follower_wire.request(ApiKey.SYNC_GROUP, 3, SyncGroupRequest(
                group_id=group, generation_id=generation, member_id=follower, group_instance_id=None,
                assignments=[])))

        with trio.fail_after(60):  # virtual seconds: an unanswered sync fails the test, not hangs it
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sync_follower)
                await trio.sleep(1)
                assert synced == []  # parked until the leader syncs
                move_leadership(broker, GROUPS, OTHER_NODE)
        assert synced[0].error_code == Errors.NOT_COORDINATOR
        await wire_b.stream.aclose()

    run_virtual({}, scenario)


def commit_request(group: str, topic: str, offset: int) -> OffsetCommitRequest:
    """A simple (generation -1) commit, as a manually assigned consumer sends it."""
    return OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                             committed_leader_epoch=-1, committed_metadata="")])])


def test_a_new_leader_answers_offset_fetch_only_once_its_high_watermark_reaches_its_epoch_start() -> None:
    """A new leader's high watermark is what it last heard as a follower, up to a fetch behind
    the previous leader's: a read at it missed a commit the previous leader had acknowledged
    (a fault campaign's consumer was answered offset 462 after its commit of 512 succeeded).
    Here this node's partition takes leadership back with its high watermark one commit short,
    as a follower's would be: OffsetFetch is COORDINATOR_LOAD_IN_PROGRESS until the watermark
    reaches the epoch's start offset, then it answers the last acknowledged commit."""
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        group, topic = "g-hw", "t-hw"
        await create_topic(wire, topic)
        await find_coordinator(wire, group, 0)
        for offset in (7, 9):
            commit = await until(lambda offset=offset: wire.request(ApiKey.OFFSET_COMMIT, 8,
                                                                    commit_request(group, topic, offset)),
                                 code=lambda r: r.topics[0].partitions[0].error_code)
            assert commit.topics[0].partitions[0].error_code == 0
        p = broker.replica_manager.get_partition(GROUPS, 0)
        assert p is not None
        end = p.log.log_end_offset
        move_leadership(broker, GROUPS, OTHER_NODE)
        p.log.high_watermark = end - 1  # a follower that has not yet heard the HW over the last commit
        p.leader_id = broker.node_id  # elected: what the metadata publisher does for a new leader
        p.leader_epoch += 1
        p.make_leader(clock.wall_ms())
        broker.group_coordinator.on_metadata()
        assert p.leader_epoch_start_offset == end and p.high_watermark == end - 1
        for _ in range(200):  # the reload replays the partition in a worker thread
            if broker.group_coordinator.runtime.shards[0].status == ShardStatus.ACTIVE:
                break
            await trio.sleep(0.05)
        assert broker.group_coordinator.runtime.shards[0].status == ShardStatus.ACTIVE
        fetched = await wire.request(ApiKey.OFFSET_FETCH, 8, offset_fetch(group, topic))
        assert fetched.groups[0].error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS  # loaded, watermark short
        assert p.maybe_increment_high_watermark(clock.wall_ms())  # a one-replica ISR: the HW is the LEO
        fetched = await wire.request(ApiKey.OFFSET_FETCH, 8, offset_fetch(group, topic))
        part = fetched.groups[0].topics[0].partitions[0]
        assert (fetched.groups[0].error_code, part.error_code, part.committed_offset) == (0, 0, 9)

    run_virtual({}, scenario)
