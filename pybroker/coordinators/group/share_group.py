"""A KIP-932 share group and its members (Kafka's ShareGroup / ShareGroupMember), as rebuilt by
replaying the ShareGroup* records of __consumer_offsets, and the group's share-state metadata
(Kafka's ShareGroupStatePartitionMetadataInfo).

Assignments are `{topic_id (16 bytes): frozenset(partition)}`. Epochs as for consumer groups:
    group_epoch              bumps when a member joins, leaves or changes its subscription, when
                             the subscribed topics' metadata changes, and when newly initialized
                             share partitions are waiting to be assigned
    target_assignment_epoch  the group epoch the target assignment was computed for
    member_epoch             the epoch of the target assignment the member has
Share groups have no revocation: a partition may be held by several members and a member takes
its target assignment at once, so a member is always STABLE.

Group state (Kafka's ShareGroup.ShareGroupState): Empty (no members) or Stable.

Share-state metadata, per group: the partitions whose share state the coordinator asked the
share coordinator to initialize (`initializing`, with the time of the asking: a request older
than group.share.initialize.retry.interval.ms is asked again), those it confirmed
(`initialized`: only these are assigned) and the topics whose state is being deleted
(`deleting`).

Mutation happens only through `replay_*` (on write and on load alike). Concurrency: one
thread, no locks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

Assignment = dict[bytes, frozenset[int]]

GROUP_TYPE_SHARE = "share"
SHARE_PROTOCOL_TYPE = "share"
LEAVE_GROUP_MEMBER_EPOCH = -1
MEMBER_STATE_STABLE = 0  # Kafka's MemberState.STABLE, what ShareGroupCurrentMemberAssignment persists


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ShareGroupMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    # current assignment (ShareGroupCurrentMemberAssignment)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = MEMBER_STATE_STABLE
    assigned_partitions: Assignment = field(default_factory=dict)

    def subscription_key(self) -> tuple:
        """What ShareGroupMemberMetadata persists."""
        return (self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names)

    def assignment_key(self) -> tuple:
        """What ShareGroupCurrentMemberAssignment persists."""
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned_partitions)


@dataclass(frozen=True, slots=True)
class InitTopic:
    """One topic of the share-state metadata: its name, partitions, and when they were asked for."""

    name: str
    partitions: frozenset[int]
    timestamp_ms: int = -1


@dataclass(slots=True)
class StatePartitionMetadata:
    """Kafka's ShareGroupStatePartitionMetadataInfo: topic id -> InitTopic, deleting topic ids -> name."""

    initializing: dict[bytes, InitTopic] = field(default_factory=dict)
    initialized: dict[bytes, InitTopic] = field(default_factory=dict)
    deleting: dict[bytes, str] = field(default_factory=dict)

    def initialized_partitions(self) -> dict[bytes, frozenset[int]]:
        return {tid: t.partitions for tid, t in self.initialized.items()}


class ShareGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.members: dict[str, ShareGroupMember] = {}
        self.target_assignment_epoch = 0
        self.target_assignment: dict[str, Assignment] = {}
        # how many members subscribe to each topic name (Kafka's subscribedTopicNames)
        self.subscribed_topic_name_counts: dict[str, int] = {}

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topic_names(self) -> set[str]:
        return set(self.subscribed_topic_name_counts)

    def subscribed_names_with(self, removed: ShareGroupMember | None,
                              added: ShareGroupMember | None) -> set[str]:
        """The group's subscribed topic names with `removed` taken out and `added` put in."""
        counts = dict(self.subscribed_topic_name_counts)
        _count(counts, removed, -1)
        _count(counts, added, +1)
        return set(counts)

    # ------------------------------------------------------------------ replay

    def replay_member_metadata(self, member_id: str, value: object | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                _count(self.subscribed_topic_name_counts, old, -1)
                del self.members[member_id]
            return
        v = value
        member = replace(old or ShareGroupMember(member_id),
                         rack_id=v.rack_id, client_id=v.client_id,  # type: ignore[attr-defined]
                         client_host=v.client_host,  # type: ignore[attr-defined]
                         subscribed_topic_names=tuple(v.subscribed_topic_names))  # type: ignore[attr-defined]
        _count(self.subscribed_topic_name_counts, old, -1)
        _count(self.subscribed_topic_name_counts, member, +1)
        self.members[member_id] = member

    def replay_current_assignment(self, member_id: str, value: object | None) -> None:
        old = self.members.get(member_id)
        if old is None:
            return  # the member's metadata record comes first; a lone assignment has no member
        if value is None:
            self.members[member_id] = replace(old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                              previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                              assigned_partitions={})
            return
        v = value
        self.members[member_id] = replace(
            old, member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch,  # type: ignore[attr-defined]
            state=v.state, assigned_partitions=_assignment(v.assigned_partitions))  # type: ignore[attr-defined]

    def replay_target_member(self, member_id: str, value: object | None) -> None:
        if value is None:
            self.target_assignment.pop(member_id, None)
        else:
            self.target_assignment[member_id] = _assignment(value.topic_partitions)  # type: ignore[attr-defined]


def _count(counts: dict[str, int], member: ShareGroupMember | None, delta: int) -> None:
    if member is None:
        return
    for name in set(member.subscribed_topic_names):
        c = counts.get(name, 0) + delta
        if c > 0:
            counts[name] = c
        else:
            counts.pop(name, None)


def _assignment(topic_partitions: object) -> Assignment:
    out: Assignment = {}
    for tp in topic_partitions:  # type: ignore[attr-defined]
        parts = frozenset(tp.partitions)
        if parts:
            out[bytes(tp.topic_id)] = out.get(bytes(tp.topic_id), frozenset()) | parts
    return out
