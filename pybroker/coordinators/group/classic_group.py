"""A classic-protocol group and its members (Kafka's ClassicGroup / ClassicGroupMember).

State machine (Kafka's ClassicGroupState), with the transitions this module allows:

    Empty               -> PreparingRebalance, Dead
    PreparingRebalance  -> CompletingRebalance, Empty, Dead
    CompletingRebalance -> PreparingRebalance, Stable, Dead
    Stable              -> PreparingRebalance, Dead
    Dead                -> (nothing: the group is gone)

A member's `protocols` are the (name, metadata bytes) pairs of its JoinGroup; the group
selects the protocol every member supports, by vote. Subscribed topics are parsed from the
"consumer" protocol's ConsumerProtocolSubscription (int16 version + struct) so OffsetDelete
can refuse GROUP_SUBSCRIBED_TO_TOPIC; other protocol types have no known topics.

Pending futures (join/sync) are plain objects completed synchronously: the server side
awaits them; the state machine never awaits. Concurrency: used only from one thread (the
trio thread, or a test) — no locking.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pybroker.coordinators.group import consumer_protocol
from pybroker.protocol.errors import Errors

CONSUMER_PROTOCOL_TYPE = "consumer"
GROUP_TYPE_CLASSIC = "classic"


class ClassicGroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    ClassicGroupState.EMPTY: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.PREPARING_REBALANCE: frozenset({
        ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.EMPTY}),
    ClassicGroupState.COMPLETING_REBALANCE: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.STABLE: frozenset({ClassicGroupState.COMPLETING_REBALANCE}),
    ClassicGroupState.DEAD: frozenset({
        ClassicGroupState.STABLE, ClassicGroupState.PREPARING_REBALANCE,
        ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.EMPTY, ClassicGroupState.DEAD}),
}


class IllegalStateTransition(RuntimeError):
    pass


class Future:
    """A one-shot result slot; callbacks run synchronously on completion (no event loop)."""

    __slots__ = ("done", "value", "_callbacks")

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self._callbacks: list[Callable[[Any], None]] = []

    def complete(self, value: Any) -> bool:
        if self.done:
            return False
        self.done, self.value = True, value
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(value)
        return True

    def add_callback(self, cb: Callable[[Any], None]) -> None:
        if self.done:
            cb(self.value)
        else:
            self._callbacks.append(cb)


class ClassicGroupMember:
    """One member. `join_future` and `protocols` may be reassigned freely: while the member
    belongs to a group (`add` .. `remove`) each assignment updates that group's counters."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "rebalance_timeout_ms",
                 "session_timeout_ms", "protocol_type", "_protocols", "assignment", "_join_future",
                 "sync_future", "join_version", "is_new", "_group")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                 rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                 protocols: list[tuple[str, bytes]], assignment: bytes = b"", join_future: Future | None = None,
                 sync_future: Future | None = None, join_version: int = 0, is_new: bool = False) -> None:
        self._group: ClassicGroup | None = None  # set while the member is in a group's counters
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self._protocols = protocols
        self.assignment = assignment
        self._join_future = join_future
        self.sync_future = sync_future
        self.join_version = join_version
        self.is_new = is_new

    def __repr__(self) -> str:
        return (f"ClassicGroupMember(member_id={self.member_id!r}, group_instance_id={self.group_instance_id!r}, "
                f"protocols={[n for n, _ in self._protocols]!r}, awaiting_join={self.is_awaiting_join}, "
                f"awaiting_sync={self.is_awaiting_sync})")

    @property
    def join_future(self) -> Future | None:
        return self._join_future

    @join_future.setter
    def join_future(self, fut: Future | None) -> None:
        group = self._group
        if group is not None and (self._join_future is None) != (fut is None):
            group.num_members_awaiting_join += 1 if fut is not None else -1
        self._join_future = fut

    @property
    def protocols(self) -> list[tuple[str, bytes]]:
        return self._protocols

    @protocols.setter
    def protocols(self, protocols: list[tuple[str, bytes]]) -> None:
        group = self._group
        if group is not None:
            group._count_protocols(self._protocols, -1)
            group._count_protocols(protocols, +1)
        self._protocols = protocols

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self._join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self._protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self._protocols]

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self._protocols]


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """Topics of a consumer-protocol subscription, None if it cannot be parsed."""
    try:
        return set(consumer_protocol.deserialize_subscription(metadata).topics)
    except consumer_protocol.MalformedConsumerProtocol:
        return None


@dataclass
class ClassicGroup:
    group_id: str
    state: ClassicGroupState = ClassicGroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)  # v4+ ids handed out, not yet joined
    pending_sync: set[str] = field(default_factory=set)  # joined this generation, not yet synced
    new_member_added: bool = False
    initial_join_delay_ms: int = 0  # remaining budget of the initial rebalance delay
    group_type: str = GROUP_TYPE_CLASSIC  # room for KIP-848 "consumer" groups
    # Kafka's numMembersAwaitingJoinResponse and supportedProtocols: kept up to date by
    # add/remove and by assignments to a member's join_future/protocols, so a JoinGroup
    # costs O(its protocols), not O(members)
    num_members_awaiting_join: int = field(default=0, init=False, repr=False, compare=False)
    _protocol_support: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for m in self.members.values():
            self._track(m)

    # ------------------------------------------------------------------ state

    def is_in(self, *states: ClassicGroupState) -> bool:
        return self.state in states

    def transition_to(self, target: ClassicGroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {target.value}")
        self.state = target
        self.state_timestamp_ms = now_ms

    # ------------------------------------------------------------------ members

    def add(self, member: ClassicGroupMember, join_future: Future | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.is_static:
            self.static_members[member.group_instance_id] = member.member_id  # type: ignore[index]
        member.join_future = join_future
        self.restore(member)
        self.pending_members.discard(member.member_id)

    def restore(self, member: ClassicGroupMember) -> None:
        """Put `member` in the member map as is (loading a group from its record)."""
        previous = self.members.get(member.member_id)
        if previous is not None and previous is not member:
            self._untrack(previous)
        self.members[member.member_id] = member
        if member._group is not self:
            self._track(member)

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._untrack(member)
        self.pending_sync.discard(member_id)
        if member is not None and member.is_static:
            if self.static_members.get(member.group_instance_id) == member_id:  # type: ignore[arg-type]
                del self.static_members[member.group_instance_id]  # type: ignore[arg-type]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def member_identity_error(self, member_id: str, instance_id: str | None) -> int | None:
        """Kafka's member checks shared by Heartbeat/Sync/Leave/OffsetCommit: a static member
        must hold its instance id (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID), and the member must
        exist (UNKNOWN_MEMBER_ID). None when the member is who it says it is."""
        if instance_id is not None:
            known = self.static_member_id(instance_id)
            if known is None:
                return Errors.UNKNOWN_MEMBER_ID
            if known != member_id:
                return Errors.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return Errors.UNKNOWN_MEMBER_ID
        return None

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicGroupMember:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def _track(self, member: ClassicGroupMember) -> None:
        member._group = self
        self._count_protocols(member.protocols, +1)
        if member.is_awaiting_join:
            self.num_members_awaiting_join += 1

    def _untrack(self, member: ClassicGroupMember) -> None:
        if member._group is not self:
            return
        self._count_protocols(member.protocols, -1)
        if member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member._group = None

    def _count_protocols(self, protocols: list[tuple[str, bytes]], delta: int) -> None:
        support = self._protocol_support
        for name in {n for n, _ in protocols}:  # a member supports a name once, however often listed
            count = support.get(name, 0) + delta
            if count:
                support[name] = count
            else:
                del support[name]

    def awaiting_join_count(self) -> int:
        return self.num_members_awaiting_join

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_members_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    # ------------------------------------------------------------------ protocols

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A new member must share the protocol type and at least one protocol with all others."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        n, support = len(self.members), self._protocol_support
        return any(support.get(name, 0) == n for name, _ in protocols)

    def candidate_protocols(self) -> set[str]:
        """The protocol names every member supports."""
        n = len(self.members)
        if not n:
            return set()
        return {name for name, count in self._protocol_support.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; most votes wins, ties by
        the first member's preference order (Kafka: max by vote count)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise IllegalStateTransition(f"group {self.group_id}: no protocol supported by all members")
        votes: dict[str, int] = {}
        order: list[str] = []
        for m in self.members.values():
            vote = next(n for n in m.protocol_names() if n in candidates)
            if vote not in votes:
                order.append(vote)
            votes[vote] = votes.get(vote, 0) + 1
        return max(order, key=lambda n: votes[n])

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(ClassicGroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(ClassicGroupState.EMPTY, now_ms)
        self.pending_sync = set(self.members)

    def subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            got = subscribed_topics(m.metadata(self.protocol_name))
            if got is None:
                return None
            topics |= got
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        if self.state == ClassicGroupState.EMPTY:
            return False
        topics = self.subscribed_topics()
        return topics is not None and topic in topics
