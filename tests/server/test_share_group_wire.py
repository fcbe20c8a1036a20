"""KIP-932 share groups on the wire, the group coordinator's side: ShareGroupHeartbeat v1 and
ShareGroupDescribe v1 advertised; members join with their own ids, share partitions are
initialized through the Persister (an in-memory one here: the share coordinator is another
component) before they are assigned, several members share a partition, and a share group's id
answers Kafka's errors to the other group APIs. ListGroups/DescribeGroups/DeleteGroups see it."""

from __future__ import annotations

import threading
import uuid

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)
from pybroker.server.api_versions import SUPPORTED
from pybroker.share.persister import ReadResult, StateBatch, SummaryResult
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

OVERRIDES = {"offsets.topic.num.partitions": 4, "group.share.session.timeout.ms": 45000,
             "group.share.heartbeat.interval.ms": 5000}
RETRIABLE = (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE)


class MemoryPersister:
    """The Persister protocol over a dict: (group, topic id, partition) -> (state epoch, start offset)."""

    def __init__(self) -> None:
        self.state: dict[tuple[str, uuid.UUID, int], tuple[int, int]] = {}
        self.deleted: list[tuple[str, uuid.UUID, int]] = []

    async def initialize_state(self, group_id, topic_id, partition, state_epoch, start_offset) -> int:
        self.state[(group_id, topic_id, partition)] = (state_epoch, start_offset)
        return 0

    async def read_state(self, group_id, topic_id, partition, leader_epoch) -> ReadResult:
        epoch, start = self.state.get((group_id, topic_id, partition), (-1, -1))
        return ReadResult(0, epoch, start, ())

    async def write_state(self, group_id, topic_id, partition, state_epoch, leader_epoch, start_offset,
                          batches: list[StateBatch]) -> int:
        return 0

    async def delete_state(self, group_id, topic_id, partition) -> int:
        self.state.pop((group_id, topic_id, partition), None)
        self.deleted.append((group_id, topic_id, partition))
        return 0

    async def read_summary(self, group_id, topic_id, partition, leader_epoch) -> SummaryResult:
        if (group_id, topic_id, partition) not in self.state:
            return SummaryResult(0)
        epoch, start = self.state[(group_id, topic_id, partition)]
        return SummaryResult(0, epoch, 0, start)


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides=OVERRIDES) as b:
        yield b


@pytest.fixture
def persister(broker):
    real = broker._broker.group_coordinator.share_persister  # the broker's DefaultStatePersister
    p = MemoryPersister()
    broker._broker.group_coordinator.share_persister = p
    # the share partitions read the same state (ShareFetch answers COORDINATOR_NOT_AVAILABLE
    # without a persister, which librdkafka's poll raises)
    broker._broker.share_partition_manager.persister = p
    yield p
    broker._broker.group_coordinator.share_persister = real
    broker._broker.share_partition_manager.persister = real


@pytest.fixture
def no_persister(broker):
    """The group coordinator as on a broker without a share coordinator."""
    real = broker._broker.group_coordinator.share_persister
    broker._broker.group_coordinator.share_persister = None
    broker._broker.share_partition_manager.persister = None
    yield
    broker._broker.group_coordinator.share_persister = real
    broker._broker.share_partition_manager.persister = real


def create_topic(c: WireClient, name: str, partitions: int) -> bytes:
    resp = c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000))
    assert resp.topics[0].error_code == 0, resp
    return resp.topics[0].topic_id


def hb(c: WireClient, group: str, member_id: str, epoch: int, topics: list[str] | None = None):
    req = ShareGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=epoch, rack_id=None,
                                     subscribed_topic_names=topics)
    for _ in range(200):
        r = c.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, req)
        if r.error_code not in RETRIABLE:
            return r
        threading.Event().wait(0.05)
    raise AssertionError(f"coordinator not available: {r}")


def describe(c: WireClient, group: str):
    return c.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, ShareGroupDescribeRequest(
        group_ids=[group], include_authorized_operations=True)).groups[0]


class Member:
    """A share consumer's heartbeat loop, driven by hand: keeps its epoch and last assignment."""

    def __init__(self, c: WireClient, group: str, topics: list[str]) -> None:
        self.c, self.group, self.id = c, group, uuid.uuid4().hex
        r = hb(c, group, self.id, 0, topics)
        assert r.error_code == 0, r
        self.epoch, self.assignment = r.member_epoch, _parts(r)

    def beat(self) -> None:
        r = hb(self.c, self.group, self.id, self.epoch)
        assert r.error_code == 0, r
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.assignment = _parts(r)


def _parts(r) -> set[tuple[bytes, int]]:
    return {(tp.topic_id, p) for tp in r.assignment.topic_partitions for p in tp.partitions}


def wait_until(cond, members: list[Member], what: str) -> None:
    for _ in range(200):
        for m in members:
            m.beat()
        if cond():
            return
        threading.Event().wait(0.05)
    raise AssertionError(f"never {what}: {[(m.epoch, m.assignment) for m in members]}")


def test_advertised_ranges():
    assert SUPPORTED[ApiKey.SHARE_GROUP_HEARTBEAT] == (1, 1)
    assert SUPPORTED[ApiKey.SHARE_GROUP_DESCRIBE] == (1, 1)


def test_without_a_persister_members_join_with_nothing_assigned(wire, no_persister):
    create_topic(wire, "sgw-none", 2)
    m = Member(wire, "sgw-none-g", ["sgw-none"])
    for _ in range(3):
        m.beat()
    assert m.assignment == set() and m.epoch == 1
    d = describe(wire, "sgw-none-g")
    assert (d.error_code, d.group_state, len(d.members)) == (0, "Stable", 1)


def test_members_share_the_partitions(wire, persister):
    tid = create_topic(wire, "sgw-t", 2)
    group = "sgw-g"
    a = Member(wire, group, ["sgw-t"])
    wait_until(lambda: a.assignment == {(tid, 0), (tid, 1)}, [a], "assigned both partitions")
    # the share partitions were initialized at the group epoch, from -1 (share.auto.offset.reset decides)
    assert {k[2]: v for k, v in persister.state.items() if k[0] == group} == {0: (1, -1), 1: (1, -1)}
    b, c = Member(wire, group, ["sgw-t"]), Member(wire, group, ["sgw-t"])
    members = [a, b, c]
    wait_until(lambda: all(m.assignment for m in members) and len({m.epoch for m in members}) == 1, members,
               "every member assigned")
    assert set().union(*(m.assignment for m in members)) == {(tid, 0), (tid, 1)}
    assert sum(len(m.assignment) for m in members) == 4  # 3 members, 2 partitions: each shared by 2
    d = describe(wire, group)
    assert (d.error_code, d.group_state, d.assignor_name) == (0, "Stable", "simple")
    assert d.group_epoch == d.assignment_epoch == a.epoch
    assert {m.member_id for m in d.members} == {a.id, b.id, c.id}
    got = {m.member_id: {(tp.topic_id, p) for tp in m.assignment.topic_partitions for p in tp.partitions}
           for m in d.members}
    assert got == {m.id: m.assignment for m in members}
    assert all(m.client_id == "wire-test" and m.client_host.startswith("/") for m in d.members)
    assert d.authorized_operations > 0
    # the group among the others
    listed = wire.request(ApiKey.LIST_GROUPS, 5, ListGroupsRequest(states_filter=[], types_filter=["share"]))
    assert (group, "share", "share", "Stable") in {
        (g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups}
    assert group not in {g.group_id for g in wire.request(
        ApiKey.LIST_GROUPS, 5, ListGroupsRequest(states_filter=[], types_filter=["classic", "consumer"])).groups}
    dg = wire.request(ApiKey.DESCRIBE_GROUPS, 6, DescribeGroupsRequest(
        groups=[group], include_authorized_operations=False)).groups[0]
    assert (dg.error_code, dg.error_message) == (Errors.GROUP_ID_NOT_FOUND, f"Group {group} is not a classic group.")
    dele = wire.request(ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=[group]))
    assert dele.results[0].error_code == Errors.NON_EMPTY_GROUP
    # members leave; the empty group is deleted with its share-partition state
    for m in members:
        r = hb(wire, group, m.id, -1)
        assert (r.error_code, r.member_epoch) == (0, -1)
    assert describe(wire, group).group_state == "Empty"
    dele = wire.request(ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=[group]))
    assert dele.results[0].error_code == 0
    assert {(g, p) for g, _t, p in persister.deleted} == {(group, 0), (group, 1)}
    d = describe(wire, group)
    assert (d.error_code, d.error_message) == (Errors.GROUP_ID_NOT_FOUND, f"Group {group} not found.")


def test_errors(wire, persister):
    create_topic(wire, "sgw-e", 1)
    group = "sgw-e-g"
    r = hb(wire, group, "", 0, ["sgw-e"])
    assert (r.error_code, r.error_message) == (Errors.INVALID_REQUEST, "MemberId can't be empty.")
    r = hb(wire, group, "m", 0, None)
    assert (r.error_code, r.error_message) == (Errors.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    assert hb(wire, group, "m", 1).error_code == Errors.GROUP_ID_NOT_FOUND
    m = Member(wire, group, ["sgw-e"])
    assert hb(wire, group, "stranger", 1).error_code == Errors.UNKNOWN_MEMBER_ID
    assert hb(wire, group, m.id, m.epoch + 5).error_code == Errors.FENCED_MEMBER_EPOCH
    join = wire.request(ApiKey.JOIN_GROUP, 9, JoinGroupRequest(
        group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", group_instance_id=None,
        protocol_type="consumer", reason=None,
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]))
    assert join.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    commit = wire.request(ApiKey.OFFSET_COMMIT, 8, OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="sgw-e", partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                             committed_leader_epoch=-1, committed_metadata="")])]))
    assert commit.topics[0].partitions[0].error_code == Errors.GROUP_ID_NOT_FOUND


def test_confluent_kafka_share_consumers_are_assigned_and_leave(broker, wire, persister):
    """librdkafka's share consumer (confluent-kafka's ShareConsumer) heartbeats with ShareGroupHeartbeat
    v1: three of them on a two-partition topic each get partitions, all partitions covered; closing
    them leaves the group Empty. (ShareFetch is another component's: no records are expected here.)"""
    confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
    if not hasattr(confluent_kafka, "ShareConsumer"):
        pytest.skip(f"confluent-kafka {confluent_kafka.version()[0]} has no ShareConsumer (2.16+)")
    tid = create_topic(wire, "sgw-ck", 2)
    consumers = []
    try:
        for _ in range(3):
            c = confluent_kafka.ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "sgw-ck-g",
                                               "log_level": 3})
            c.subscribe(["sgw-ck"])
            consumers.append(c)
        d = None
        for _ in range(100):
            for c in consumers:
                c.poll(0.1)
            d = describe(wire, "sgw-ck-g")
            if d.error_code == 0 and len(d.members) == 3 and all(m.assignment.topic_partitions for m in d.members) \
                    and len({m.member_epoch for m in d.members}) == 1 and d.members[0].member_epoch == d.group_epoch:
                break
        else:
            raise AssertionError(f"share consumers never all assigned: {d}")
        parts = [{(tp.topic_id, p) for tp in m.assignment.topic_partitions for p in tp.partitions} for m in d.members]
        assert set().union(*parts) == {(tid, 0), (tid, 1)}
        assert all(m.subscribed_topic_names == ["sgw-ck"] for m in d.members)
    finally:
        for c in consumers:
            c.close()
    assert describe(wire, "sgw-ck-g").group_state == "Empty"  # close() sent the leave (epoch -1)


def test_share_group_offsets_describe_alter_delete(wire, persister):
    from pybroker.protocol.messages import (
        AlterShareGroupOffsetsRequest as A,
    )
    from pybroker.protocol.messages import (
        DeleteShareGroupOffsetsRequest as Del,
    )
    from pybroker.protocol.messages import (
        DescribeShareGroupOffsetsRequest as Desc,
    )
    assert SUPPORTED[ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS] == SUPPORTED[ApiKey.ALTER_SHARE_GROUP_OFFSETS] == \
        SUPPORTED[ApiKey.DELETE_SHARE_GROUP_OFFSETS] == (0, 0)
    tid = create_topic(wire, "sgw-o", 2)
    group = "sgw-o-g"

    def describe_offsets(topics):
        req = Desc(groups=[Desc.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None if topics is None else [
            Desc.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in topics])])
        (g,) = wire.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, req).groups
        assert g.error_code == 0, g
        return {(t.topic_name, p.partition_index): p.start_offset for t in g.topics for p in t.partitions}

    def alter(offsets):
        req = A(group_id=group, topics=[A.AlterShareGroupOffsetsRequestTopic(topic_name="sgw-o", partitions=[
            A.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in offsets.items()])])
        return wire.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, req)

    m = Member(wire, group, ["sgw-o"])
    wait_until(lambda: len(m.assignment) == 2, [m], "assigned")
    assert describe_offsets(None) == {("sgw-o", 0): -1, ("sgw-o", 1): -1}  # initialized, start not yet known
    assert describe_offsets([("sgw-o", [0]), ("nope", [3])]) == {("sgw-o", 0): -1, ("nope", 3): -1}
    r = alter({0: 5})
    assert r.error_code == Errors.NON_EMPTY_GROUP  # members are connected
    hb(wire, group, m.id, -1)
    r = alter({0: 5, 1: 7, 9: 1})
    assert r.error_code == 0, r
    assert {p.partition_index: p.error_code for p in r.responses[0].partitions} == \
        {0: 0, 1: 0, 9: Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert describe_offsets(None) == {("sgw-o", 0): 5, ("sgw-o", 1): 7}
    assert persister.state[(group, uuid.UUID(bytes=tid), 0)][1] == 5
    unknown = A(group_id="sgw-o-missing", topics=[A.AlterShareGroupOffsetsRequestTopic(topic_name="sgw-o", partitions=[
        A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=1)])])
    assert wire.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, unknown).error_code == Errors.GROUP_ID_NOT_FOUND
    # deleting the topic's state: gone from the persister and from the group's initialized partitions
    d = wire.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, Del(group_id=group, topics=[
        Del.DeleteShareGroupOffsetsRequestTopic(topic_name="sgw-o"), Del.DeleteShareGroupOffsetsRequestTopic(topic_name="nope")]))
    assert d.error_code == 0
    assert {(t.topic_name, t.error_code) for t in d.responses} == {("sgw-o", 0), ("nope", Errors.UNKNOWN_TOPIC_OR_PARTITION)}
    assert {(g, p) for g, _t, p in persister.deleted} >= {(group, 0), (group, 1)}
    assert describe_offsets(None) == {}


def test_share_group_survives_a_restart(tmp_path):
    """The group, its members' assignments and its initialized share partitions come back from
    __consumer_offsets: the member carries on at its epoch and nothing is initialized again."""
    overrides = {**OVERRIDES, "group.share.session.timeout.ms": 60000, "group.share.max.session.timeout.ms": 60000}
    with EmbeddedBroker(log_dir=str(tmp_path / "data"), overrides=overrides) as b:
        p = MemoryPersister()
        b._broker.group_coordinator.share_persister = p
        w = WireClient("127.0.0.1", b.port)
        tid = create_topic(w, "sgw-r", 2)
        m = Member(w, "sgw-r-g", ["sgw-r"])
        wait_until(lambda: len(m.assignment) == 2, [m], "assigned")
        before = describe(w, "sgw-r-g")
        w.close()
    with EmbeddedBroker(log_dir=str(tmp_path / "data"), overrides=overrides) as b:
        p2 = MemoryPersister()
        b._broker.group_coordinator.share_persister = p2
        w = WireClient("127.0.0.1", b.port)
        m.c = w
        after = describe(w, "sgw-r-g")
        for _ in range(200):
            if after.error_code == 0:
                break
            threading.Event().wait(0.05)
            after = describe(w, "sgw-r-g")
        assert (after.group_state, after.group_epoch, after.assignment_epoch) == \
            (before.group_state, before.group_epoch, before.assignment_epoch)
        assert [(x.member_id, x.member_epoch) for x in after.members] == [(m.id, m.epoch)]
        epoch = m.epoch
        m.beat()  # the member carries on at its epoch, keeping both partitions
        d = describe(w, "sgw-r-g")
        assert m.epoch == epoch and d.group_epoch == before.group_epoch
        assert {(tp.topic_id, p) for tp in d.members[0].assignment.topic_partitions for p in tp.partitions} == \
            {(tid, 0), (tid, 1)}
        assert not p2.state  # nothing initialized again
        w.close()
