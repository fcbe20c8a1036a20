"""Reconciliation of one consumer group member towards its target assignment (Kafka's
CurrentAssignmentBuilder): the member state machine of KIP-848.

    STABLE                 member_epoch == target epoch and it owns its target
    UNREVOKED_PARTITIONS   it must first stop using partitions the target moved elsewhere; it
                           stays at its epoch until a heartbeat's owned partitions no longer
                           contain them (or the rebalance timeout fences it)
    UNRELEASED_PARTITIONS  it reached the target epoch but some target partitions are still
                           owned by other members; they are handed over once released

Partitions are only ever given to a member once no other member owns them, and a member
receives new partitions only after it revoked what it had to give up: at any time a
partition is used by at most one member. Pure function; any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from pybroker.coordinators.group.consumer_group import (
    Assignment,
    ConsumerGroupMember,
    MemberState,
)
from pybroker.protocol.errors import Errors, KafkaError


def _owns_any(owned: Mapping[bytes, frozenset[int]] | None, partitions: Assignment) -> bool:
    """Whether the member still reports any of `partitions` (unknown owned set: assume yes)."""
    if owned is None:
        return True
    return any(owned.get(tid, frozenset()) & parts for tid, parts in partitions.items())


def _with_epoch(member: ConsumerGroupMember, epoch: int, **changes: object) -> ConsumerGroupMember:
    # Kafka's Builder.updateMemberEpoch: the previous epoch is the one the member had
    return replace(member, member_epoch=epoch, previous_member_epoch=member.member_epoch, **changes)  # type: ignore[arg-type]


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
              subscribed_topic_ids: frozenset[bytes] | set[bytes],
              owned: Mapping[bytes, frozenset[int]] | None,
              current_partition_epoch: Callable[[bytes, int], int]) -> ConsumerGroupMember:
    """The member's next state; `owned` is what its heartbeat reported (None: not sent)."""
    state = member.state
    if state == MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, target_epoch, target, subscribed_topic_ids, owned, current_partition_epoch)
        return member
    if state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.partitions_pending_revocation):
            return member
        return _next(member, target_epoch, target, subscribed_topic_ids, owned, current_partition_epoch)
    if state == MemberState.UNRELEASED_PARTITIONS:
        return _next(member, target_epoch, target, subscribed_topic_ids, owned, current_partition_epoch)
    # UNKNOWN: written by a newer broker; start over from nothing
    if owned is None or any(owned.values()):
        raise KafkaError(Errors.FENCED_MEMBER_EPOCH, "The consumer group member is in an unknown state. "
                            "The member must abandon all its partitions and rejoin.")
    return _next(replace(member, member_epoch=target_epoch), target_epoch, target, subscribed_topic_ids, owned,
                 current_partition_epoch)


def _next(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
          subscribed_topic_ids: frozenset[bytes] | set[bytes], owned: Mapping[bytes, frozenset[int]] | None,
          current_partition_epoch: Callable[[bytes, int], int]) -> ConsumerGroupMember:
    assigned: Assignment = {}
    revoking: Assignment = {}
    assigning: Assignment = {}
    unreleased = False
    for tid in set(target) | set(member.assigned_partitions):
        want = target.get(tid, frozenset()) if tid in subscribed_topic_ids else frozenset()
        current = member.assigned_partitions.get(tid, frozenset())
        keep = current & want
        revoke = current - keep
        pending_revocation = member.partitions_pending_revocation.get(tid, frozenset())
        free = set()
        for p in want - keep:
            # still owned by another member (its own pending revocations do not count)
            if current_partition_epoch(tid, p) != -1 and p not in pending_revocation:
                unreleased = True
            else:
                free.add(p)
        if keep:
            assigned[tid] = keep
        if revoke:
            revoking[tid] = revoke
        if free:
            assigning[tid] = frozenset(free)
    if revoking and _owns_any(owned, revoking):
        return _with_epoch(member, member.member_epoch, state=MemberState.UNREVOKED_PARTITIONS,
                           assigned_partitions=assigned, partitions_pending_revocation=revoking)
    for tid, parts in assigning.items():
        assigned[tid] = assigned.get(tid, frozenset()) | parts
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with_epoch(member, target_epoch, state=state, assigned_partitions=assigned,
                       partitions_pending_revocation={})
