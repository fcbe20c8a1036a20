"""Server-side partition assignors of KIP-848 consumer groups (Kafka's ConsumerGroupPartitionAssignor):
"uniform" (the default) and "range", selected by group.consumer.assignors.

An assignor is a pure function of the group's members (id, subscribed topic ids, current
target assignment) and the subscribed topics' partition counts (by topic id); it returns the
new target assignment `{member_id: {topic_id: frozenset(partitions)}}` with an entry for every
member (possibly empty). Every partition of a topic with at least one subscriber is assigned
to exactly one subscriber. Deterministic for a given input. Stateless; any thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

Assignment = dict[bytes, frozenset[int]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    subscribed_topic_ids: frozenset[bytes]
    assignment: Assignment = field(default_factory=dict)  # the current target assignment
    instance_id: str | None = None
    rack_id: str | None = None


class PartitionAssignor(Protocol):
    name: str

    def assign(self, members: Mapping[str, MemberSpec], topics: Mapping[bytes, int]) -> dict[str, Assignment]: ...


def get_assignor(name: str) -> PartitionAssignor | None:
    from pybroker.coordinators.group.assignors.range import RangeAssignor
    from pybroker.coordinators.group.assignors.uniform import UniformAssignor

    return {"uniform": UniformAssignor, "range": RangeAssignor}.get(name, lambda: None)()  # type: ignore[return-value]


def freeze(assignment: Mapping[bytes, set[int]]) -> Assignment:
    return {tid: frozenset(parts) for tid, parts in assignment.items() if parts}
