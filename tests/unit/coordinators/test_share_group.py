"""KIP-932 share groups on one shard, with injected time: joining (client-generated member ids,
epoch 0), Kafka's INVALID_REQUEST checks, fencing (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH),
group.share.max.size, the session timeout, share-state initialization before assignment
(initializing -> initialized, then a group epoch bump assigns them), several members per
partition, group ids of other types, ListGroups / DescribeGroups / DeleteGroups, and the same
state rebuilt from the records (hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.share_group import ShareGroupState
from pybroker.coordinators.group.share_group_manager import InitializeRequest, validate_heartbeat
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    JoinGroupRequest,
    ShareGroupHeartbeatRequest,
)

from .harness import ShardHarness
from .test_consumer_group import FakeImage

SESSION_MS = 45000


class SGHarness(ShardHarness):
    def __init__(self, config: GroupConfig | None = None, now_ms: int = 1_000_000, image: FakeImage | None = None):
        self.image = image or FakeImage()
        super().__init__(config or GroupConfig(initial_rebalance_delay_ms=0), now_ms)
        self.shard.share.image = self.image
        self.shard.consumer.image = self.image
        self.inits: list[InitializeRequest] = []

    def hb(self, group: str, member_id: str, epoch: int, topics: list[str] | None = None,
           rack: str | None = None) -> Any:
        req = ShareGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=epoch, rack_id=rack,
                                         subscribed_topic_names=topics)
        validate_heartbeat(req)
        resp, init = self.run(self.shard.share.heartbeat(req, "client", "/127.0.0.1", self.now))
        if init is not None:
            self.inits.append(init)
        return resp

    def complete_inits(self, fail: bool = False) -> None:
        """What the service does once the Persister answered."""
        inits, self.inits = self.inits, []
        for init in inits:
            if fail:
                self.run(self.shard.share.uninitialize(init.group_id, init.partitions))
            else:
                self.run(self.shard.share.initialize_done(init.group_id, init.partitions, self.now))

    def group(self, gid: str):
        return self.shard.share.group(gid)

    def rebuilt(self):
        fresh = SGHarness(self.config, self.now, self.image)
        for offset, (key, value) in enumerate(self.log):
            fresh.shard.replay(serde.decode(key, value), offset, self.now)
        return fresh.shard


def assignment_of(resp: Any) -> dict[bytes, set[int]]:
    return {tp.topic_id: set(tp.partitions) for tp in resp.assignment.topic_partitions if tp.partitions}


def error_of(fn, *args, **kw) -> int:
    with pytest.raises(KafkaError) as exc:
        fn(*args, **kw)
    return int(exc.value.code)


@pytest.mark.parametrize("req,message", [
    (dict(member_id="", member_epoch=0, subscribed_topic_names=["t"]), "MemberId can't be empty."),
    (dict(group_id="", member_epoch=0, subscribed_topic_names=["t"]), "GroupId can't be empty."),
    (dict(rack_id="", member_epoch=0, subscribed_topic_names=["t"]), "RackId can't be empty."),
    (dict(member_epoch=0, subscribed_topic_names=None), "SubscribedTopicNames must be set in first request."),
    (dict(member_epoch=0, subscribed_topic_names=[]), "SubscribedTopicNames must be set in first request."),
    (dict(member_epoch=-2), "MemberEpoch is invalid."),
])
def test_invalid_requests(req, message):
    base = dict(group_id="g", member_id="m", member_epoch=1, rack_id=None, subscribed_topic_names=None)
    base.update(req)
    with pytest.raises(KafkaError) as exc:
        validate_heartbeat(ShareGroupHeartbeatRequest(**base))
    assert exc.value.code == Errors.INVALID_REQUEST and exc.value.message == message


def test_join_initializes_then_assigns_with_several_members_per_partition():
    h = SGHarness()
    tid = h.image.create("t", 2)
    r = h.hb("g", "m1", 0, ["t"])
    assert r.error_code == 0 and r.member_id == "m1" and r.member_epoch == 1
    assert r.heartbeat_interval_ms == 5000
    assert assignment_of(r) == {}  # nothing initialized yet: nothing to assign
    assert h.group("g").state == ShareGroupState.STABLE
    # the coordinator asked for both partitions, at the group epoch, from -1
    assert [(i.state_epoch, i.partitions) for i in h.inits] == [(1, {tid: frozenset({0, 1})})]
    assert h.inits[0].start_offset(tid, 0) == -1
    info = h.shard.share.state_metadata["g"]
    assert info.initializing[tid].partitions == {0, 1} and not info.initialized
    # a heartbeat while the initialization is pending does not ask again
    pending, h.inits = h.inits, []
    assert h.hb("g", "m1", 1).error_code == 0 and not h.inits
    h.inits = pending
    h.complete_inits()
    assert h.shard.share.state_metadata["g"].initialized[tid].partitions == {0, 1}
    assert not h.shard.share.state_metadata["g"].initializing
    # the next heartbeat sees initialized partitions not yet assigned: epoch bump, assignment
    r = h.hb("g", "m1", 1)
    assert r.member_epoch == 2 and assignment_of(r) == {tid: {0, 1}}
    # two more members on two partitions: every member gets one, each partition is shared
    e2 = h.hb("g", "m2", 0, ["t"]).member_epoch
    h.hb("g", "m3", 0, ["t"])
    h.hb("g", "m1", 2)
    h.hb("g", "m2", e2)
    got = {m: set(x.assigned_partitions.get(tid, ())) for m, x in h.group("g").members.items()}
    assert all(got.values()), got
    assert set().union(*got.values()) == {0, 1}
    assert sum(len(v) for v in got.values()) == 4  # ceil(3/2) = 2 members per partition
    assert not h.inits  # all partitions initialized already


def test_failed_initialization_is_asked_again_after_the_retry_interval():
    h = SGHarness(GroupConfig(initial_rebalance_delay_ms=0, share_group_initialize_retry_interval_ms=1000))
    tid = h.image.create("t", 1)
    h.hb("g", "m1", 0, ["t"])
    h.complete_inits(fail=True)
    assert not h.shard.share.state_metadata["g"].initializing  # dropped: asked again next time
    r = h.hb("g", "m1", 1)
    assert [i.partitions for i in h.inits] == [{tid: frozenset({0})}]
    h.inits.clear()
    h.now += 500
    h.hb("g", "m1", r.member_epoch)
    assert not h.inits  # still pending and fresh
    h.now += 600
    h.hb("g", "m1", r.member_epoch)
    assert [i.partitions for i in h.inits] == [{tid: frozenset({0})}]  # stale: asked again


def test_new_partitions_are_initialized_and_assigned():
    h = SGHarness()
    tid = h.image.create("t", 1)
    h.hb("g", "m1", 0, ["t"])
    h.complete_inits()
    r = h.hb("g", "m1", 1)
    assert assignment_of(r) == {tid: {0}}
    h.image.add_partitions("t", 3)
    r = h.hb("g", "m1", r.member_epoch)  # metadata changed: epoch bump; partitions 1, 2 asked for
    assert [i.partitions for i in h.inits] == [{tid: frozenset({1, 2})}]
    assert r.assignment is None  # unchanged: only initialized partitions are assigned
    h.complete_inits()
    r = h.hb("g", "m1", r.member_epoch)
    assert assignment_of(r) == {tid: {0, 1, 2}}


def test_fencing_and_unknown_members():
    h = SGHarness()
    h.image.create("t", 1)
    r = h.hb("g", "m1", 0, ["t"])
    assert error_of(h.hb, "g", "m1", r.member_epoch + 1) == Errors.FENCED_MEMBER_EPOCH
    assert error_of(h.hb, "g", "nobody", 1) == Errors.UNKNOWN_MEMBER_ID
    assert error_of(h.hb, "missing", "m1", 1) == Errors.GROUP_ID_NOT_FOUND
    h.complete_inits()
    r2 = h.hb("g", "m1", r.member_epoch)
    assert r2.member_epoch == r.member_epoch + 1
    # the previous epoch is accepted (a lost response), an older one is fenced
    assert h.hb("g", "m1", r.member_epoch).error_code == 0
    assert error_of(h.hb, "g", "m1", 0, ["t"]) == Errors.FENCED_MEMBER_EPOCH
    # leaving
    r = h.hb("g", "m1", -1)
    assert r.member_epoch == -1 and h.group("g").state == ShareGroupState.EMPTY
    assert error_of(h.hb, "g", "m1", -1) == Errors.UNKNOWN_MEMBER_ID


def test_max_size():
    h = SGHarness(GroupConfig(initial_rebalance_delay_ms=0, share_group_max_size=2))
    h.image.create("t", 1)
    h.hb("g", "m1", 0, ["t"])
    h.hb("g", "m2", 0, ["t"])
    assert error_of(h.hb, "g", "m3", 0, ["t"]) == Errors.GROUP_MAX_SIZE_REACHED
    assert h.hb("g", "m2", 2).error_code == 0  # members already in still heartbeat


def test_session_timeout_fences_the_member():
    h = SGHarness()
    tid = h.image.create("t", 1)
    h.hb("g", "m1", 0, ["t"])
    h.complete_inits()
    e1 = h.hb("g", "m1", 1).member_epoch
    e2 = h.hb("g", "m2", 0, ["t"]).member_epoch
    h.advance(SESSION_MS - 1000)
    h.hb("g", "m2", e2)  # m2 keeps heartbeating, m1 does not
    h.advance(2000)
    g = h.group("g")
    assert set(g.members) == {"m2"} and g.group_epoch > e1
    r = h.hb("g", "m2", e2)
    assert r.member_epoch == g.group_epoch and g.members["m2"].assigned_partitions == {tid: frozenset({0})}
    h.advance(SESSION_MS + 1)
    assert h.group("g").state == ShareGroupState.EMPTY


def test_group_config_overrides_session_timeout_and_interval():
    h = SGHarness()
    h.image.configs = {(32, "g"): {"share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "7000"}}
    h.image.create("t", 1)
    assert h.hb("g", "m1", 0, ["t"]).heartbeat_interval_ms == 7000
    h.advance(46000)
    assert "m1" in h.group("g").members
    h.advance(5000)
    assert not h.group("g").members


def test_other_group_types_keep_their_ids():
    h = SGHarness()
    h.image.create("t", 1)
    # a classic group holds "c": a share heartbeat for it is GROUP_ID_NOT_FOUND
    h.join("c", member_id="")
    h.commit("c", {("t", 0): (5, None)})
    assert error_of(h.hb, "c", "m1", 0, ["t"]) == Errors.GROUP_ID_NOT_FOUND
    h.hb("s", "m1", 0, ["t"])
    # JoinGroup: INCONSISTENT_GROUP_PROTOCOL; ConsumerGroupHeartbeat / offsets: GROUP_ID_NOT_FOUND
    join = JoinGroupRequest(group_id="s", session_timeout_ms=10000, rebalance_timeout_ms=30000, member_id="",
                            group_instance_id=None, protocol_type="consumer", reason=None,
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    answer = h.run(h.shard.classic_join(join, 9, "c", "/h", h.now)).value
    assert (answer.error_code, answer.member_id) == (Errors.INCONSISTENT_GROUP_PROTOCOL, "")
    req = ConsumerGroupHeartbeatRequest(group_id="s", member_id="x", member_epoch=0, instance_id=None,
                                        rack_id=None, rebalance_timeout_ms=30000, subscribed_topic_names=["t"],
                                        subscribed_topic_regex=None, server_assignor=None, topic_partitions=[])
    assert error_of(h.shard.consumer_heartbeat, req, 1, "c", "/h", h.now) == Errors.GROUP_ID_NOT_FOUND
    assert error_of(h.shard.raise_if_share_group, "s") == Errors.GROUP_ID_NOT_FOUND
    d = h.shard.share.describe("c", 0)
    assert d.error_code == Errors.GROUP_ID_NOT_FOUND and d.error_message == "Group c is not a share group."
    d = h.shard.share.describe("nope", 0)
    assert d.error_message == "Group nope not found."
    cd = h.shard.consumer_group_describe("s", False)
    assert cd.error_code == Errors.GROUP_ID_NOT_FOUND and cd.error_message == "Group s is not a consumer group."
    dg = h.shard.describe_group("s", False, 6)
    assert dg.error_code == Errors.GROUP_ID_NOT_FOUND and dg.error_message == "Group s is not a classic group."
    assert h.shard.describe_group("s", False, 5).group_state == "Dead"


def test_list_describe_delete():
    h = SGHarness()
    tid = h.image.create("t", 2)
    h.hb("s", "m1", 0, ["t"], rack="r1")
    h.complete_inits()
    r = h.hb("s", "m1", 1)
    listed = {(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in h.shard.list_groups([], [])}
    assert ("s", "share", "share", "Stable") in listed
    assert [g.group_id for g in h.shard.list_groups([], ["share"])] == ["s"]
    assert [g.group_id for g in h.shard.list_groups(["empty"], ["share"])] == []
    assert [g.group_id for g in h.shard.list_groups([], ["consumer"])] == []
    d = h.shard.share.describe("s", 123)
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == \
        (0, "Stable", 2, 2, "simple")
    (m,) = d.members
    assert (m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host, m.subscribed_topic_names) == \
        ("m1", "r1", r.member_epoch, "client", "/127.0.0.1", ["t"])
    assert [(tp.topic_id, tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions] == [(tid, "t", [0, 1])]
    assert d.authorized_operations == 123
    assert h.run(h.shard.delete_groups(["s"])) == [("s", Errors.NON_EMPTY_GROUP)]
    h.hb("s", "m1", -1)
    assert [g.group_state for g in h.shard.list_groups(["Empty"], ["share"])] == ["Empty"]
    records: list = []
    assert h.shard.share.delete_state_candidates("s", records) == {tid: frozenset({0, 1})}
    h.run(type(h.shard.delete_groups(["x"]))(records=records))
    assert h.shard.share.state_metadata["s"].deleting == {tid: "t"}
    assert h.run(h.shard.delete_groups(["s"])) == [("s", 0)]
    assert h.group("s") is None and "s" not in h.shard.share.state_metadata
    assert h.rebuilt().share.group("s") is None


OPS = st.lists(st.tuples(st.sampled_from(["join", "hb", "leave", "init", "tick", "grow"]),
                         st.integers(0, 3)), max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_replay_rebuilds_the_same_groups(ops):
    h = SGHarness()
    h.image.create("t", 2)
    h.image.create("u", 1)
    epochs: dict[str, int] = {}
    for op, n in ops:
        mid = f"m{n}"
        try:
            if op == "join" and mid not in epochs:
                epochs[mid] = h.hb("g", mid, 0, ["t"] if n % 2 else ["t", "u"]).member_epoch
            elif op == "hb" and mid in epochs:
                epochs[mid] = h.hb("g", mid, epochs[mid]).member_epoch
            elif op == "leave" and mid in epochs:
                h.hb("g", mid, -1)
                del epochs[mid]
            elif op == "init":
                h.complete_inits(fail=n == 0)
            elif op == "tick":
                h.advance(SESSION_MS // 2)
                for gone in [m for m in epochs if h.group("g") is None or m not in h.group("g").members]:
                    del epochs[gone]
            elif op == "grow":
                h.image.add_partitions("t", 2 + n)
        except KafkaError:
            epochs.pop(mid, None)
    fresh = h.rebuilt().share
    live = h.shard.share
    assert set(fresh.groups) == set(live.groups)
    for gid, g in live.groups.items():
        f = fresh.groups[gid]
        assert (f.group_epoch, f.metadata_hash, f.target_assignment_epoch, f.target_assignment, f.members,
                f.subscribed_topic_name_counts) == \
            (g.group_epoch, g.metadata_hash, g.target_assignment_epoch, g.target_assignment, g.members,
             g.subscribed_topic_name_counts)
    assert {g: (i.initialized, set(i.initializing), i.deleting) for g, i in fresh.state_metadata.items()} == \
        {g: (i.initialized, set(i.initializing), i.deleting) for g, i in live.state_metadata.items()}


def test_a_deleted_topic_leaves_the_share_state_and_a_new_one_is_initialized():
    h = SGHarness()
    old = h.image.create("t", 1)
    h.hb("g", "m1", 0, ["t"])
    h.complete_inits()
    e = h.hb("g", "m1", 1).member_epoch
    h.image.delete("t")
    r = h.hb("g", "m1", e)
    assert old not in h.shard.share.state_metadata["g"].initialized
    assert r.assignment is not None and assignment_of(r) == {}
    new = h.image.create("t", 2)  # the same name again, a new topic id
    r = h.hb("g", "m1", r.member_epoch)
    assert [i.partitions for i in h.inits] == [{new: frozenset({0, 1})}]
    h.complete_inits()
    r = h.hb("g", "m1", r.member_epoch)
    assert assignment_of(r) == {new: {0, 1}}
    assert set(h.rebuilt().share.state_metadata["g"].initialized) == {new}
