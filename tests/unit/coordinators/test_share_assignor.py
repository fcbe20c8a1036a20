"""The share-group assignor "simple" (Kafka's SimpleAssignor), by property: every assignable
partition a member subscribes to goes to at least one of its subscribers, each to no more than
ceil(members / partitions) of them, members' loads differ by at most one when they all
subscribe to the same topics, and running it again on its own output changes nothing."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.coordinators.group.assignors import MemberSpec
from pybroker.coordinators.group.assignors.simple import SimpleAssignor

TOPICS = [bytes([i]) * 16 for i in range(1, 5)]


def load(a: dict[bytes, frozenset[int]]) -> int:
    return sum(len(ps) for ps in a.values())


def holders(out: dict[str, dict[bytes, frozenset[int]]]) -> dict[tuple[bytes, int], set[str]]:
    h: dict[tuple[bytes, int], set[str]] = {}
    for mid, a in out.items():
        for tid, ps in a.items():
            for p in ps:
                h.setdefault((tid, p), set()).add(mid)
    return h


@st.composite
def groups(draw, homogeneous: bool):
    n_topics = draw(st.integers(1, 3))
    topics = TOPICS[:n_topics]
    parts = {t: draw(st.integers(0, 6)) for t in topics}
    # some partitions may not be initialized yet: only those are assignable
    assignable = {t: frozenset(p for p in range(n) if draw(st.booleans()) or homogeneous) for t, n in parts.items()}
    n_members = draw(st.integers(1, 12))
    members = {}
    for i in range(n_members):
        subs = frozenset(topics) if homogeneous else frozenset(
            draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)))
        # a current assignment that may be stale (partitions gone, topics unsubscribed)
        old = {t: frozenset(draw(st.lists(st.integers(0, 7), max_size=4))) for t in topics if draw(st.booleans())}
        members[f"m{i:02d}"] = MemberSpec(f"m{i:02d}", subs, old)
    return members, assignable


def check_coverage_and_sharing(members, assignable, out):
    assert set(out) == set(members)
    h = holders(out)
    for mid, a in out.items():
        for tid, ps in a.items():
            assert tid in members[mid].subscribed_topic_ids
            assert ps <= assignable[tid]
    for tid, ps in assignable.items():
        subscribers = [m for m in members.values() if tid in m.subscribed_topic_ids]
        if not subscribers or not ps:
            continue
        sharing = math.ceil(len(subscribers) / len(ps))
        for p in ps:
            assert 1 <= len(h.get((tid, p), ())) <= sharing, (tid, p, h.get((tid, p)))


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=True))
def test_homogeneous_coverage_balance_stability(group):
    members, assignable = group
    out = SimpleAssignor().assign(members, assignable)
    check_coverage_and_sharing(members, assignable, out)
    total_parts = sum(len(ps) for ps in assignable.values())
    loads = [load(a) for a in out.values()]
    if total_parts:
        assert max(loads) - min(loads) <= 1, loads
        # every member gets something: several members per partition when they outnumber them
        assert min(loads) >= 1
    again = SimpleAssignor().assign(
        {mid: MemberSpec(mid, m.subscribed_topic_ids, out[mid]) for mid, m in members.items()}, assignable)
    assert again == out


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=False))
def test_heterogeneous_coverage_and_stability(group):
    members, assignable = group
    out = SimpleAssignor().assign(members, assignable)
    check_coverage_and_sharing(members, assignable, out)
    again = SimpleAssignor().assign(
        {mid: MemberSpec(mid, m.subscribed_topic_ids, out[mid]) for mid, m in members.items()}, assignable)
    assert again == out


def test_members_outnumbering_partitions_share_them():
    t = TOPICS[0]
    members = {f"m{i}": MemberSpec(f"m{i}", frozenset({t})) for i in range(3)}
    out = SimpleAssignor().assign(members, {t: [0, 1]})
    # 3 members, 2 partitions: each partition to 2 members, 4 assignments over 3 members
    assert sorted(load(a) for a in out.values()) == [1, 1, 2]
    assert all(len(ms) == 2 for ms in holders(out).values())


def test_a_joining_member_takes_from_the_most_loaded_only():
    t = TOPICS[0]
    two = {f"m{i}": MemberSpec(f"m{i}", frozenset({t})) for i in range(2)}
    first = SimpleAssignor().assign(two, {t: range(4)})
    assert sorted(load(a) for a in first.values()) == [2, 2]
    three = {mid: MemberSpec(mid, frozenset({t}), first[mid]) for mid in two}
    three["m2"] = MemberSpec("m2", frozenset({t}))
    second = SimpleAssignor().assign(three, {t: range(4)})
    for mid in two:  # nobody gains a partition it did not have, and everyone keeps most of its own
        assert second[mid][t] <= first[mid][t]
    assert sorted(load(a) for a in second.values()) == [1, 1, 2]
