"""A KIP-848 consumer group and its members (Kafka's ConsumerGroup / ConsumerGroupMember /
MemberState), as rebuilt by replaying the ConsumerGroup* records of __consumer_offsets.

Assignments are `{topic_id (16 bytes): frozenset(partition)}`. Epochs:
    group_epoch              bumps when a member joins/leaves or changes its subscription, or
                             when the subscribed topics' metadata changes
    target_assignment_epoch  the group epoch the target assignment was computed for
    member_epoch             the epoch of the target assignment the member reconciled to
A partition is owned (assigned, or pending revocation) by at most one member;
`partition_owners` maps (topic_id, partition) to its owner and the owner's member epoch: how a
member learns a partition is not released yet (`partition_owners`).

Classic members (KIP-848 online migration): a member that joined with JoinGroup, or came
over when a classic group was converted, carries `classic_member_metadata` (its session
timeout and JoinGroup protocols, persisted in ConsumerGroupMemberMetadataValue's tagged
ClassicMemberMetadata); the group counts them and which protocol names they all support
(Kafka's numClassicProtocolMembers / classicProtocolMembersSupportedProtocols).

Group state (Kafka's ConsumerGroup.ConsumerGroupState): Empty (no members), Assigning
(group_epoch > target_assignment_epoch), Reconciling (a member is behind the target or not
STABLE), Stable.

Mutation happens only through `replay_*` (on write, right after the append, and on load),
so the state is exactly what the records say. Concurrency: one thread, no locks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

Assignment = dict[bytes, frozenset[int]]

GROUP_TYPE_CONSUMER = "consumer"
CONSUMER_PROTOCOL_TYPE = "consumer"
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Persisted as ConsumerGroupCurrentMemberAssignmentValue.State (int8)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One subscribed topic as recorded in ConsumerGroupPartitionMetadata."""

    topic_id: bytes
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A classic-protocol member's JoinGroup settings: session timeout and (name, metadata) protocols."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]

    def protocol_name(self) -> str:
        """The protocol the member's JoinGroup/SyncGroup answers name: its first (Kafka's choice)."""
        return self.supported_protocols[0][0] if self.supported_protocols else ""

    def first_metadata(self) -> bytes:
        return self.supported_protocols[0][1] if self.supported_protocols else b""


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    # current assignment (ConsumerGroupCurrentMemberAssignment)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)
    classic_member_metadata: ClassicMemberMetadata | None = None

    @property
    def use_classic_protocol(self) -> bool:
        return self.classic_member_metadata is not None

    def subscription_key(self) -> tuple:
        """What ConsumerGroupMemberMetadata persists."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
                self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor,
                self.classic_member_metadata)

    def assignment_key(self) -> tuple:
        """What ConsumerGroupCurrentMemberAssignment persists."""
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned_partitions,
                self.partitions_pending_revocation)

    def owned(self) -> Assignment:
        """Assigned + pending revocation: the partitions this member may still be using."""
        out = dict(self.assigned_partitions)
        for tid, parts in self.partitions_pending_revocation.items():
            out[tid] = out.get(tid, frozenset()) | parts
        return out


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.subscription_metadata: dict[str, TopicMetadata] = {}  # topic name -> metadata
        self.target_assignment_epoch = 0
        self.target_assignment: dict[str, Assignment] = {}
        # (topic id, partition) -> (owner member id, owner's member epoch)
        self.partition_owners: dict[tuple[bytes, int], tuple[str, int]] = {}
        # Kafka's subscribedTopicNames: how many members subscribe to each topic name, and to
        # each regex; kept by replay so a heartbeat need not walk the members
        self.subscribed_topic_name_counts: dict[str, int] = {}
        self.subscribed_regex_counts: dict[str, int] = {}
        # classic-protocol members and, per protocol name, how many of them support it
        self.num_classic_protocol_members = 0
        self.classic_protocol_support: dict[str, int] = {}

    # ------------------------------------------------------------------ reading

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.target_assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.target_assignment_epoch or m.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def current_partition_epoch(self, topic_id: bytes, partition: int) -> int:
        owner = self.partition_owners.get((topic_id, partition))
        return -1 if owner is None else owner[1]

    def subscribed_topic_names(self) -> set[str]:
        """Topic names subscribed by name (regex subscriptions resolve against metadata)."""
        return set(self.subscribed_topic_name_counts)

    def is_subscribed_to(self, topic: str) -> bool:
        return topic in self.subscription_metadata or topic in self.subscribed_topic_names()

    def supports_classic_protocols(self, protocol_type: str, protocol_names: set[str]) -> bool:
        """Kafka's supportsClassicProtocols: a joining classic member must speak "consumer" and
        share a protocol name with every classic member already here."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        if self.is_empty():
            return bool(protocol_names)
        n = self.num_classic_protocol_members
        return any(self.classic_protocol_support.get(name, 0) == n for name in protocol_names)

    def all_members_use_classic_protocol_except(self, member_id: str) -> bool:
        member = self.members.get(member_id)
        return (member is not None and not member.use_classic_protocol
                and self.num_classic_protocol_members == len(self.members) - 1)

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Whether a target partition of `member` is still owned by another member."""
        if member.state != MemberState.UNRELEASED_PARTITIONS:
            return False
        for tid, parts in self.target_assignment.get(member.member_id, {}).items():
            have = member.assigned_partitions.get(tid, frozenset())
            for p in parts:
                if p not in have and self.current_partition_epoch(tid, p) != -1:
                    return True
        return False

    # ------------------------------------------------------------------ replay

    def replay_member_metadata(self, member_id: str, value: object | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is not None:
                self._unown(old)
                count_subscription(self.subscribed_topic_name_counts, self.subscribed_regex_counts, old, -1)
                self._count_classic(old, -1)
                del self.members[member_id]
                if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
                    del self.static_members[old.instance_id]
            return
        v = value
        base = old or ConsumerGroupMember(member_id)
        member = replace(
            base, instance_id=v.instance_id, rack_id=v.rack_id,  # type: ignore[attr-defined]
            client_id=v.client_id, client_host=v.client_host,  # type: ignore[attr-defined]
            subscribed_topic_names=tuple(v.subscribed_topic_names),  # type: ignore[attr-defined]
            subscribed_topic_regex=v.subscribed_topic_regex,  # type: ignore[attr-defined]
            rebalance_timeout_ms=v.rebalance_timeout_ms, server_assignor=v.server_assignor,  # type: ignore[attr-defined]
            classic_member_metadata=_classic_metadata(v.classic_member_metadata))  # type: ignore[attr-defined]
        if old is not None:
            count_subscription(self.subscribed_topic_name_counts, self.subscribed_regex_counts, old, -1)
            self._count_classic(old, -1)
        count_subscription(self.subscribed_topic_name_counts, self.subscribed_regex_counts, member, +1)
        self._count_classic(member, +1)
        self.members[member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member_id

    def replay_current_assignment(self, member_id: str, value: object | None) -> None:
        old = self.members.get(member_id)
        if old is None:
            if value is None:
                return
            old = ConsumerGroupMember(member_id)
        self._unown(old)
        if value is None:
            member = replace(old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                             state=MemberState.STABLE, assigned_partitions={}, partitions_pending_revocation={})
        else:
            v = value
            try:
                state = MemberState(v.state)  # type: ignore[attr-defined]
            except ValueError:
                state = MemberState.UNKNOWN
            member = replace(
                old, member_epoch=v.member_epoch,  # type: ignore[attr-defined]
                previous_member_epoch=v.previous_member_epoch, state=state,  # type: ignore[attr-defined]
                assigned_partitions=_assignment(v.assigned_partitions),  # type: ignore[attr-defined]
                partitions_pending_revocation=_assignment(v.partitions_pending_revocation))  # type: ignore[attr-defined]
        self.members[member_id] = member
        self._own(member)

    def replay_target_member(self, member_id: str, value: object | None) -> None:
        if value is None:
            self.target_assignment.pop(member_id, None)
        else:
            self.target_assignment[member_id] = _assignment(value.topic_partitions)  # type: ignore[attr-defined]

    def replay_partition_metadata(self, value: object | None) -> None:
        if value is None:
            self.subscription_metadata = {}
            return
        self.subscription_metadata = {
            t.topic_name: TopicMetadata(bytes(t.topic_id), t.topic_name, t.num_partitions)
            for t in value.topics}  # type: ignore[attr-defined]

    def _count_classic(self, member: ConsumerGroupMember, delta: int) -> None:
        meta = member.classic_member_metadata
        if meta is None:
            return
        self.num_classic_protocol_members += delta
        support = self.classic_protocol_support
        for name in {n for n, _ in meta.supported_protocols}:
            count = support.get(name, 0) + delta
            if count:
                support[name] = count
            else:
                del support[name]

    # ------------------------------------------------------------------ partition ownership

    def _own(self, member: ConsumerGroupMember) -> None:
        for tid, parts in member.owned().items():
            for p in parts:
                self.partition_owners[(tid, p)] = (member.member_id, member.member_epoch)

    def _unown(self, member: ConsumerGroupMember) -> None:
        for tid, parts in member.owned().items():
            for p in parts:
                owner = self.partition_owners.get((tid, p))
                if owner is not None and owner[0] == member.member_id:
                    del self.partition_owners[(tid, p)]


def count_subscription(names: dict[str, int], regexes: dict[str, int], member: ConsumerGroupMember,
                       delta: int) -> None:
    """Add (delta=+1) or take away (-1) `member`'s subscription from per-name / per-regex counts;
    a count that reaches 0 is deleted, so the keys are exactly what some member subscribes to."""
    for name in set(member.subscribed_topic_names):
        count = names.get(name, 0) + delta
        if count:
            names[name] = count
        else:
            del names[name]
    regex = member.subscribed_topic_regex
    if regex:
        count = regexes.get(regex, 0) + delta
        if count:
            regexes[regex] = count
        else:
            del regexes[regex]


def _classic_metadata(value: object | None) -> ClassicMemberMetadata | None:
    if value is None:
        return None
    return ClassicMemberMetadata(
        value.session_timeout_ms,  # type: ignore[attr-defined]
        tuple((p.name, bytes(p.metadata)) for p in value.supported_protocols))  # type: ignore[attr-defined]


def _assignment(topic_partitions: object) -> Assignment:
    out: Assignment = {}
    for tp in topic_partitions:  # type: ignore[attr-defined]
        parts = frozenset(tp.partitions)
        if parts:
            out[bytes(tp.topic_id)] = out.get(bytes(tp.topic_id), frozenset()) | parts
    return out


