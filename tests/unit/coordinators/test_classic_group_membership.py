"""Classic group state machine: join/sync/heartbeat/leave, deadlines on an injected clock."""

from __future__ import annotations

from pybroker.coordinators.group.classic_group import ClassicGroupState as S
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.protocol.errors import Errors

from .harness import ShardHarness


def test_first_join_v4_without_member_id_gets_member_id_required_then_completes():
    h = ShardHarness()
    first = h.join("g", version=4)
    assert first.done and first.value.error_code == Errors.MEMBER_ID_REQUIRED
    mid = first.value.member_id
    assert mid.startswith("client-")
    second = h.join("g", member_id=mid, version=4)
    assert second.done and second.value.error_code == 0
    r = second.value
    assert (r.generation_id, r.leader, r.member_id, r.protocol_name) == (1, mid, mid, "range")
    assert [m.member_id for m in r.members] == [mid]
    assert h.shard.groups.group("g").state == S.COMPLETING_REBALANCE


def test_join_v3_without_member_id_joins_at_once():
    h = ShardHarness()
    f = h.join("g", version=3)
    assert f.done and f.value.error_code == 0 and f.value.generation_id == 1


def test_join_waits_for_every_known_member_then_leader_gets_members_and_sync_distributes():
    h = ShardHarness()
    leader, follower = h.form_group("g", 2)
    g = h.shard.groups.group("g")
    assert g.state == S.STABLE and g.generation_id == 1
    # a third member joins: the group rebalances and waits for both old members
    new = h.join("g").value.member_id
    f3 = h.join("g", member_id=new)
    assert not f3.done and g.state == S.PREPARING_REBALANCE
    assert h.heartbeat("g", follower, 1) == Errors.REBALANCE_IN_PROGRESS
    f1 = h.join("g", member_id=leader)
    assert not f1.done
    f2 = h.join("g", member_id=follower)
    assert f1.done and f2.done and f3.done
    assert {f.value.generation_id for f in (f1, f2, f3)} == {2}
    by_id = {f.value.member_id: f.value for f in (f1, f2, f3)}
    assert len(by_id[leader].members) == 3 and by_id[follower].members == [] and by_id[new].members == []
    s_new = h.sync("g", new, 2)
    assert not s_new.done  # waits for the leader's assignment
    s_leader = h.sync("g", leader, 2, {leader: b"A", follower: b"B", new: b"C"})
    assert s_new.done and s_new.value.assignment == b"C" and s_leader.value.assignment == b"A"
    # a follower syncing after the group is Stable gets its assignment at once
    s_f = h.sync("g", follower, 2)
    assert s_f.done and s_f.value.assignment == b"B"
    assert g.state == S.STABLE


def test_heartbeat_errors():
    h = ShardHarness()
    leader, = h.form_group("g", 1)
    assert h.heartbeat("g", leader, 1) == 0
    assert h.heartbeat("g", leader, 7) == Errors.ILLEGAL_GENERATION
    assert h.heartbeat("g", "nobody", 1) == Errors.UNKNOWN_MEMBER_ID
    assert h.heartbeat("unknown-group", leader, 1) == Errors.UNKNOWN_MEMBER_ID


def test_sync_errors():
    h = ShardHarness()
    leader, = h.form_group("g", 1)
    assert h.sync("g", leader, 5).value.error_code == Errors.ILLEGAL_GENERATION
    assert h.sync("g", "nobody", 1).value.error_code == Errors.UNKNOWN_MEMBER_ID
    assert h.sync("nogroup", leader, 1).value.error_code == Errors.UNKNOWN_MEMBER_ID
    other = h.join("g").value.member_id
    h.join("g", member_id=other)  # rebalance starts
    assert h.sync("g", leader, 1).value.error_code == Errors.REBALANCE_IN_PROGRESS


def test_session_expiry_removes_member_and_triggers_rebalance():
    h = ShardHarness()
    leader, follower = h.form_group("g", 2, session_ms=6000)
    g = h.shard.groups.group("g")
    for _ in range(3):  # the leader keeps heartbeating, the follower went silent
        h.advance(2500)
        assert h.heartbeat("g", leader, 1) in (0, Errors.REBALANCE_IN_PROGRESS)
    assert follower not in g.members
    assert g.state == S.PREPARING_REBALANCE
    f = h.join("g", member_id=leader)
    assert f.done and f.value.generation_id == 2 and len(f.value.members) == 1


def test_rebalance_timeout_drops_members_that_did_not_rejoin():
    h = ShardHarness()
    leader, follower = h.form_group("g", 2, session_ms=60000, rebalance_ms=5000)
    f = h.join("g", member_id=leader, rebalance_ms=5000, protocols=[("range", b"changed")])
    assert not f.done
    h.advance(5000)
    assert f.done and f.value.error_code == 0 and f.value.generation_id == 2
    assert follower not in h.shard.groups.group("g").members


def test_member_that_never_syncs_is_removed_after_rebalance_timeout():
    h = ShardHarness()
    a = h.join("g").value.member_id
    b = h.join("g").value.member_id
    h.join("g", member_id=a, rebalance_ms=4000, session_ms=60000)
    fb = h.join("g", member_id=b, rebalance_ms=4000, session_ms=60000)
    assert fb.done
    leader = fb.value.leader
    other = b if leader == a else a
    h.sync("g", leader, 1, {a: b"1", b: b"2"})
    g = h.shard.groups.group("g")
    assert g.state == S.STABLE and g.pending_sync == {other}
    h.advance(4000)
    assert other not in g.members and g.state == S.PREPARING_REBALANCE


def test_last_member_leaving_empties_the_group_with_a_new_generation():
    h = ShardHarness()
    leader, follower = h.form_group("g", 2)
    resp = h.leave("g", [(leader, None), (follower, None), ("ghost", None)])
    assert resp.error_code == 0
    assert [m.error_code for m in resp.members] == [0, 0, Errors.UNKNOWN_MEMBER_ID]
    g = h.shard.groups.group("g")
    assert g.state == S.EMPTY and g.generation_id == 2 and not g.members
    # the Empty group was persisted: a restart sees it Empty at generation 2
    rebuilt = h.rebuilt().groups.group("g")
    assert rebuilt.state == S.EMPTY and rebuilt.generation_id == 2


def test_leave_v0_reports_the_member_error_top_level():
    h = ShardHarness()
    h.form_group("g", 1)
    assert h.leave("g", [("ghost", None)], version=0).error_code == Errors.UNKNOWN_MEMBER_ID
    assert h.leave("nogroup", [("ghost", None)], version=1).error_code == Errors.UNKNOWN_MEMBER_ID


def test_invalid_session_timeout_and_inconsistent_protocol_and_max_size():
    h = ShardHarness(GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=6000,
                                 max_session_timeout_ms=30000, max_size=1))
    assert h.join("g", session_ms=1000).value.error_code == Errors.INVALID_SESSION_TIMEOUT
    assert h.join("g", session_ms=30001).value.error_code == Errors.INVALID_SESSION_TIMEOUT
    assert h.shard.groups.group("g") is None  # a refused join leaves no group behind
    h.form_group("g", 1, session_ms=10000)
    # a full group refuses new members first (Kafka checks the size before the protocols)
    assert h.join("g").value.error_code == Errors.GROUP_MAX_SIZE_REACHED
    h2 = ShardHarness()
    h2.form_group("g", 1)
    assert h2.join("g", protocol_type="connect").value.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert h2.join("g", protocols=[("other", b"")]).value.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_selected_by_vote_among_common_protocols():
    h = ShardHarness()
    a = h.join("g", protocols=[("range", b""), ("roundrobin", b"")]).value.member_id
    b = h.join("g", protocols=[("roundrobin", b""), ("range", b"")]).value.member_id
    c = h.join("g", protocols=[("roundrobin", b""), ("sticky", b"")]).value.member_id
    h.join("g", member_id=a, protocols=[("range", b""), ("roundrobin", b"")])
    h.join("g", member_id=b, protocols=[("roundrobin", b""), ("range", b"")])
    f = h.join("g", member_id=c, protocols=[("roundrobin", b""), ("sticky", b"")])
    assert f.value.protocol_name == "roundrobin"


def test_static_member_restart_takes_its_place_without_rebalance():
    h = ShardHarness()
    f = h.join("g", instance_id="i-1", version=5)
    assert f.done and f.value.error_code == 0  # static members skip MEMBER_ID_REQUIRED
    old = f.value.member_id
    h.sync("g", old, 1, {old: b"mine"}, instance_id="i-1")
    g = h.shard.groups.group("g")
    assert g.state == S.STABLE
    again = h.join("g", instance_id="i-1", version=5)
    assert again.done and again.value.error_code == 0
    new = again.value.member_id
    assert new != old and again.value.generation_id == 1 and g.state == S.STABLE
    assert h.sync("g", new, 1, instance_id="i-1").value.assignment == b"mine"
    # the old incarnation is fenced
    assert h.heartbeat("g", old, 1, instance_id="i-1") == Errors.FENCED_INSTANCE_ID
    assert h.sync("g", old, 1, instance_id="i-1").value.error_code == Errors.FENCED_INSTANCE_ID
    assert h.join("g", member_id=old, instance_id="i-1").value.error_code == Errors.FENCED_INSTANCE_ID
    # the replacement is persisted
    assert new in h.rebuilt().groups.group("g").members


def test_static_member_rejoining_with_new_subscription_rebalances():
    h = ShardHarness()
    f = h.join("g", instance_id="i-1")
    h.sync("g", f.value.member_id, 1, {f.value.member_id: b"x"}, instance_id="i-1")
    again = h.join("g", instance_id="i-1", protocols=[("range", b"other topics")])
    assert again.done and again.value.generation_id == 2


def test_static_leave_by_instance_id_and_fencing():
    h = ShardHarness()
    f = h.join("g", instance_id="i-1")
    mid = f.value.member_id
    resp = h.leave("g", [("wrong-id", "i-1")])
    assert resp.members[0].error_code == Errors.FENCED_INSTANCE_ID
    resp = h.leave("g", [("", "i-1"), ("", "i-unknown")])
    assert [m.error_code for m in resp.members] == [0, Errors.UNKNOWN_MEMBER_ID]
    assert resp.members[0].member_id == mid


def test_initial_rebalance_delay_extends_while_members_arrive():
    h = ShardHarness(GroupConfig(initial_rebalance_delay_ms=3000))
    a = h.join("g", version=3, rebalance_ms=10000)
    assert not a.done
    h.advance(2000)
    b = h.join("g", version=3, rebalance_ms=10000)
    h.advance(1000)  # first delay over, but a member arrived: wait another delay
    assert not a.done and not b.done
    h.advance(3000)
    assert a.done and b.done and a.value.generation_id == 1 and len(a.value.members or b.value.members) == 2


def test_pending_member_that_never_rejoins_expires():
    h = ShardHarness()
    pending = h.join("g", version=4, session_ms=6000).value.member_id
    g = h.shard.groups.group("g")
    assert pending in g.pending_members
    h.advance(6000)
    assert pending not in g.pending_members
    assert h.join("g", member_id=pending, version=4).value.error_code == Errors.UNKNOWN_MEMBER_ID


def test_unload_answers_waiting_joins_with_not_coordinator():
    h = ShardHarness()
    a, b = h.form_group("g", 2)
    f = h.join("g", member_id=a, protocols=[("range", b"new")])
    assert not f.done
    h.shard.on_unloaded()
    assert f.done and f.value.error_code == Errors.NOT_COORDINATOR
