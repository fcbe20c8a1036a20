"""The share-group assignor "simple" (Kafka's SimpleAssignor, group.share.assignors' default).

Input: the members (id, subscribed topic ids, current target assignment) and, per subscribed
topic id, the partitions that may be assigned: for a share group, those whose share state is
initialized (share_group_manager.py). Output: `{member_id: {topic_id: frozenset(partitions)}}`
with an entry for every member.

Unlike the consumer assignors, a partition may go to several members: with N members and P
assignable partitions each partition goes to `desired_sharing = ceil(N / P)` members and the
`desired_sharing * P` assignments are spread evenly (member i gets
ceil(T*(i+1)/N) - ceil(T*i/N) of them, T the total), so every partition has a member as long
as some member subscribes to it, and no member holds two more than another. It is sticky, as
Kafka's: a member keeps what it has (if still assignable and subscribed) up to its share,
over-shared partitions lose their extra members, and only then are the gaps filled, round
robin over the members short of their share. Running it again on its own output changes
nothing.

When all members subscribe to the same topics (Kafka's HOMOGENEOUS subscription) the
partitions of all topics are shared out together; otherwise each topic is shared out among
its own subscribers (Kafka's SimpleHeterogeneousAssignmentBuilder). Members and partitions are
taken in sorted order, so the result is deterministic. Stateless; any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pybroker.coordinators.group.assignors import Assignment, MemberSpec

TopicPartition = tuple[bytes, int]


class SimpleAssignor:
    name = "simple"

    def assign(self, members: Mapping[str, MemberSpec],
               assignable: Mapping[bytes, Iterable[int]]) -> dict[str, Assignment]:
        """`assignable`: per topic id, the partitions that may be assigned."""
        if not members:
            return {}
        parts = {tid: sorted(set(ps)) for tid, ps in assignable.items()}
        ids = sorted(members)
        subs = {mid: frozenset(members[mid].subscribed_topic_ids) for mid in ids}
        out: dict[str, dict[bytes, set[int]]] = {mid: {} for mid in ids}
        if len(set(subs.values())) == 1:
            units = [(ids, sorted(subs[ids[0]]))]
        else:
            topics = sorted(set().union(*subs.values()))
            units = [([mid for mid in ids if tid in subs[mid]], [tid]) for tid in topics]
        for unit_members, unit_topics in units:
            target = [(tid, p) for tid in unit_topics for p in parts.get(tid, ())]
            old = {mid: {(tid, p) for tid in unit_topics
                         for p in members[mid].assignment.get(tid, ())} for mid in unit_members}
            for mid, tps in _share_out(unit_members, target, old).items():
                for tid, p in tps:
                    out[mid].setdefault(tid, set()).add(p)
        return {mid: {tid: frozenset(ps) for tid, ps in a.items() if ps} for mid, a in out.items()}


def _share_out(member_ids: list[str], target: list[TopicPartition],
               old: Mapping[str, set[TopicPartition]]) -> dict[str, set[TopicPartition]]:
    """Assign the `target` partitions to `member_ids` (sorted), keeping `old` where it can."""
    n, p = len(member_ids), len(target)
    if n == 0:
        return {}
    if p == 0:
        return {mid: set() for mid in member_ids}
    sharing = (n + p - 1) // p
    total = sharing * p
    desired = {mid: -(-total * (i + 1) // n) - -(-total * i // n) for i, mid in enumerate(member_ids)}
    valid = set(target)
    # 1. keep what is still assignable, up to each member's share (lowest partitions first)
    assigned: dict[str, list[TopicPartition]] = {
        mid: sorted(tp for tp in old.get(mid, ()) if tp in valid)[:desired[mid]] for mid in member_ids}
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in target}
    for mid in member_ids:
        for tp in assigned[mid]:
            holders[tp].append(mid)
    # 2. a partition held by more members than its share loses the extra ones
    for tp in target:
        extra = len(holders[tp]) - sharing
        if extra > 0:
            for mid in holders[tp][:extra]:
                assigned[mid].remove(tp)
            del holders[tp][:extra]
    # 3. fill the gaps, round robin over the members short of their share
    unfilled = [mid for mid in member_ids if len(assigned[mid]) < desired[mid]]
    cursor = 0
    for tp in target:
        if not unfilled:
            break
        tried = 0
        while len(holders[tp]) < sharing and unfilled and tried < len(unfilled):
            cursor %= len(unfilled)
            mid = unfilled[cursor]
            if mid in holders[tp]:
                cursor += 1
                tried += 1
                continue
            assigned[mid].append(tp)
            holders[tp].append(mid)
            tried = 0
            if len(assigned[mid]) >= desired[mid]:
                unfilled.pop(cursor)
            else:
                cursor += 1
    return {mid: set(tps) for mid, tps in assigned.items()}
