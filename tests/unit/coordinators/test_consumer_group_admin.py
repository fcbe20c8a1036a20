"""Consumer groups next to the rest of the shard: OffsetCommit/OffsetFetch member-epoch
checks, ListGroups/DescribeGroups/ConsumerGroupDescribe/DeleteGroups/OffsetDelete, and the
hand-over between classic and consumer groups of one id."""

from __future__ import annotations

from pybroker.coordinators.group.consumer_group import ConsumerGroupState
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.protocol.errors import Errors

from .test_consumer_group import CGHarness, Client, settle


def commit(h, group, member_id, epoch, version=9, offset=5):
    return h.commit(group, {("t", 0): (offset, "meta")}, generation=epoch, member_id=member_id,
                    version=version)[("t", 0)]


def test_offset_commit_checks_member_and_epoch():
    h = CGHarness()
    h.image.create("t", 2)
    a = Client(h, "g", ["t"])
    a.join()
    assert commit(h, "g", a.member_id, a.epoch) == 0
    assert commit(h, "g", a.member_id, a.epoch - 1) == Errors.STALE_MEMBER_EPOCH
    assert commit(h, "g", a.member_id, a.epoch + 1) == Errors.STALE_MEMBER_EPOCH
    assert commit(h, "g", "stranger", a.epoch) == Errors.UNKNOWN_MEMBER_ID
    assert commit(h, "g", "", -1) == Errors.UNKNOWN_MEMBER_ID  # not while the group has members
    assert commit(h, "g", a.member_id, a.epoch, version=8) == Errors.UNSUPPORTED_VERSION
    a.leave()
    assert commit(h, "g", "", -1, offset=9) == 0  # an Empty group takes admin commits
    assert h.fetch("g")[("t", 0)].offset == 9
    # committing never turned the consumer group into a classic one, on write or on replay
    assert h.shard.groups.group("g") is None
    rebuilt = h.rebuilt()
    assert rebuilt.groups.group("g") is None and rebuilt.consumer.group("g") is not None


def test_offset_fetch_checks_member_and_epoch():
    h = CGHarness()
    h.image.create("t", 1)
    a = Client(h, "g", ["t"])
    a.join()
    v = h.shard.consumer.validate_offset_fetch
    assert v("g", None, -1) == 0  # admin
    assert v("g", a.member_id, a.epoch) == 0
    assert v("g", a.member_id, a.epoch + 1) == Errors.STALE_MEMBER_EPOCH
    assert v("g", "stranger", 1) == Errors.UNKNOWN_MEMBER_ID
    assert v("other-group", "x", 3) == 0


def test_list_describe_and_delete():
    h = CGHarness()
    tid = h.image.create("t", 2)
    a, b = Client(h, "g", ["t"]), Client(h, "g", ["t"])
    a.join()
    b.join()
    settle([a, b])
    h.form_group("classic", 1)
    listed = {g.group_id: g for g in h.shard.list_groups([], [])}
    assert listed["g"].group_type == "consumer" and listed["g"].protocol_type == "consumer"
    assert listed["g"].group_state == "Stable" and listed["classic"].group_type == "classic"
    assert [g.group_id for g in h.shard.list_groups([], ["consumer"])] == ["g"]
    assert [g.group_id for g in h.shard.list_groups([], ["classic"])] == ["classic"]
    assert [g.group_id for g in h.shard.list_groups(["empty"], [])] == []
    # DescribeGroups (v0-5) of a consumer group: Dead, as Kafka 4 answers for a non-classic group
    assert h.shard.describe_group("g", False).group_state == "Dead"
    d = h.shard.consumer_group_describe("g", True)
    assert d.error_code == 0 and d.group_state == "Stable" and d.assignor_name == "uniform"
    assert d.group_epoch == 2 and d.assignment_epoch == 2 and d.authorized_operations > 0
    by_member = {m.member_id: m for m in d.members}
    assert set(by_member) == {a.member_id, b.member_id}
    ma = by_member[a.member_id]
    assert ma.member_epoch == 2 and ma.subscribed_topic_names == ["t"] and ma.client_id == "client"
    assert [(tp.topic_id, tp.topic_name, set(tp.partitions)) for tp in ma.assignment.topic_partitions] == \
        [(tid, "t", a.owned[tid])]
    assert ma.target_assignment.topic_partitions[0].partitions == ma.assignment.topic_partitions[0].partitions
    assert h.shard.consumer_group_describe("classic", False).error_code == Errors.GROUP_ID_NOT_FOUND
    assert h.shard.consumer_group_describe("nope", False).error_code == Errors.GROUP_ID_NOT_FOUND
    # OffsetDelete: a subscribed topic is refused
    top, parts, _ = h.shard.offsets.delete_offsets("g", [("t", [0]), ("x", [0])])
    assert top == 0 and dict(parts)["t"] == [(0, Errors.GROUP_SUBSCRIBED_TO_TOPIC)] and dict(parts)["x"] == [(0, 0)]
    # DeleteGroups: only once Empty; offsets go with it
    assert h.run(h.shard.delete_groups(["g"])) == [("g", Errors.NON_EMPTY_GROUP)]
    commit(h, "g", a.member_id, a.epoch)
    a.leave()
    b.leave()
    assert h.group("g").state == ConsumerGroupState.EMPTY
    assert h.run(h.shard.delete_groups(["g"])) == [("g", 0)]
    assert h.group("g") is None and h.fetch("g") == {}
    assert h.rebuilt().consumer.group("g") is None


def test_offsets_only_classic_group_becomes_a_consumer_group_and_back():
    h = CGHarness()
    h.image.create("t", 1)
    assert commit(h, "g", "", -1, version=8, offset=3) == 0
    assert h.shard.groups.group("g") is not None  # Empty classic group holding offsets
    a = Client(h, "g", ["t"])
    a.join()
    assert h.shard.groups.group("g") is None and h.group("g") is not None
    assert h.fetch("g")[("t", 0)].offset == 3
    rebuilt = h.rebuilt()
    assert rebuilt.groups.group("g") is None and rebuilt.consumer.group("g") is not None
    # a classic member joining the consumer group is one of its members (KIP-848 mixed group):
    # first MEMBER_ID_REQUIRED, as in a classic group; nothing is recorded for it yet
    log_size = len(h.log)
    fut = h.run(h.shard.classic_join(_join_req("g"), 5, "client", "/127.0.0.1", h.now))
    assert fut.done and fut.value.error_code == Errors.MEMBER_ID_REQUIRED
    assert len(h.log) == log_size and h.group("g") is not None
    # ... and an Empty consumer group gives way to a classic group
    a.leave()
    fut = h.run(h.shard.classic_join(_join_req("g"), 5, "client", "/127.0.0.1", h.now))
    assert fut.done and fut.value.error_code == Errors.MEMBER_ID_REQUIRED  # the classic join goes on
    assert h.group("g") is None and h.shard.groups.group("g") is not None
    assert h.rebuilt().consumer.group("g") is None
    joined = h.run(h.shard.classic_join(_join_req("g", fut.value.member_id), 5, "client", "/127.0.0.1", h.now))
    assert joined.done and joined.value.error_code == 0
    # a consumer member cannot take over a classic group whose embedded protocol is not a
    # ConsumerProtocolSubscription (b"m"): the upgrade fails, the group stays classic
    resp = h.hb("g", "m", 0, topics=["t"], owned={}, rebalance_ms=1000)
    assert resp.error_code == Errors.GROUP_ID_NOT_FOUND
    assert h.shard.groups.group("g") is not None and h.group("g") is None


def _join_req(group, member_id=""):
    from pybroker.protocol.messages import JoinGroupRequest
    return JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=member_id,
                            group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")],
                            reason=None)


def test_offsets_of_an_empty_consumer_group_expire_then_the_group_goes():
    h = CGHarness(GroupConfig(offsets_retention_ms=100_000, consumer_group_session_timeout_ms=10**9,
                              offsets_retention_check_interval_ms=10**9))
    h.image.create("t", 1)
    a = Client(h, "g", ["t"])
    a.join()
    commit(h, "g", a.member_id, a.epoch)
    h.advance(100_001)
    h.run(h.shard.cleanup_group_metadata(h.now))
    assert h.fetch("g")[("t", 0)] is not None, "a subscribed topic's offsets do not expire"
    a.leave()
    h.run(h.shard.cleanup_group_metadata(h.now))
    assert h.fetch("g") == {} and h.group("g") is None
    assert h.rebuilt().consumer.group("g") is None
