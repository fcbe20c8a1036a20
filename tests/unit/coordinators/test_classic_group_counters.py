"""ClassicGroup keeps Kafka's counters (members awaiting a join answer, how many members
support each protocol) instead of walking its members on every JoinGroup: after any sequence
of joins, rejoins with other protocols, static replacements, syncs, leaves and session
expiries, the counters equal what a walk over the members computes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.coordinators.group.classic_group import ClassicGroup, ClassicGroupMember, Future

from .harness import ShardHarness

PROTOCOL_SETS = [[("range", b"r")], [("range", b"r"), ("roundrobin", b"x")], [("roundrobin", b"x")],
                 [("sticky", b"s"), ("range", b"r2")], [("range", b"a"), ("range", b"b")]]

step = st.one_of(
    st.tuples(st.just("join_new"), st.integers(0, len(PROTOCOL_SETS) - 1), st.sampled_from([3, 5])),
    st.tuples(st.just("join_static"), st.integers(0, 2), st.integers(0, len(PROTOCOL_SETS) - 1)),
    st.tuples(st.just("rejoin"), st.integers(0, 20), st.integers(0, len(PROTOCOL_SETS) - 1)),
    st.tuples(st.just("sync"), st.integers(0, 20)),
    st.tuples(st.just("leave"), st.integers(0, 20)),
    st.tuples(st.just("advance"), st.sampled_from([1000, 6000, 11000, 31000])),
)


def walked(group: ClassicGroup) -> tuple[int, set[str]]:
    awaiting = sum(1 for m in group.members.values() if m.join_future is not None)
    sets = [{n for n, _ in m.protocols} for m in group.members.values()]
    return awaiting, (set.intersection(*sets) if sets else set())


def assert_counters(group: ClassicGroup) -> None:
    awaiting, candidates = walked(group)
    assert group.awaiting_join_count() == awaiting
    assert group.candidate_protocols() == candidates
    assert group.has_all_members_joined() == (awaiting == len(group.members) and not group.pending_members)
    for protocols in PROTOCOL_SETS:
        expected = (bool(protocols) if not group.members
                    else bool({n for n, _ in protocols} & candidates))
        assert group.supports_protocols(group.protocol_type or "consumer", protocols) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(step, max_size=30))
def test_counters_match_a_walk_over_the_members(steps):
    h = ShardHarness()
    for s in steps:
        g = h.shard.groups.group("g")
        ids = list(g.members) if g is not None else []
        kind = s[0]
        if kind == "join_new":
            h.join("g", version=s[2], protocols=PROTOCOL_SETS[s[1]])
        elif kind == "join_static":
            h.join("g", version=5, instance_id=f"i{s[1]}", protocols=PROTOCOL_SETS[s[2]])
        elif kind == "rejoin" and ids:
            mid = ids[s[1] % len(ids)]
            member = g.members[mid]
            h.join("g", member_id=mid, version=5, instance_id=member.group_instance_id,
                   protocols=PROTOCOL_SETS[s[2]])
        elif kind == "sync" and ids:
            mid = ids[s[1] % len(ids)]
            h.sync("g", mid, g.generation_id, {m: b"x" for m in ids} if mid == g.leader_id else None,
                   instance_id=g.members[mid].group_instance_id)
        elif kind == "leave" and ids:
            mid = ids[s[1] % len(ids)]
            h.leave("g", [(mid, None)])
        elif kind == "advance":
            h.advance(s[1])
        g = h.shard.groups.group("g")
        if g is not None:
            assert_counters(g)
    g = h.shard.groups.group("g")
    if g is not None:
        # a reload builds the counters from the GroupMetadata record
        reloaded = h.rebuilt().groups.group("g")
        if reloaded is not None:
            assert_counters(reloaded)


def test_removed_member_no_longer_counts_when_its_fields_change():
    g = ClassicGroup("g")
    a = ClassicGroupMember("a", None, "c", "h", 1000, 1000, "consumer", [("range", b"")])
    b = ClassicGroupMember("b", None, "c", "h", 1000, 1000, "consumer", [("range", b""), ("rr", b"")])
    g.add(a, Future())
    g.add(b)
    assert (g.awaiting_join_count(), g.candidate_protocols()) == (1, {"range"})
    assert not g.has_all_members_joined()
    b.join_future = Future()
    assert g.has_all_members_joined()
    a.protocols = [("rr", b"")]
    assert g.candidate_protocols() == {"rr"}
    g.remove("a")
    assert (g.awaiting_join_count(), g.candidate_protocols()) == (1, {"range", "rr"})
    a.join_future, a.protocols = None, [("other", b"")]  # no longer in the group: no effect on it
    assert (g.awaiting_join_count(), g.candidate_protocols()) == (1, {"range", "rr"})
    g.remove("b")
    assert (g.awaiting_join_count(), g.candidate_protocols()) == (0, set())
    assert g.supports_protocols("consumer", [("x", b"")])
