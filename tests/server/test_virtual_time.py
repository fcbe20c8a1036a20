"""Timeouts measured in minutes and hours, tested in no time: a real broker runs inside trio with
`MockClock` and a `TrioClock`, so its wall clock (record timestamps, retention, transaction and
session timeouts) advances with virtual time. The tests talk to it over real loopback sockets
and never sleep for real.
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

from pybroker.clock import TrioClock
from pybroker.config import BrokerConfig
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    CreateTopicsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch
from pybroker.server.broker import Broker

START_MS = 1_700_000_000_000


class AsyncWire:
    """A trio client on the project's codec: one request at a time."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.cid = 0
        self.buf = b""

    async def request(self, key: int, version: int, body: Any) -> Any:
        self.cid += 1
        await self.stream.send_all(encode_request(key, version, self.cid, "virtual", body))
        size = struct.unpack(">i", await self._exact(4))[0]
        cid, resp = decode_response(key, version, await self._exact(size))
        assert cid == self.cid
        return resp

    async def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def run_virtual(overrides: dict[str, str], scenario: Callable[[Broker, AsyncWire, TrioClock], Awaitable[None]]
                ) -> None:
    """Start a node under MockClock (autojumping when idle), run `scenario`, stop the node."""
    with tempfile.TemporaryDirectory(prefix="pybroker-virtual-") as log_dir:
        props = {"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": log_dir,
                 "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
                 "group.initial.rebalance.delay.ms": "0", **overrides}

        async def main() -> None:
            clock = TrioClock(start_ms=START_MS)
            broker = Broker(BrokerConfig(props), clock)
            async with trio.open_nursery() as nursery:
                bound = await nursery.start(broker.run)
                stream = await trio.open_tcp_stream("127.0.0.1", bound[0].port)
                try:
                    await scenario(broker, AsyncWire(stream), clock)
                finally:
                    await stream.aclose()
                    broker.request_shutdown()

        # autojump only after 10 ms of real idleness, so short worker-thread file work is not taken
        # for "everybody waits on a timer"
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.01))


async def create_topic(wire: AsyncWire, name: str, configs: dict[str, str] | None = None) -> None:
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=[],
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])],
        timeout_ms=5000, validate_only=False)
    assert (await wire.request(ApiKey.CREATE_TOPICS, 5, req)).topics[0].error_code == 0


async def produce(wire: AsyncWire, topic: str, batch: bytes) -> Any:
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    return (await wire.request(ApiKey.PRODUCE, 9, req)).responses[0].partition_responses[0]


async def find_coordinator(wire: AsyncWire, key: str, key_type: int) -> None:
    """Until the coordinator's internal topic exists and answers (virtual time, bounded)."""
    for _ in range(100):
        resp = await wire.request(ApiKey.FIND_COORDINATOR, 1, FindCoordinatorRequest(key=key, key_type=key_type))
        if resp.error_code == 0:
            return
        await trio.sleep(0.1)
    raise AssertionError(f"no coordinator for {key}: {resp}")


async def list_offset(wire: AsyncWire, topic: str, timestamp: int, isolation: int = 0) -> int:
    req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])])
    p = (await wire.request(ApiKey.LIST_OFFSETS, 7, req)).topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset


def test_time_retention_deletes_segments_once_retention_ms_has_passed() -> None:
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        # ten minutes of retention: each virtual second costs real time (an idle node's ~3 timer
        # wake-ups, each after the MockClock's 10 ms autojump threshold), so an hour would take
        # ~90 s of the suite's time for the same behaviour
        await create_topic(wire, "aging", {"retention.ms": "600000", "segment.bytes": "1024"})
        for i in range(4):  # ~700 B each: every second batch rolls a segment
            resp = await produce(wire, "aging", build_batch([(clock.wall_ms(), None, bytes([i]) * 600, ())]))
            assert resp.error_code == 0
        assert await list_offset(wire, "aging", -2) == 0
        await trio.sleep(300)  # half the retention: nothing goes
        assert await list_offset(wire, "aging", -2) == 0
        await trio.sleep(300 + 2 * 60)  # past retention.ms, plus two retention checks
        # every sealed segment went; the active one (holding the last batch) stays
        assert await list_offset(wire, "aging", -2) == 3
        assert await list_offset(wire, "aging", -1) == 4

    run_virtual({"log.retention.check.interval.ms": "60000"}, scenario)


def test_an_abandoned_transaction_is_aborted_after_its_timeout() -> None:
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        await create_topic(wire, "txn-out")
        await find_coordinator(wire, "tx-1", 1)
        while True:
            init = await wire.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
                transactional_id="tx-1", transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1))
            if init.error_code not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR):
                break
            await trio.sleep(0.1)
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        add = await wire.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="tx-1", v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="txn-out", partitions=[0])]))
        assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        batch = build_batch([(clock.wall_ms(), None, b"never committed", ())], producer_id=pid,
                            producer_epoch=epoch, base_sequence=0, transactional=True)
        assert (await produce(wire, "txn-out", batch)).error_code == 0
        assert await list_offset(wire, "txn-out", -1, isolation=1) == 0  # the open transaction holds the LSO
        await trio.sleep(30)
        assert await list_offset(wire, "txn-out", -1, isolation=1) == 0  # not yet timed out
        await trio.sleep(60)  # past transaction.timeout.ms and a sweep: the coordinator aborts it
        assert await list_offset(wire, "txn-out", -1, isolation=1) == 2  # the record + the ABORT marker

    run_virtual({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000"}, scenario)


def test_a_silent_group_member_is_removed_after_its_session_timeout() -> None:
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        await find_coordinator(wire, "g-virtual", 0)
        proto = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        join = JoinGroupRequest(group_id="g-virtual", session_timeout_ms=45000, rebalance_timeout_ms=60000,
                                member_id="", group_instance_id=None, protocol_type="consumer", protocols=proto)
        while True:
            first = await wire.request(ApiKey.JOIN_GROUP, 5, join)
            if first.error_code != Errors.COORDINATOR_LOAD_IN_PROGRESS:
                break
            await trio.sleep(0.1)
        assert first.error_code == Errors.MEMBER_ID_REQUIRED  # JoinGroup v4+: join again with the id
        join.member_id = first.member_id
        first = await wire.request(ApiKey.JOIN_GROUP, 5, join)
        assert first.error_code == 0, first
        describe = DescribeGroupsRequest(groups=["g-virtual"])
        assert len((await wire.request(ApiKey.DESCRIBE_GROUPS, 5, describe)).groups[0].members) == 1
        await trio.sleep(30)  # within the session: still a member
        assert len((await wire.request(ApiKey.DESCRIBE_GROUPS, 5, describe)).groups[0].members) == 1
        await trio.sleep(30)  # 60 s without a heartbeat: expired
        group = (await wire.request(ApiKey.DESCRIBE_GROUPS, 5, describe)).groups[0]
        assert group.members == [] and group.group_state == "Empty", group

    run_virtual({}, scenario)
