"""The "uniform" assignor (Kafka's UniformAssignor), the default: spreads every subscribed
partition as evenly as possible over its subscribers while moving as few as possible.

1. Stickiness: each member keeps the partitions of its current target assignment that still
   exist and that it is still subscribed to.
2. Partitions left over go, topic with the fewest subscribers first, to the eligible member
   with the fewest partitions (ties: member id).
3. Balance: while a member has at least two partitions more than another member that could
   take one of them, move one (from the most loaded member, to the least loaded eligible one).
With identical subscriptions (Kafka's homogeneous case) the result has every member at
floor(P/M) or ceil(P/M) partitions; with different subscriptions it is balanced as far as the
subscriptions allow (Kafka's general case is likewise a heuristic).
"""

from __future__ import annotations

from collections.abc import Mapping

from pybroker.coordinators.group.assignors import Assignment, MemberSpec, freeze


class UniformAssignor:
    name = "uniform"

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[bytes, int]) -> dict[str, Assignment]:
        owned: dict[str, set[tuple[bytes, int]]] = {mid: set() for mid in members}
        owner: dict[tuple[bytes, int], str] = {}
        subscribers = {tid: sorted(mid for mid, m in members.items() if tid in m.subscribed_topic_ids)
                       for tid in topics}
        # 1. keep what is still valid
        for mid in sorted(members):
            m = members[mid]
            for tid, parts in m.assignment.items():
                if tid not in topics or tid not in m.subscribed_topic_ids:
                    continue
                for p in parts:
                    if p < topics[tid] and (tid, p) not in owner:
                        owner[(tid, p)] = mid
                        owned[mid].add((tid, p))
        # 2. place the rest
        for tid in sorted(topics, key=lambda t: (len(subscribers[t]), t)):
            subs = subscribers[tid]
            if not subs:
                continue
            for p in range(topics[tid]):
                if (tid, p) in owner:
                    continue
                mid = min(subs, key=lambda s: (len(owned[s]), s))
                owner[(tid, p)] = mid
                owned[mid].add((tid, p))
        # 3. balance: each move lowers the spread between two members, so this terminates
        for _ in range(sum(topics.values()) * max(1, len(members))):
            if not self._move_one(members, owned, owner):
                break
        out: dict[str, dict[bytes, set[int]]] = {mid: {} for mid in members}
        for mid, tps in owned.items():
            for tid, p in tps:
                out[mid].setdefault(tid, set()).add(p)
        return {mid: freeze(a) for mid, a in out.items()}

    @staticmethod
    def _move_one(members: Mapping[str, MemberSpec], owned: dict[str, set[tuple[bytes, int]]],
                  owner: dict[tuple[bytes, int], str]) -> bool:
        by_load = sorted(owned, key=lambda s: (len(owned[s]), s))
        for src in reversed(by_load):
            for dst in by_load:
                if len(owned[dst]) + 1 >= len(owned[src]):
                    break
                subs = members[dst].subscribed_topic_ids
                movable = [tp for tp in owned[src] if tp[0] in subs]
                if movable:
                    tp = max(movable)
                    owned[src].discard(tp)
                    owned[dst].add(tp)
                    owner[tp] = dst
                    return True
        return False
