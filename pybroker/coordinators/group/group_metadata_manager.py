"""Classic group membership of one __consumer_offsets partition (Kafka's GroupMetadataManager,
classic-protocol half: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, session and rebalance
deadlines, and the GroupMetadata records that persist a group).

Records: a GroupMetadata record (type 2) is written when a generation completes (the
leader's SyncGroup, with every member's assignment), when a group becomes Empty, when a
static member is replaced without a rebalance, and when a group is first created; a
tombstone when the group is deleted. Loading replays them into groups in state Stable (with
members) or Empty; members must then heartbeat within their session timeout.

Deadlines, all keyed operations on the CoordinatorTimer (no task per member):
    "join-<group>"          DelayedJoin: completes when every member rejoined, or at the
                            rebalance timeout (the initial-delay variant extends itself
                            while new members keep arriving, up to the rebalance timeout)
    "sync-<group>"          members that got a JoinGroup answer but never sent SyncGroup
    "heartbeat-<g>-<m>"     DelayedHeartbeat: session expiry of one member

Join and sync answers are `Future`s the server awaits. Concurrency: one thread, never
concurrently; handlers take `now_ms`.
"""

from __future__ import annotations

import logging
import uuid

from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.group.classic_group import (
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
    Future,
)
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.shard import CoordinatorResult, CoordinatorTimer, operation_error
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

log = logging.getLogger("pybroker.group")

S = ClassicGroupState
JoinMember = JoinGroupResponse.JoinGroupResponseMember


def join_error(member_id: str, code: int) -> JoinGroupResponse:
    return JoinGroupResponse(throttle_time_ms=0, error_code=int(code), generation_id=-1, protocol_type=None,
                             protocol_name=None, leader="", skip_assignment=False, member_id=member_id,
                             members=[])


def sync_error(code: int) -> SyncGroupResponse:
    return SyncGroupResponse(throttle_time_ms=0, error_code=int(code), protocol_type=None, protocol_name=None,
                             assignment=b"")


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


class GroupMetadataManager:
    def __init__(self, config: GroupConfig, timer: CoordinatorTimer) -> None:
        self.config = config
        self.timer = timer
        self.groups: dict[str, ClassicGroup] = {}

    # ------------------------------------------------------------------ groups

    def group(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    def get_or_create(self, group_id: str, now_ms: int) -> ClassicGroup:
        g = self.groups.get(group_id)
        if g is None:
            g = ClassicGroup(group_id, state_timestamp_ms=now_ms)
            self.groups[group_id] = g
        return g

    def remove_group(self, group_id: str) -> None:
        g = self.groups.pop(group_id, None)
        if g is None:
            return
        for m in g.members.values():
            # answers still awaited (the shard is unloading, or the group was deleted)
            if m.join_future is not None:
                m.join_future.complete(join_error(m.member_id, Errors.NOT_COORDINATOR))
            if m.sync_future is not None:
                m.sync_future.complete(sync_error(Errors.NOT_COORDINATOR))
            m.join_future = m.sync_future = None
        for mid in list(g.members) + list(g.pending_members):
            self.timer.cancel(heartbeat_key(group_id, mid))
        self.timer.cancel(join_key(group_id))
        self.timer.cancel(sync_key(group_id))
        g.state = S.DEAD

    # ------------------------------------------------------------------ JoinGroup

    def join(self, req: JoinGroupRequest, version: int, client_id: str, client_host: str,
             now_ms: int) -> CoordinatorResult:
        """Returns a result whose response is a Future of JoinGroupResponse."""
        fut = Future()
        result = CoordinatorResult(response=fut, replay=False)
        gid, member_id = req.group_id, req.member_id or ""
        instance_id = req.group_instance_id if version >= 5 else None
        if not gid:
            fut.complete(join_error(member_id, Errors.INVALID_GROUP_ID))
            return result
        if not (self.config.min_session_timeout_ms <= req.session_timeout_ms
                <= self.config.max_session_timeout_ms):
            fut.complete(join_error(member_id, Errors.INVALID_SESSION_TIMEOUT))
            return result
        unknown = member_id == ""
        group = self.groups.get(gid)
        is_new_group = group is None
        if group is None:
            if not unknown:
                fut.complete(join_error(member_id, Errors.UNKNOWN_MEMBER_ID))
                return result
            group = self.get_or_create(gid, now_ms)
        protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
        rebalance_timeout = req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms
        known = (member_id in group.members or member_id in group.pending_members
                 or group.static_member_id(instance_id) is not None)
        if not known and len(group.members) >= self.config.max_size:
            fut.complete(join_error(member_id, Errors.GROUP_MAX_SIZE_REACHED))
        elif not group.supports_protocols(req.protocol_type, protocols):
            fut.complete(join_error(member_id, Errors.INCONSISTENT_GROUP_PROTOCOL))
        elif unknown:
            result = self._join_new_member(group, instance_id, version, client_id, client_host,
                                           req.session_timeout_ms, rebalance_timeout, req.protocol_type,
                                           protocols, fut, now_ms)
        else:
            result = self._join_existing_member(group, member_id, instance_id, version, client_id, client_host,
                                                req.session_timeout_ms, rebalance_timeout, req.protocol_type,
                                                protocols, fut,
                                                now_ms)
        if is_new_group:
            if group.state == S.EMPTY and not group.members and not group.pending_members:
                # a join refused before it created anything leaves no group behind
                self.groups.pop(gid, None)
            else:
                # the answer does not wait for this record (the service writes it detached, as
                # Kafka answers MEMBER_ID_REQUIRED at once); if the partition refuses it, the group
                # goes again, as Kafka's runtime reverts the snapshot it was created in
                result.records = [serde.group_metadata_record(_empty_view(group)), *result.records]
                result.revert = lambda: self._forget_new_group(group)
        return result

    def _forget_new_group(self, group: ClassicGroup) -> None:
        """Undo the JoinGroup that created `group` (its record could not be appended): the group,
        its pending or joining member and their deadlines go. The join's own answer is the
        write's error (the service's `on_failed`)."""
        gid = group.group_id
        if self.groups.get(gid) is not group:
            return
        del self.groups[gid]
        for mid in list(group.members) + list(group.pending_members):
            self.timer.cancel(heartbeat_key(gid, mid))
        self.timer.cancel(join_key(gid))
        self.timer.cancel(sync_key(gid))
        group.state = S.DEAD

    def _new_member_id(self, client_id: str) -> str:
        return f"{client_id}-{uuid.uuid4()}"

    def _join_new_member(self, group: ClassicGroup, instance_id: str | None, version: int, client_id: str,
                         client_host: str, session_timeout: int, rebalance_timeout: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], fut: Future, now_ms: int) -> CoordinatorResult:
        new_id = self._new_member_id(client_id)
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                return self._replace_static_member(group, instance_id, old_id, new_id, version, session_timeout,
                                                   rebalance_timeout, protocols, fut, now_ms)
        elif version >= 4:
            # KIP-394: hand out the id first; the member must come back with it
            group.pending_members.add(new_id)
            self._schedule_heartbeat(group, new_id, session_timeout)
            fut.complete(join_error(new_id, Errors.MEMBER_ID_REQUIRED))
            return CoordinatorResult(response=fut, replay=False)
        member = ClassicGroupMember(new_id, instance_id, client_id, client_host, rebalance_timeout,
                                    session_timeout, protocol_type, protocols, join_version=version, is_new=True)
        return self._add_member_and_rebalance(group, member, fut, now_ms)

    def _add_member_and_rebalance(self, group: ClassicGroup, member: ClassicGroupMember, fut: Future,
                                  now_ms: int) -> CoordinatorResult:
        group.add(member, fut)
        if group.state == S.PREPARING_REBALANCE and group.initial_join_delay_ms >= 0:
            group.new_member_added = True
        self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
        return self._maybe_prepare_rebalance_or_check(group, fut, now_ms)

    def _join_existing_member(self, group: ClassicGroup, member_id: str, instance_id: str | None, version: int,
                              client_id: str, client_host: str, session_timeout: int, rebalance_timeout: int,
                              protocol_type: str, protocols: list[tuple[str, bytes]],
                              fut: Future, now_ms: int) -> CoordinatorResult:
        res = CoordinatorResult(response=fut, replay=False)
        member: ClassicGroupMember | None
        if member_id in group.pending_members:
            member = ClassicGroupMember(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                        session_timeout, protocol_type, protocols, join_version=version, is_new=True)
            return self._add_member_and_rebalance(group, member, fut, now_ms)
        if instance_id is not None:
            known_id = group.static_member_id(instance_id)
            if known_id is None:
                fut.complete(join_error(member_id, Errors.UNKNOWN_MEMBER_ID))
                return res
            if known_id != member_id:
                fut.complete(join_error(member_id, Errors.FENCED_INSTANCE_ID))
                return res
        member = group.members.get(member_id)
        if member is None or group.is_in(S.EMPTY, S.DEAD):
            fut.complete(join_error(member_id, Errors.UNKNOWN_MEMBER_ID))
            return res
        if group.state == S.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, session_timeout, rebalance_timeout, protocols,
                                                     fut, version, now_ms)
        if group.state == S.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # it missed our JoinGroup answer: send the current generation again
                fut.complete(self._join_response(group, member, version, leader_gets_members=True))
                return res
            return self._update_member_and_rebalance(group, member, session_timeout, rebalance_timeout, protocols,
                                                     fut, version, now_ms)
        # Stable
        if group.leader_id == member_id or not member.matches(protocols):
            return self._update_member_and_rebalance(group, member, session_timeout, rebalance_timeout, protocols,
                                                     fut, version, now_ms)
        fut.complete(self._join_response(group, member, version, leader_gets_members=False))
        return res

    def _update_member_and_rebalance(self, group: ClassicGroup, member: ClassicGroupMember, session_timeout: int,
                                     rebalance_timeout: int, protocols: list[tuple[str, bytes]], fut: Future,
                                     version: int, now_ms: int) -> CoordinatorResult:
        if member.join_future is not None:
            member.join_future.complete(join_error(member.member_id, Errors.REBALANCE_IN_PROGRESS))
        member.protocols, member.session_timeout_ms = protocols, session_timeout
        member.rebalance_timeout_ms, member.join_version = rebalance_timeout, version
        member.join_future = fut
        self._schedule_heartbeat(group, member.member_id, session_timeout)
        return self._maybe_prepare_rebalance_or_check(group, fut, now_ms)

    def _replace_static_member(self, group: ClassicGroup, instance_id: str, old_id: str, new_id: str, version: int,
                               session_timeout: int, rebalance_timeout: int, protocols: list[tuple[str, bytes]],
                               fut: Future, now_ms: int) -> CoordinatorResult:
        old = group.members[old_id]
        old_metadata = old.metadata(group.protocol_name)
        saved = (old.protocols, old.session_timeout_ms, old.rebalance_timeout_ms, old.join_version)
        leader_before = group.leader_id
        for f in (old.join_future, old.sync_future):
            if f is not None:
                f.complete(join_error(old_id, Errors.FENCED_INSTANCE_ID) if f is old.join_future
                           else sync_error(Errors.FENCED_INSTANCE_ID))
        old.join_future = old.sync_future = None
        self.timer.cancel(heartbeat_key(group.group_id, old_id))
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.protocols, member.session_timeout_ms = protocols, session_timeout
        member.rebalance_timeout_ms, member.join_version = rebalance_timeout, version
        self._schedule_heartbeat(group, new_id, session_timeout)
        res = CoordinatorResult(response=fut, replay=False)
        if group.state == S.STABLE:
            unchanged = (group.protocol_name == group.select_protocol()
                         and member.metadata(group.protocol_name) == old_metadata)
            if unchanged:
                # KIP-345: a restarted static member takes its old place without a rebalance
                res.records = [serde.group_metadata_record(group)]
                res.on_committed = lambda: fut.complete(
                    self._join_response(group, member, version, leader_gets_members=version >= 9,
                                        skip_assignment=group.leader_id == new_id))
                res.on_failed = lambda exc: self._revert_static_replacement(
                    group, instance_id, old_id, new_id, saved, leader_before, fut, exc.code)
                return res
        member.join_future = fut
        return self._maybe_prepare_rebalance_or_check(group, fut, now_ms)

    def _revert_static_replacement(self, group: ClassicGroup, instance_id: str, old_id: str, new_id: str,
                                   saved: tuple[list[tuple[str, bytes]], int, int, int], leader_before: str | None,
                                   fut: Future, code: int) -> None:
        """The record naming a restarted static member's new id was not committed: the old id
        takes the place back and the join is answered with the write's error (Kafka's
        updateStaticMemberThenRebalanceOrCompleteJoin)."""
        if self.groups.get(group.group_id) is group and group.static_member_id(instance_id) == new_id:
            self.timer.cancel(heartbeat_key(group.group_id, new_id))
            member = group.replace_static_member(instance_id, new_id, old_id)
            member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms, member.join_version = saved
            self._schedule_heartbeat(group, old_id, member.session_timeout_ms)
        fut.complete(JoinGroupResponse(throttle_time_ms=0, error_code=operation_error(code),
                                       generation_id=group.generation_id, protocol_type=group.protocol_type,
                                       protocol_name=group.protocol_name, leader=leader_before or "",
                                       skip_assignment=False, member_id="", members=[]))

    def _join_response(self, group: ClassicGroup, member: ClassicGroupMember, version: int,
                       leader_gets_members: bool, skip_assignment: bool = False) -> JoinGroupResponse:
        is_leader = group.leader_id == member.member_id
        members = []
        if is_leader and leader_gets_members:
            members = [JoinMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                  metadata=m.metadata(group.protocol_name)) for m in group.members.values()]
        return JoinGroupResponse(throttle_time_ms=0, error_code=0, generation_id=group.generation_id,
                                 protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                                 leader=group.leader_id or "", skip_assignment=skip_assignment,
                                 member_id=member.member_id, members=members)

    # ------------------------------------------------------------------ rebalance

    def _maybe_prepare_rebalance_or_check(self, group: ClassicGroup, fut: Future, now_ms: int) -> CoordinatorResult:
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY):
            self._prepare_rebalance(group, now_ms)
        elif group.state == S.PREPARING_REBALANCE:
            self.timer.check(join_key(group.group_id))
        return CoordinatorResult(response=fut, replay=False)

    def prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> None:
        """Start a rebalance of a Stable / CompletingRebalance / Empty group (members must rejoin)."""
        self._prepare_rebalance(group, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> None:
        if group.state == S.COMPLETING_REBALANCE:
            # assignments of the aborted generation never reach anyone
            for m in group.members.values():
                m.assignment = b""
                if m.sync_future is not None:
                    m.sync_future.complete(sync_error(Errors.REBALANCE_IN_PROGRESS))
                    m.sync_future = None
        self.timer.cancel(sync_key(group.group_id))
        was_empty = group.state == S.EMPTY
        group.transition_to(S.PREPARING_REBALANCE, now_ms)
        rebalance_timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        gid = group.group_id
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_timeout)
            group.initial_join_delay_ms = max(rebalance_timeout - delay, 0)
            group.new_member_added = False
            self.timer.schedule(join_key(gid), delay, lambda now: self._initial_join_expired(gid, now),
                                kind="join")
        else:
            group.initial_join_delay_ms = -1
            self.timer.schedule(join_key(gid), rebalance_timeout, lambda now: self._complete_join(gid, now),
                                kind="join", try_complete=lambda: group.has_all_members_joined())
            self.timer.check(join_key(gid))

    def _initial_join_expired(self, group_id: str, now_ms: int) -> CoordinatorResult | None:
        group = self.groups.get(group_id)
        if group is None or group.state != S.PREPARING_REBALANCE:
            return None
        remaining = group.initial_join_delay_ms
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            group.initial_join_delay_ms = remaining - delay
            self.timer.schedule(join_key(group_id), delay, lambda now: self._initial_join_expired(group_id, now),
                                kind="join")
            return None
        return self._complete_join(group_id, now_ms)

    def _complete_join(self, group_id: str, now_ms: int) -> CoordinatorResult | None:
        """The join phase ends: drop members that did not rejoin, start the next generation."""
        group = self.groups.get(group_id)
        if group is None or group.state != S.PREPARING_REBALANCE:
            return None
        self.timer.cancel(join_key(group_id))
        group.initial_join_delay_ms = -1
        for m in group.not_yet_rejoined():
            self._remove_member(group, m.member_id, Errors.UNKNOWN_MEMBER_ID)
        group.init_next_generation(now_ms)
        if group.state == S.EMPTY:
            log.info("group %s is empty at generation %d", group_id, group.generation_id)
            return CoordinatorResult(records=[serde.group_metadata_record(group)], replay=False)
        log.info("group %s: generation %d with %d members, protocol %s", group_id, group.generation_id,
                 len(group.members), group.protocol_name)
        for m in group.members.values():
            fut = m.join_future
            m.join_future, m.is_new = None, False
            if fut is not None:
                fut.complete(self._join_response(group, m, m.join_version, leader_gets_members=True))
            self._schedule_heartbeat(group, m.member_id, m.session_timeout_ms)
        generation = group.generation_id
        rebalance_timeout = max(m.rebalance_timeout_ms for m in group.members.values())
        self.timer.schedule(sync_key(group_id), rebalance_timeout,
                            lambda now: self._expire_pending_sync(group_id, generation, now), kind="sync")
        return None

    def _expire_pending_sync(self, group_id: str, generation: int, now_ms: int) -> CoordinatorResult | None:
        group = self.groups.get(group_id)
        if group is None or group.generation_id != generation or not group.pending_sync:
            return None
        if group.is_in(S.COMPLETING_REBALANCE, S.STABLE):
            for mid in list(group.pending_sync):
                log.info("group %s: member %s never sent SyncGroup; removing it", group_id, mid)
                self._remove_member(group, mid, Errors.REBALANCE_IN_PROGRESS)
            return self._after_members_removed(group, now_ms)
        return None

    # ------------------------------------------------------------------ SyncGroup

    def sync(self, req: SyncGroupRequest, version: int, now_ms: int) -> CoordinatorResult:
        fut = Future()
        res = CoordinatorResult(response=fut, replay=False)
        group = self.groups.get(req.group_id)
        instance_id = req.group_instance_id if version >= 3 else None
        err = self._validate_member(group, req.member_id, instance_id)
        if err is None and group is not None:
            if req.generation_id != group.generation_id:
                err = Errors.ILLEGAL_GENERATION
            elif version >= 5 and ((req.protocol_type is not None and req.protocol_type != group.protocol_type)
                                   or (req.protocol_name is not None and req.protocol_name != group.protocol_name)):
                err = Errors.INCONSISTENT_GROUP_PROTOCOL
            elif group.state == S.PREPARING_REBALANCE:
                err = Errors.REBALANCE_IN_PROGRESS
        if err is not None or group is None:
            fut.complete(sync_error(err or Errors.UNKNOWN_MEMBER_ID))
            return res
        member = group.members[req.member_id]
        self._remove_pending_sync(group, req.member_id)
        if group.state == S.STABLE:
            fut.complete(self._sync_response(group, member))
            return res
        # CompletingRebalance
        if member.sync_future is not None:
            member.sync_future.complete(sync_error(Errors.REBALANCE_IN_PROGRESS))
        member.sync_future = fut
        if group.leader_id == req.member_id:
            assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
            generation = group.generation_id
            res.records = [serde.group_metadata_record(group, assignments)]

            def committed() -> None:
                if group.state != S.COMPLETING_REBALANCE or group.generation_id != generation:
                    return
                for m in group.members.values():
                    m.assignment = assignments.get(m.member_id, b"")
                group.transition_to(S.STABLE, now_ms)
                for m in group.members.values():
                    if m.sync_future is not None:
                        f, m.sync_future = m.sync_future, None
                        f.complete(self._sync_response(group, m))
            res.on_committed = committed
        return res

    def _sync_response(self, group: ClassicGroup, member: ClassicGroupMember) -> SyncGroupResponse:
        return SyncGroupResponse(throttle_time_ms=0, error_code=0, protocol_type=group.protocol_type,
                                 protocol_name=group.protocol_name, assignment=member.assignment)

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self.timer.cancel(sync_key(group.group_id))

    def _validate_member(self, group: ClassicGroup | None, member_id: str, instance_id: str | None) -> int | None:
        if group is None:
            return Errors.UNKNOWN_MEMBER_ID
        if group.state == S.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE
        error = group.member_identity_error(member_id, instance_id)
        return error

    # ------------------------------------------------------------------ Heartbeat

    def heartbeat(self, req: HeartbeatRequest, version: int, now_ms: int) -> int:
        """Returns the error code (Kafka's classic heartbeat rules)."""
        group = self.groups.get(req.group_id)
        instance_id = req.group_instance_id if version >= 3 else None
        if group is not None and group.state == S.EMPTY:
            return Errors.UNKNOWN_MEMBER_ID
        err = self._validate_member(group, req.member_id, instance_id)
        if err is not None or group is None:
            return err or Errors.UNKNOWN_MEMBER_ID
        if req.generation_id != group.generation_id:
            return Errors.ILLEGAL_GENERATION
        member = group.members[req.member_id]
        self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
        if group.state == S.PREPARING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS
        return 0

    def schedule_heartbeat(self, group: ClassicGroup, member_id: str, session_timeout_ms: int) -> None:
        """(Re)start the member's session deadline."""
        self._schedule_heartbeat(group, member_id, session_timeout_ms)

    def _schedule_heartbeat(self, group: ClassicGroup, member_id: str, session_timeout_ms: int) -> None:
        gid = group.group_id
        self.timer.schedule(heartbeat_key(gid, member_id), session_timeout_ms,
                            lambda now: self._expire_heartbeat(gid, member_id, session_timeout_ms, now),
                            kind="heartbeat")

    def _expire_heartbeat(self, group_id: str, member_id: str, session_timeout_ms: int,
                          now_ms: int) -> CoordinatorResult | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            if group.state == S.PREPARING_REBALANCE:
                self.timer.check(join_key(group_id))
            return None
        member = group.members.get(member_id)
        if member is None:
            return None
        if member.is_awaiting_join or member.is_awaiting_sync:
            # a member waiting on us cannot heartbeat: its answer's deadline governs it
            self._schedule_heartbeat(group, member_id, session_timeout_ms)
            return None
        log.info("group %s: member %s session expired", group_id, member_id)
        self._remove_member(group, member_id, Errors.UNKNOWN_MEMBER_ID)
        return self._after_members_removed(group, now_ms)

    # ------------------------------------------------------------------ LeaveGroup

    def leave(self, req: LeaveGroupRequest, version: int, now_ms: int) -> CoordinatorResult:
        if version >= 3:
            identities = [(m.member_id, m.group_instance_id) for m in req.members]
        else:
            identities = [(req.member_id, None)]
        group = self.groups.get(req.group_id)
        out: list[tuple[str, str | None, int]] = []
        res = CoordinatorResult(replay=False)
        if group is not None and group.state == S.DEAD:
            res.response = LeaveGroupResponse(throttle_time_ms=0, error_code=Errors.COORDINATOR_NOT_AVAILABLE,
                                              members=[])
            return res
        removed = False
        for member_id, instance_id in identities:
            code = 0
            if group is None:
                code = Errors.UNKNOWN_MEMBER_ID
            elif instance_id is None:
                if member_id in group.pending_members:
                    group.pending_members.discard(member_id)
                    self.timer.cancel(heartbeat_key(group.group_id, member_id))
                    removed = True
                elif member_id in group.members:
                    self._remove_member(group, member_id, Errors.UNKNOWN_MEMBER_ID)
                    removed = True
                else:
                    code = Errors.UNKNOWN_MEMBER_ID
            else:
                known = group.static_member_id(instance_id)
                if known is None:
                    code = Errors.UNKNOWN_MEMBER_ID
                elif member_id and member_id != known:
                    code = Errors.FENCED_INSTANCE_ID
                else:
                    self._remove_member(group, known, Errors.UNKNOWN_MEMBER_ID)
                    member_id = known
                    removed = True
            out.append((member_id, instance_id, int(code)))
        if removed and group is not None:
            self._after_members_removed(group, now_ms)
        members = [LeaveGroupResponse.MemberResponse(member_id=mid, group_instance_id=iid, error_code=code)
                   for mid, iid, code in out]
        top = 0 if version >= 3 else (out[0][2] if out else 0)
        res.response = LeaveGroupResponse(throttle_time_ms=0, error_code=top, members=members)
        return res

    # ------------------------------------------------------------------ removal

    def _remove_member(self, group: ClassicGroup, member_id: str, code: int) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        if member.join_future is not None:
            member.join_future.complete(join_error(member_id, code))
        if member.sync_future is not None:
            member.sync_future.complete(sync_error(code))
        member.join_future = member.sync_future = None
        self.timer.cancel(heartbeat_key(group.group_id, member_id))
        group.remove(member_id)
        if not group.pending_sync:
            self.timer.cancel(sync_key(group.group_id))

    def _after_members_removed(self, group: ClassicGroup, now_ms: int) -> CoordinatorResult | None:
        # a join completed by timer.check() here writes its own records through the timer
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms)
        elif group.state == S.PREPARING_REBALANCE:
            self.timer.check(join_key(group.group_id))
        return None


def _empty_view(group: ClassicGroup) -> ClassicGroup:
    """The group as first created: Empty, no members (what Kafka persists for a new group)."""
    return ClassicGroup(group.group_id, state_timestamp_ms=group.state_timestamp_ms,
                        generation_id=0, protocol_type=group.protocol_type)
