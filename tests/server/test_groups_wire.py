"""Group behaviour over the wire: concurrent rebalances, the internal topic, restarts."""

from __future__ import annotations

import tempfile
import threading

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from pybroker.testing import EmbeddedBroker

from .test_live_versions import create_topic
from .wire import WireClient

OVERRIDES = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 4,
             "group.min.session.timeout.ms": 500}


def join(c, group, member_id="", session_ms=10000, instance_id=None, v=9):
    req = JoinGroupRequest(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=10000,
                           member_id=member_id, group_instance_id=instance_id, protocol_type="consumer",
                           protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")],
                           reason=None)
    r = c.request(ApiKey.JOIN_GROUP, v, req)
    if r.error_code == Errors.MEMBER_ID_REQUIRED:
        return join(c, group, r.member_id, session_ms, instance_id, v)
    return r


def sync(c, group, r, assignments=None):
    return c.request(ApiKey.SYNC_GROUP, 5, SyncGroupRequest(
        group_id=group, generation_id=r.generation_id, member_id=r.member_id, group_instance_id=None,
        protocol_type=None, protocol_name=None,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                     for m, a in (assignments or {}).items()]))


def describe(c, group):
    return c.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[group],
                                                                      include_authorized_operations=False)).groups[0]


def commit(c, group, offset, metadata, generation=-1, member_id=""):
    return c.request(ApiKey.OFFSET_COMMIT, 9, OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                             committed_leader_epoch=-1,
                                                             committed_metadata=metadata)])]))


def fetch(c, group):
    """Committed offsets; retries while the coordinator loads, as clients do."""
    for _ in range(200):
        r = c.request(ApiKey.OFFSET_FETCH, 9, OffsetFetchRequest(require_stable=True, groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=-1,
                                                       topics=None)]))
        if r.groups[0].error_code != Errors.COORDINATOR_LOAD_IN_PROGRESS:
            break
        threading.Event().wait(0.05)
    assert r.groups[0].error_code == 0
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata) for t in r.groups[0].topics
            for p in t.partitions}


def test_two_members_rebalance_concurrently_and_leader_assigns():
    with EmbeddedBroker(overrides=OVERRIDES) as b:
        a, c = WireClient("127.0.0.1", b.port), WireClient("127.0.0.1", b.port)
        ra = join(a, "rb")
        sync(a, "rb", ra, {ra.member_id: b"all"})
        results = {}
        # the second member's join starts a rebalance that waits for the first to rejoin
        t = threading.Thread(target=lambda: results.setdefault("c", join(c, "rb")))
        t.start()
        while describe(a, "rb").group_state != "PreparingRebalance":
            pass
        hb = a.request(ApiKey.HEARTBEAT, 4, HeartbeatRequest(group_id="rb", generation_id=1,
                                                            member_id=ra.member_id, group_instance_id=None))
        assert hb.error_code == Errors.REBALANCE_IN_PROGRESS
        ra2 = join(a, "rb", ra.member_id)
        t.join(10)
        rc = results["c"]
        assert ra2.generation_id == rc.generation_id == 2
        leader, follower = (ra2, rc) if ra2.leader == ra2.member_id else (rc, ra2)
        assert len(leader.members) == 2 and follower.members == []
        out = {}
        t2 = threading.Thread(target=lambda: out.setdefault("f", sync(a if follower is ra2 else c, "rb", follower)))
        t2.start()
        sl = sync(a if leader is ra2 else c, "rb", leader, {leader.member_id: b"L", follower.member_id: b"F"})
        t2.join(10)
        assert sl.assignment == b"L" and out["f"].assignment == b"F"
        assert describe(a, "rb").group_state == "Stable"
        a.close()
        c.close()


def test_consumer_offsets_is_created_internal_and_compacted():
    with EmbeddedBroker(overrides=OVERRIDES) as b:
        c = WireClient("127.0.0.1", b.port)
        r = c.request(ApiKey.FIND_COORDINATOR, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=["x"]))
        assert r.coordinators[0].error_code == 0
        md = c.request(ApiKey.METADATA, 12, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="__consumer_offsets", topic_id=bytes(16))],
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        t = md.topics[0]
        assert t.error_code == 0 and t.is_internal and len(t.partitions) == 4
        cfg = c.request(ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name="__consumer_offsets",
                                                           configuration_keys=["cleanup.policy"])],
            include_synonyms=False, include_documentation=False))
        assert cfg.results[0].configs[0].value == "compact"
        c.close()


def test_offsets_and_groups_survive_a_restart_and_loaded_members_expire():
    log_dir = tempfile.mkdtemp(prefix="pybroker-groups-")
    with EmbeddedBroker(log_dir=log_dir, overrides=OVERRIDES) as b:
        c = WireClient("127.0.0.1", b.port)
        create_topic(c, "t")
        assert commit(c, "simple", 12, "kept")
        r = join(c, "live", session_ms=1000)
        sync(c, "live", r, {r.member_id: b"asg"})
        commit(c, "live", 5, "m", generation=r.generation_id, member_id=r.member_id)
        c.close()
    with EmbeddedBroker(log_dir=log_dir, overrides=OVERRIDES) as b:
        c = WireClient("127.0.0.1", b.port)
        assert fetch(c, "simple") == {("t", 0): (12, "kept")}
        assert fetch(c, "live") == {("t", 0): (5, "m")}
        assert describe(c, "simple").group_state == "Empty"
        d = describe(c, "live")
        assert d.group_state == "Stable" and [bytes(m.member_assignment) for m in d.members] == [b"asg"]
        # the loaded member never heartbeats: its session expires and the group empties
        for _ in range(200):
            if describe(c, "live").group_state == "Empty":
                break
            threading.Event().wait(0.05)
        assert describe(c, "live").group_state == "Empty"
        c.close()
