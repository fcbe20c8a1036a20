"""KIP-848 on the wire: ConsumerGroupHeartbeat v0-1 and ConsumerGroupDescribe v0-1 (every
advertised version), OffsetCommit/OffsetFetch v9 member epochs, ListGroups/DescribeGroups of a
consumer group, and a group that survives a restart."""

from __future__ import annotations

import tempfile
import threading

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateTopicsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from pybroker.server.api_versions import SUPPORTED
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

OVERRIDES = {"offsets.topic.num.partitions": 4, "group.consumer.session.timeout.ms": 1500,
             "group.consumer.min.session.timeout.ms": 1000, "group.consumer.heartbeat.interval.ms": 300,
             "group.consumer.min.heartbeat.interval.ms": 100}
RETRIABLE = (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE)


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides=OVERRIDES) as b:
        yield b


def create_topic(c: WireClient, name: str, partitions: int) -> bytes:
    resp = c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000))
    assert resp.topics[0].error_code == 0, resp
    return resp.topics[0].topic_id


def hb(c: WireClient, group: str, member_id: str, epoch: int, v: int = 1, topics: list[str] | None = None,
       owned: dict[bytes, list[int]] | None = None, rebalance_ms: int = -1, regex: str | None = None):
    req = ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=rebalance_ms, subscribed_topic_names=topics, subscribed_topic_regex=regex,
        server_assignor=None, topic_partitions=None if owned is None else [
            ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=p) for t, p in owned.items()])
    for _ in range(200):
        r = c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, v, req)
        if r.error_code not in RETRIABLE:
            return r
        threading.Event().wait(0.05)
    raise AssertionError(f"coordinator not available: {r}")


def join(c: WireClient, group: str, member_id: str, topics: list[str], v: int = 1):
    return hb(c, group, member_id, 0, v, topics=topics, owned={}, rebalance_ms=10000)


def owned_of(resp) -> dict[bytes, list[int]]:
    return {tp.topic_id: list(tp.partitions) for tp in resp.assignment.topic_partitions}


def describe(c: WireClient, group: str, include_ops: bool = False, v: int = 0):
    return c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, v, ConsumerGroupDescribeRequest(
        group_ids=[group], include_authorized_operations=include_ops)).groups[0]


def test_advertised_ranges():
    assert SUPPORTED[ApiKey.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert SUPPORTED[ApiKey.CONSUMER_GROUP_DESCRIBE] == (0, 1)


@pytest.mark.parametrize("v", [0, 1])
def test_heartbeat_every_version_join_reconcile_leave(wire, v):
    tid = create_topic(wire, f"cgw-{v}", 4)
    group = f"cgw-g{v}"
    a = join(wire, group, "" if v == 0 else "member-a", [f"cgw-{v}"], v)
    assert a.error_code == 0 and a.member_epoch == 1 and a.heartbeat_interval_ms == 300
    assert a.member_id and (v == 0 or a.member_id == "member-a")
    assert owned_of(a) == {tid: [0, 1, 2, 3]}
    b = join(wire, group, "" if v == 0 else "member-b", [f"cgw-{v}"], v)
    assert b.error_code == 0 and b.member_epoch == 2 and owned_of(b) == {}  # not released yet
    r = hb(wire, group, a.member_id, 1, v, owned={tid: [0, 1, 2, 3]})
    kept = owned_of(r)[tid]
    assert r.member_epoch == 1 and len(kept) == 2
    r = hb(wire, group, a.member_id, 1, v, owned={tid: kept})
    assert r.member_epoch == 2
    r = hb(wire, group, b.member_id, 2, v, owned={})
    assert sorted(owned_of(r)[tid]) == sorted(set(range(4)) - set(kept))
    d = describe(wire, group, include_ops=True)
    assert d.error_code == 0 and d.group_state == "Stable" and d.group_epoch == 2 and d.assignor_name == "uniform"
    assert {m.member_id for m in d.members} == {a.member_id, b.member_id}
    assert all(tp.topic_name == f"cgw-{v}" for m in d.members for tp in m.assignment.topic_partitions)
    assert d.authorized_operations != -2147483648
    left = hb(wire, group, b.member_id, -1, v)
    assert left.error_code == 0 and left.member_epoch == -1
    # fencing answers
    assert hb(wire, group, a.member_id, 7, v, owned={}).error_code == Errors.FENCED_MEMBER_EPOCH
    assert hb(wire, group, b.member_id, 2, v, owned={}).error_code == Errors.UNKNOWN_MEMBER_ID


def test_heartbeat_invalid_requests_carry_a_message(wire):
    r = hb(wire, "cgw-bad", "", 0, 1, topics=["x"], owned={}, rebalance_ms=1000)
    assert r.error_code == Errors.INVALID_REQUEST and r.error_message == "MemberId can't be empty."
    r = hb(wire, "cgw-bad", "m", 0, 1, topics=["x"], owned=None, rebalance_ms=1000)
    assert r.error_code == Errors.INVALID_REQUEST and "TopicPartitions" in r.error_message


def test_regex_subscription_on_the_wire(wire):
    tid = create_topic(wire, "cgw-rx-one", 2)
    r = hb(wire, "cgw-rx", "m", 0, 1, regex="cgw-rx-.*", owned={}, rebalance_ms=1000)
    assert r.error_code == 0 and owned_of(r) == {tid: [0, 1]}


@pytest.mark.parametrize("v", [0, 1])
def test_describe_unknown_group(wire, v):
    d = describe(wire, "cgw-never", v=v)
    assert (d.error_code, d.error_message) == (Errors.GROUP_ID_NOT_FOUND, "Group cgw-never not found.")


@pytest.mark.parametrize("v", [0, 1])
def test_describe_every_version_member_type(wire, v):
    """v1 (KIP-1099) tells each member's protocol: 1 for a consumer-protocol member (0 is a classic
    member of a migrated group, tests/unit/coordinators/test_group_migration.py); v0 has no such field."""
    create_topic(wire, f"cgw-mt-{v}", 1)
    join(wire, f"cgw-mt-g{v}", "m-1", [f"cgw-mt-{v}"])
    d = describe(wire, f"cgw-mt-g{v}", v=v)
    assert d.error_code == 0 and [m.member_id for m in d.members] == ["m-1"]
    assert d.members[0].member_type == (1 if v >= 1 else -1)  # -1: the field's default, not on v0's wire


def test_offsets_v9_member_epochs_and_group_listing(wire):
    create_topic(wire, "cgw-off", 1)
    a = join(wire, "cgw-og", "m1", ["cgw-off"])

    def commit(epoch, member="m1"):
        r = wire.request(ApiKey.OFFSET_COMMIT, 9, OffsetCommitRequest(
            group_id="cgw-og", generation_id_or_member_epoch=epoch, member_id=member, group_instance_id=None,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="cgw-off", partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=7,
                                                                 committed_leader_epoch=-1,
                                                                 committed_metadata="x")])]))
        return r.topics[0].partitions[0].error_code

    def fetch(member, epoch):
        r = wire.request(ApiKey.OFFSET_FETCH, 9, OffsetFetchRequest(require_stable=True, groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id="cgw-og", member_id=member, member_epoch=epoch,
                                                       topics=None)]))
        return r.groups[0]

    assert commit(a.member_epoch) == 0
    assert commit(a.member_epoch + 1) == Errors.STALE_MEMBER_EPOCH
    assert commit(a.member_epoch, "ghost") == Errors.UNKNOWN_MEMBER_ID
    g = fetch("m1", a.member_epoch)
    assert g.error_code == 0 and g.topics[0].partitions[0].committed_offset == 7
    assert fetch("m1", a.member_epoch + 3).error_code == Errors.STALE_MEMBER_EPOCH
    assert fetch(None, -1).error_code == 0  # admin
    listed = wire.request(ApiKey.LIST_GROUPS, 5, ListGroupsRequest(states_filter=[], types_filter=["consumer"]))
    mine = [g for g in listed.groups if g.group_id == "cgw-og"]
    assert mine and mine[0].group_type == "consumer" and mine[0].group_state == "Stable"
    assert all(g.group_type == "consumer" for g in listed.groups)
    classic_only = wire.request(ApiKey.LIST_GROUPS, 5, ListGroupsRequest(states_filter=[], types_filter=["classic"]))
    assert "cgw-og" not in {g.group_id for g in classic_only.groups}
    dg = wire.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=["cgw-og"],
                                                                       include_authorized_operations=False))
    assert dg.groups[0].group_state == "Dead" and dg.groups[0].members == []
    assert dg.groups[0].error_code == 0
    # v6 (KIP-1043): a consumer group is not a classic group, so DescribeGroups does not find it
    dg = wire.request(ApiKey.DESCRIBE_GROUPS, 6, DescribeGroupsRequest(groups=["cgw-og"],
                                                                       include_authorized_operations=False))
    assert (dg.groups[0].error_code, dg.groups[0].error_message, dg.groups[0].group_state) == (
        Errors.GROUP_ID_NOT_FOUND, "Group cgw-og is not a classic group.", "Dead")


def test_consumer_group_survives_a_restart_then_its_silent_member_is_fenced():
    log_dir = tempfile.mkdtemp(prefix="pybroker-cg-")
    with EmbeddedBroker(log_dir=log_dir, overrides=OVERRIDES) as b:
        c = WireClient("127.0.0.1", b.port)
        tid = create_topic(c, "cgw-rs", 3)
        a = join(c, "cgw-rg", "keeper", ["cgw-rs"])
        assert owned_of(a) == {tid: [0, 1, 2]}
        before = describe(c, "cgw-rg")
        c.close()
    with EmbeddedBroker(log_dir=log_dir, overrides=OVERRIDES) as b:
        c = WireClient("127.0.0.1", b.port)
        for _ in range(200):
            d = describe(c, "cgw-rg")
            if d.error_code not in RETRIABLE:
                break
            threading.Event().wait(0.05)
        assert d.error_code == 0 and d.group_epoch == before.group_epoch and d.group_state == "Stable"
        assert [(m.member_id, m.member_epoch) for m in d.members] == [("keeper", 1)]
        assert d.members[0].assignment.topic_partitions[0].partitions == [0, 1, 2]
        # the loaded member never heartbeats: fenced after group.consumer.session.timeout.ms
        for _ in range(200):
            d = describe(c, "cgw-rg")
            if d.group_state == "Empty":
                break
            threading.Event().wait(0.05)
        assert d.group_state == "Empty" and d.members == []
        c.close()
