"""The "range" assignor (Kafka's server-side RangeAssignor): per topic, the subscribers sorted by
member id split the partitions into contiguous quotas — numPartitions // numSubscribers each,
the first numPartitions % numSubscribers one more — so members subscribed to topics with equal
partition counts get the same partition numbers of each (co-partitioning).

Sticky within quotas: a member keeps the partitions it already has, up to its quota; the
partitions left over fill the members still under quota, lowest partition first.
"""

from __future__ import annotations

from collections.abc import Mapping

from pybroker.coordinators.group.assignors import Assignment, MemberSpec, freeze


class RangeAssignor:
    name = "range"

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[bytes, int]) -> dict[str, Assignment]:
        out: dict[str, dict[bytes, set[int]]] = {mid: {} for mid in members}
        for tid in sorted(topics):
            num_partitions = topics[tid]
            subscribers = sorted(mid for mid, m in members.items() if tid in m.subscribed_topic_ids)
            if not subscribers or num_partitions <= 0:
                continue
            base, extra = divmod(num_partitions, len(subscribers))
            quota = {mid: base + (1 if i < extra else 0) for i, mid in enumerate(subscribers)}
            taken: set[int] = set()
            for mid in subscribers:
                kept = sorted(p for p in members[mid].assignment.get(tid, ()) if p < num_partitions)[:quota[mid]]
                if kept:
                    out[mid][tid] = set(kept)
                    taken.update(kept)
            free = iter(p for p in range(num_partitions) if p not in taken)
            for mid in subscribers:
                mine = out[mid].setdefault(tid, set())
                while len(mine) < quota[mid]:
                    mine.add(next(free))
        return {mid: freeze(a) for mid, a in out.items()}
