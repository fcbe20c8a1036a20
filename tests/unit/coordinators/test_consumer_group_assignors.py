"""Server-side assignors (uniform, range) and the reconciliation state machine, as properties:
every subscribed partition goes to exactly one subscriber, balance, stickiness, and that
reconciling never hands a member a partition another member still owns."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.coordinators.group.assignors import MemberSpec, get_assignor
from pybroker.coordinators.group.consumer_group import ConsumerGroupMember, MemberState
from pybroker.coordinators.group.current_assignment_builder import reconcile

TOPICS = [bytes([i]) * 16 for i in range(4)]


@st.composite
def groups(draw, homogeneous: bool = False):
    n_topics = draw(st.integers(1, 4))
    topics = {TOPICS[i]: draw(st.integers(1, 12)) for i in range(n_topics)}
    n_members = draw(st.integers(1, 6))
    all_ids = frozenset(topics)
    members = {}
    for i in range(n_members):
        subs = all_ids if homogeneous else frozenset(
            draw(st.sets(st.sampled_from(sorted(topics)), min_size=1)))
        members[f"m{i}"] = MemberSpec(f"m{i}", subs)
    # a previous assignment (possibly stale: members gone, partitions that no longer exist)
    previous: dict[str, dict[bytes, frozenset[int]]] = {}
    for mid in members:
        previous[mid] = {tid: frozenset(draw(st.sets(st.integers(0, 14), max_size=4))) for tid in topics}
    # ownership in a real target is exclusive
    seen: set[tuple[bytes, int]] = set()
    for mid, a in previous.items():
        clean = {}
        for tid, ps in a.items():
            keep = frozenset(p for p in ps if (tid, p) not in seen)
            seen.update((tid, p) for p in keep)
            if keep:
                clean[tid] = keep
        members[mid] = MemberSpec(mid, members[mid].subscribed_topic_ids, clean)
    return members, topics


def check_complete(members, topics, out):
    assert set(out) == set(members)
    owners: dict[tuple[bytes, int], str] = {}
    for mid, a in out.items():
        for tid, ps in a.items():
            assert tid in members[mid].subscribed_topic_ids, "assigned an unsubscribed topic"
            for p in ps:
                assert 0 <= p < topics[tid]
                assert (tid, p) not in owners, "partition assigned twice"
                owners[(tid, p)] = mid
    for tid, n in topics.items():
        if any(tid in m.subscribed_topic_ids for m in members.values()):
            assert all((tid, p) in owners for p in range(n)), "partition left unassigned"


def load(a) -> int:
    return sum(len(ps) for ps in a.values())


@settings(max_examples=150, deadline=None)
@given(groups())
def test_uniform_assigns_every_partition_once(group):
    members, topics = group
    check_complete(members, topics, get_assignor("uniform").assign(members, topics))


@settings(max_examples=150, deadline=None)
@given(groups(homogeneous=True))
def test_uniform_homogeneous_is_balanced_and_sticky(group):
    members, topics = group
    out = get_assignor("uniform").assign(members, topics)
    loads = [load(a) for a in out.values()]
    assert max(loads) - min(loads) <= 1
    again = get_assignor("uniform").assign(
        {mid: MemberSpec(mid, m.subscribed_topic_ids, out[mid]) for mid, m in members.items()}, topics)
    assert again == out, "a balanced assignment must be kept as is"


def test_uniform_new_member_takes_only_its_share():
    t = TOPICS[0]
    old = {"a": MemberSpec("a", frozenset({t}), {t: frozenset(range(6))})}
    members = old | {"b": MemberSpec("b", frozenset({t}))}
    out = get_assignor("uniform").assign(members, {t: 6})
    assert len(out["a"][t]) == 3 and out["a"][t] < frozenset(range(6)) and len(out["b"][t]) == 3


@settings(max_examples=150, deadline=None)
@given(groups())
def test_range_assigns_every_partition_once_within_quotas(group):
    members, topics = group
    out = get_assignor("range").assign(members, topics)
    check_complete(members, topics, out)
    for tid in topics:
        subs = [mid for mid, m in members.items() if tid in m.subscribed_topic_ids]
        if subs:
            counts = [len(out[mid].get(tid, ())) for mid in subs]
            assert max(counts) - min(counts) <= 1


def test_range_without_history_gives_contiguous_ranges_by_member_id():
    t = TOPICS[0]
    members = {mid: MemberSpec(mid, frozenset({t})) for mid in ("b", "a", "c")}
    out = get_assignor("range").assign(members, {t: 7})
    assert out["a"][t] == {0, 1, 2} and out["b"][t] == {3, 4} and out["c"][t] == {5, 6}


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 7)), st.sets(st.integers(0, 7)), st.sets(st.integers(0, 7)),
       st.sets(st.integers(0, 7)), st.booleans())
def test_reconcile_never_assigns_a_partition_owned_elsewhere(current, target, taken, reported, report):
    t = TOPICS[0]
    taken = taken - current
    member = ConsumerGroupMember("m", member_epoch=3, previous_member_epoch=2, state=MemberState.STABLE,
                                 assigned_partitions={t: frozenset(current)} if current else {})
    owned = {t: frozenset(reported & current)} if report else None
    out = reconcile(member, 4, {t: frozenset(target)} if target else {}, {t}, owned,
                    lambda tid, p: 1 if p in taken else -1)
    got = out.assigned_partitions.get(t, frozenset())
    new = got - current
    assert not (new & taken), "handed over a partition another member still owns"
    assert got <= frozenset(target) | frozenset(current)
    if out.state == MemberState.UNREVOKED_PARTITIONS:
        # it must revoke first: nothing new, epoch unchanged
        assert not new and out.member_epoch == 3
        assert out.partitions_pending_revocation[t] == frozenset(current) - frozenset(target)
    else:
        assert out.member_epoch == 4 and got == (frozenset(target) - taken) | (frozenset(current) & frozenset(target))
        assert (out.state == MemberState.UNRELEASED_PARTITIONS) == bool(frozenset(target) & taken)
