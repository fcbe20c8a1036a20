"""Every group API at every advertised version, against a live embedded broker.

Each version's request is built with our codec and the answer decoded at that version:
FindCoordinator 0-6, JoinGroup 0-9, SyncGroup 0-5, Heartbeat 0-4, LeaveGroup 0-5,
OffsetCommit 2-10, OffsetFetch 1-10 (v10 by topic id), ListGroups 0-5, DescribeGroups 0-6,
DeleteGroups 0-2, OffsetDelete 0.
"""

from __future__ import annotations

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from pybroker.server.api_versions import SUPPORTED
from pybroker.testing import EmbeddedBroker

from .test_live_versions import create_topic
from .wire import WireClient

GROUP_APIS = [ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
              ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS,
              ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE]


def versions(api: ApiKey) -> list[int]:
    lo, hi = SUPPORTED[api]
    return list(range(lo, hi + 1))


TOPIC_IDS: dict[str, bytes] = {}


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3}) as b:
        # commits are only accepted for partitions that exist (UNKNOWN_TOPIC_OR_PARTITION otherwise)
        c = WireClient("127.0.0.1", b.port)
        TOPIC_IDS["topic-a"] = create_topic(c, "topic-a", partitions=2)
        c.close()
        yield b


def test_advertised_group_ranges():
    assert {api: SUPPORTED[api] for api in GROUP_APIS} == {
        ApiKey.FIND_COORDINATOR: (0, 6), ApiKey.JOIN_GROUP: (0, 9), ApiKey.SYNC_GROUP: (0, 5),
        ApiKey.HEARTBEAT: (0, 4), ApiKey.LEAVE_GROUP: (0, 5), ApiKey.OFFSET_COMMIT: (2, 10),
        ApiKey.OFFSET_FETCH: (1, 10), ApiKey.LIST_GROUPS: (0, 5), ApiKey.DESCRIBE_GROUPS: (0, 6),
        ApiKey.DELETE_GROUPS: (0, 2), ApiKey.OFFSET_DELETE: (0, 0)}


@pytest.mark.parametrize("v", versions(ApiKey.FIND_COORDINATOR))
def test_find_coordinator(wire, broker, v):
    if v >= 4:
        req = FindCoordinatorRequest(key_type=0, coordinator_keys=[f"fc-{v}-a", f"fc-{v}-b"])
        resp = wire.request(ApiKey.FIND_COORDINATOR, v, req)
        assert [c.key for c in resp.coordinators] == [f"fc-{v}-a", f"fc-{v}-b"]
        assert all(c.error_code == 0 and c.node_id == 1 and c.port == broker.port for c in resp.coordinators)
        txn = wire.request(ApiKey.FIND_COORDINATOR, v, FindCoordinatorRequest(key_type=1, coordinator_keys=["t"]))
        assert txn.coordinators[0].error_code == 0 and txn.coordinators[0].node_id == 1
    else:
        resp = wire.request(ApiKey.FIND_COORDINATOR, v, FindCoordinatorRequest(key=f"fc-{v}", key_type=0))
        assert resp.error_code == 0 and resp.node_id == 1 and resp.port == broker.port and resp.host == "127.0.0.1"


def _join(wire, v, group, member_id="", instance_id=None, protocol=b"\x00\x01"):
    req = JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=member_id,
                           group_instance_id=instance_id, protocol_type="consumer",
                           protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=protocol)],
                           reason="test" if v >= 8 else None)
    return wire.request(ApiKey.JOIN_GROUP, v, req)


def _form(wire, v_join, group):
    """One member through join + sync at the highest versions; returns (member id, generation)."""
    r = _join(wire, v_join, group)
    if r.error_code == Errors.MEMBER_ID_REQUIRED:
        r = _join(wire, v_join, group, member_id=r.member_id)
    assert r.error_code == 0, r
    s = wire.request(ApiKey.SYNC_GROUP, 5, SyncGroupRequest(
        group_id=group, generation_id=r.generation_id, member_id=r.member_id, group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=r.member_id, assignment=b"A")]))
    assert s.error_code == 0 and s.assignment == b"A"
    return r.member_id, r.generation_id


@pytest.mark.parametrize("v", versions(ApiKey.JOIN_GROUP))
def test_join_group(wire, v):
    group = f"join-{v}"
    r = _join(wire, v, group)
    if v >= 4:
        assert r.error_code == Errors.MEMBER_ID_REQUIRED and r.member_id
        r = _join(wire, v, group, member_id=r.member_id)
    assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id
    assert r.protocol_name == "range" and [m.member_id for m in r.members] == [r.member_id]
    assert bytes(r.members[0].metadata) == b"\x00\x01"
    if v >= 7:
        assert r.protocol_type == "consumer"
    bad = JoinGroupRequest(group_id=group, session_timeout_ms=1, rebalance_timeout_ms=1000, member_id="",
                           group_instance_id=None, protocol_type="consumer", reason=None,
                           protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    assert wire.request(ApiKey.JOIN_GROUP, v, bad).error_code == Errors.INVALID_SESSION_TIMEOUT


@pytest.mark.parametrize("v", versions(ApiKey.SYNC_GROUP))
def test_sync_group(wire, v):
    group = f"sync-{v}"
    r = _join(wire, 9, group)
    r = _join(wire, 9, group, member_id=r.member_id)
    req = SyncGroupRequest(group_id=group, generation_id=r.generation_id, member_id=r.member_id,
                           group_instance_id=None, protocol_type="consumer" if v >= 5 else None,
                           protocol_name="range" if v >= 5 else None,
                           assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=r.member_id,
                                                                                   assignment=b"assigned")])
    s = wire.request(ApiKey.SYNC_GROUP, v, req)
    assert s.error_code == 0 and s.assignment == b"assigned"
    if v >= 5:
        assert (s.protocol_type, s.protocol_name) == ("consumer", "range")
    req.generation_id += 1
    assert wire.request(ApiKey.SYNC_GROUP, v, req).error_code == Errors.ILLEGAL_GENERATION


@pytest.mark.parametrize("v", versions(ApiKey.HEARTBEAT))
def test_heartbeat(wire, v):
    group = f"hb-{v}"
    mid, gen = _form(wire, 9, group)
    ok = wire.request(ApiKey.HEARTBEAT, v, HeartbeatRequest(group_id=group, generation_id=gen, member_id=mid,
                                                            group_instance_id=None))
    assert ok.error_code == 0
    bad = wire.request(ApiKey.HEARTBEAT, v, HeartbeatRequest(group_id=group, generation_id=gen + 1, member_id=mid,
                                                             group_instance_id=None))
    assert bad.error_code == Errors.ILLEGAL_GENERATION


@pytest.mark.parametrize("v", versions(ApiKey.LEAVE_GROUP))
def test_leave_group(wire, v):
    group = f"leave-{v}"
    mid, _ = _form(wire, 9, group)
    members = [LeaveGroupRequest.MemberIdentity(member_id=mid, group_instance_id=None,
                                                reason="bye" if v >= 5 else None)] if v >= 3 else []
    req = LeaveGroupRequest(group_id=group, member_id=mid if v < 3 else "", members=members)
    resp = wire.request(ApiKey.LEAVE_GROUP, v, req)
    assert resp.error_code == 0
    if v >= 3:
        assert [(m.member_id, m.error_code) for m in resp.members] == [(mid, 0)]
    d = wire.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[group],
                                                                      include_authorized_operations=False))
    assert d.groups[0].group_state == "Empty" and d.groups[0].members == []


def _commit(wire, v, group, offset, metadata, generation=-1, member_id=""):
    # v10 names the topic by id only (the name is not on the wire)
    req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                              group_instance_id=None, retention_time_ms=-1, topics=[
                                  OffsetCommitRequest.OffsetCommitRequestTopic(
                                      name="topic-a", topic_id=TOPIC_IDS["topic-a"], partitions=[
                                      OffsetCommitRequest.OffsetCommitRequestPartition(
                                          partition_index=0, committed_offset=offset, committed_leader_epoch=4,
                                          committed_metadata=metadata, commit_timestamp=-1)])])
    return wire.request(ApiKey.OFFSET_COMMIT, v, req)


def _fetch(wire, v, group, topics=None):
    if v >= 8:
        req = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group, member_id=None, member_epoch=-1,
            topics=None if topics is None else [OffsetFetchRequest.OffsetFetchRequestTopics(
                name=t, topic_id=TOPIC_IDS[t], partition_indexes=ps) for t, ps in topics])], require_stable=True)
        resp = wire.request(ApiKey.OFFSET_FETCH, v, req)
        assert resp.groups[0].group_id == group and resp.groups[0].error_code == 0
        names = {tid: name for name, tid in TOPIC_IDS.items()}
        return {(names[t.topic_id] if v >= 10 else t.name, p.partition_index):
                (p.committed_offset, p.metadata, p.committed_leader_epoch)
                for t in resp.groups[0].topics for p in t.partitions}
    req = OffsetFetchRequest(group_id=group, require_stable=False,
                             topics=None if topics is None else [OffsetFetchRequest.OffsetFetchRequestTopic(
                                 name=t, partition_indexes=ps) for t, ps in topics])
    resp = wire.request(ApiKey.OFFSET_FETCH, v, req)
    assert v < 2 or resp.error_code == 0
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.committed_leader_epoch if v >= 5 else 4)
            for t in resp.topics for p in t.partitions}


@pytest.mark.parametrize("v", versions(ApiKey.OFFSET_COMMIT))
def test_offset_commit(wire, v):
    group = f"commit-{v}"
    resp = _commit(wire, v, group, 42, f"meta-{v}")
    assert resp.topics[0].partitions[0].error_code == 0
    expected_epoch = 4 if v >= 6 else -1
    assert _fetch(wire, 9, group) == {("topic-a", 0): (42, f"meta-{v}", expected_epoch)}
    mid, gen = _form(wire, 9, group + "-member")
    ok = _commit(wire, v, group + "-member", 7, None, generation=gen, member_id=mid)
    assert ok.topics[0].partitions[0].error_code == 0
    stale = _commit(wire, v, group + "-member", 7, None, generation=gen + 5, member_id=mid)
    assert stale.topics[0].partitions[0].error_code == Errors.ILLEGAL_GENERATION


@pytest.mark.parametrize("v", versions(ApiKey.OFFSET_FETCH))
def test_offset_fetch(wire, v):
    group = f"fetch-{v}"
    _commit(wire, 9, group, 99, "round-trip")
    if v >= 2:
        assert _fetch(wire, v, group) == {("topic-a", 0): (99, "round-trip", 4)}
    got = _fetch(wire, v, group, [("topic-a", [0, 1])])
    assert got == {("topic-a", 0): (99, "round-trip", 4), ("topic-a", 1): (-1, "", -1 if v >= 5 else 4)}


def test_offset_fetch_v8_batches_groups(wire):
    _commit(wire, 9, "batch-a", 1, "a")
    _commit(wire, 9, "batch-b", 2, "b")
    req = OffsetFetchRequest(require_stable=False, groups=[
        OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, member_id=None, member_epoch=-1, topics=None)
        for g in ("batch-a", "batch-b", "batch-none")])
    resp = wire.request(ApiKey.OFFSET_FETCH, 8, req)
    assert [(g.group_id, [p.committed_offset for t in g.topics for p in t.partitions]) for g in resp.groups] == [
        ("batch-a", [1]), ("batch-b", [2]), ("batch-none", [])]


@pytest.mark.parametrize("v", versions(ApiKey.LIST_GROUPS))
def test_list_groups(wire, v):
    _commit(wire, 9, f"listed-{v}", 1, "")
    req = ListGroupsRequest(states_filter=["Empty"] if v >= 4 else [], types_filter=["classic"] if v >= 5 else [])
    resp = wire.request(ApiKey.LIST_GROUPS, v, req)
    assert resp.error_code == 0
    listed = {g.group_id: g for g in resp.groups}
    assert f"listed-{v}" in listed
    if v >= 4:
        assert all(g.group_state == "Empty" for g in resp.groups)
        stable = wire.request(ApiKey.LIST_GROUPS, v, ListGroupsRequest(states_filter=["Stable"], types_filter=[]))
        assert f"listed-{v}" not in {g.group_id for g in stable.groups}
    if v >= 5:
        assert listed[f"listed-{v}"].group_type == "classic"


@pytest.mark.parametrize("v", versions(ApiKey.DESCRIBE_GROUPS))
def test_describe_groups(wire, v):
    group = f"describe-{v}"
    mid, _ = _form(wire, 9, group)
    _commit(wire, 9, f"offsets-only-{v}", 1, "")
    req = DescribeGroupsRequest(groups=[group, f"offsets-only-{v}", f"missing-{v}"],
                                include_authorized_operations=v >= 3)
    resp = wire.request(ApiKey.DESCRIBE_GROUPS, v, req)
    g, only, missing = resp.groups
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (0, "Stable", "consumer", "range")
    assert [(m.member_id, bytes(m.member_assignment), m.client_id) for m in g.members] == [(mid, b"A", "wire-test")]
    assert (only.error_code, only.group_state) == (0, "Empty")
    if v >= 6:  # KIP-1043
        assert (missing.error_code, missing.error_message, missing.group_state) == (
            Errors.GROUP_ID_NOT_FOUND, f"Group missing-{v} not found.", "Dead")
        assert missing.authorized_operations == -2147483648
    else:
        assert (missing.error_code, missing.group_state) == (0, "Dead")
    if v >= 3:
        assert g.authorized_operations != -2147483648


@pytest.mark.parametrize("v", versions(ApiKey.DELETE_GROUPS))
def test_delete_groups(wire, v):
    _commit(wire, 9, f"deletable-{v}", 1, "")
    busy, _ = _form(wire, 9, f"busy-{v}")
    resp = wire.request(ApiKey.DELETE_GROUPS, v, DeleteGroupsRequest(
        groups_names=[f"deletable-{v}", f"busy-{v}", f"never-{v}"]))
    assert [(r.group_id, r.error_code) for r in resp.results] == [
        (f"deletable-{v}", 0), (f"busy-{v}", Errors.NON_EMPTY_GROUP), (f"never-{v}", Errors.GROUP_ID_NOT_FOUND)]
    assert _fetch(wire, 9, f"deletable-{v}") == {}


def test_offset_delete_v0(wire):
    _commit(wire, 9, "offdel", 5, "")
    req = OffsetDeleteRequest(group_id="offdel", topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name="topic-a", partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])])
    resp = wire.request(ApiKey.OFFSET_DELETE, 0, req)
    assert resp.error_code == 0 and resp.topics[0].partitions[0].error_code == 0
    assert _fetch(wire, 9, "offdel") == {}
    missing = wire.request(ApiKey.OFFSET_DELETE, 0, OffsetDeleteRequest(group_id="no-such-group", topics=[]))
    assert missing.error_code == Errors.GROUP_ID_NOT_FOUND
