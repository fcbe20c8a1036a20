"""KIP-848 consumer groups of one __consumer_offsets partition (the consumer half of Kafka's
GroupMetadataManager: consumerGroupHeartbeat, consumerGroupLeave, session and rebalance
timeouts, consumerGroupDescribe). Classic groups live in group_metadata_manager.py; a group id
is one or the other.

A heartbeat, as Kafka runs it:
 1. validate (member id, epochs: FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID, static instance ids);
 2. update the member's subscription; when a member joins, changes its subscription, or the
    subscribed topics change (created, deleted, partitions added — resolved against the
    broker's metadata image on every heartbeat, regex subscriptions included), the group
    epoch bumps;
 3. if group epoch > target assignment epoch, the group's server-side assignor (the members'
    most requested `server_assignor`, else the first of group.consumer.assignors) computes a
    new target assignment;
 4. the member reconciles towards its target (current_assignment_builder);
 5. the answer carries the member epoch, heartbeat interval and — on a full request or when
    it changed — the assignment, as topic ids + partitions.

Handlers never change the state: they return records (consumer_group_records) and the runtime
replays them into ConsumerGroup (on write and on load alike), so state == what the topic says.

Deadlines on the CoordinatorTimer (one timing wheel, no task per member):
    "consumer-session-<group>-<member>"    group.consumer.session.timeout.ms after the last
                                           heartbeat: the member is fenced (removed)
    "consumer-rebalance-<group>-<member>"  the member's rebalance timeout while it holds
                                           partitions it must revoke: fenced if still holding
    "consumer-join-<group>-<member>"       a classic member told to rejoin (REBALANCE_IN_PROGRESS)
                                           must send JoinGroup within its rebalance timeout
    "consumer-sync-<group>-<member>"       ... and SyncGroup within it after its JoinGroup answer
A classic member's session deadline is its own JoinGroup session timeout. Removing the last
consumer-protocol member of a group whose other members are all classic converts it to a
classic group (`downgrade` hook, group_migration.py); a heartbeat for a non-empty classic
group converts that one (`upgrade_classic_group` hook).

Concurrency: one thread (the shard's); handlers take `now_ms`.
"""

from __future__ import annotations

import base64
import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from pybroker.coordinators.group import consumer_group_records as rec
from pybroker.coordinators.group.assignors import MemberSpec, get_assignor
from pybroker.coordinators.group.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    TopicMetadata,
    count_subscription,
)
from pybroker.coordinators.group.current_assignment_builder import reconcile
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.record_serde import CoordinatorRecord
from pybroker.coordinators.shard import CoordinatorResult, CoordinatorTimer
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

log = logging.getLogger("pybroker.group")

R = ConsumerGroupHeartbeatResponse
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session-{group_id}-{member_id}"


def rebalance_key(group_id: str, member_id: str) -> str:
    return f"consumer-rebalance-{group_id}-{member_id}"


def join_key(group_id: str, member_id: str) -> str:
    return f"consumer-join-{group_id}-{member_id}"


def sync_key(group_id: str, member_id: str) -> str:
    return f"consumer-sync-{group_id}-{member_id}"


def heartbeat_error(code: int, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
    return R(throttle_time_ms=0, error_code=int(code), error_message=message, member_id=None, member_epoch=0,
             heartbeat_interval_ms=0, assignment=None)


def new_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): url-safe base64 of 16 random bytes, no padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def validate_heartbeat(req: ConsumerGroupHeartbeatRequest, version: int, assignors: tuple[str, ...]) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR)."""
    def invalid(msg: str) -> KafkaError:
        return KafkaError(Errors.INVALID_REQUEST, msg)
    epoch = req.member_epoch
    if (version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION or epoch > 0
            or epoch == LEAVE_GROUP_MEMBER_EPOCH) and req.member_id == "":
        raise invalid("MemberId can't be empty.")
    if req.group_id == "":
        raise invalid("GroupId can't be empty.")
    if req.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if req.rack_id == "":
        raise invalid("RackId can't be empty.")
    regex = req.subscribed_topic_regex if version >= 1 else None
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and regex is None:
            raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise KafkaError(Errors.UNSUPPORTED_ASSIGNOR,
                            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                            f"{', '.join(assignors)}.")
    if regex:
        try:
            re.compile(regex)
        except re.error as exc:
            raise KafkaError(Errors.INVALID_REGULAR_EXPRESSION,
                                f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.") from None


class ConsumerGroupManager:
    def __init__(self, config: GroupConfig, timer: CoordinatorTimer, image: Any = None,
                 upgrade_classic_group: Callable[[str, int, list[CoordinatorRecord]], ConsumerGroup | None]
                 = lambda _g, _e, _r: None,
                 downgrade: Callable[[ConsumerGroup, str, int], list[CoordinatorRecord] | None]
                 = lambda _g, _m, _t: None
                 ) -> None:
        """`image` answers topics_by_name / topics_by_id (the broker's MetadataImage).
        `upgrade_classic_group(group_id, member_epoch, records)`: when a classic group holds the
        id, the consumer group it becomes (a scratch group holding what `records` — to which
        it appends the conversion records — will create), or KafkaError; None when no
        classic group holds it. `downgrade(group, leaving_member_id, now_ms)`: when removing that
        member leaves only classic members and the policy allows, convert the group to a
        classic group in memory and return the records that persist it; else None."""
        self.config = config
        self.timer = timer
        self.image = image
        self.groups: dict[str, ConsumerGroup] = {}
        self.upgrade_classic_group = upgrade_classic_group
        self.downgrade = downgrade
        self._regex_cache: dict[str, re.Pattern[str]] = {}

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    # ------------------------------------------------------------------ replay

    def replay(self, record: CoordinatorRecord) -> None:
        kind, key, value = record.key_version, record.key, record.value
        gid = key.group_id
        group = self.groups.get(gid)
        if group is None:
            if value is None:
                return
            group = self.groups[gid] = ConsumerGroup(gid)
        if kind == rec.GROUP_METADATA and value is None:
            self.remove_group(gid)
        else:
            replay_into(group, record)

    def remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            for mid in group.members:
                self._cancel_timers(group_id, mid)

    def on_loaded(self) -> None:
        """Loaded members must heartbeat within the session timeout, as after a failover."""
        for group in self.groups.values():
            for m in group.members.values():
                self.schedule_session(group.group_id, m)
                if m.state == MemberState.UNREVOKED_PARTITIONS and not m.use_classic_protocol:
                    self._schedule_rebalance(group.group_id, m)

    def on_unloaded(self) -> None:
        for gid in list(self.groups):
            self.remove_group(gid)

    # ------------------------------------------------------------------ metadata

    def _topic(self, name: str) -> Any:
        return None if self.image is None else self.image.topics_by_name.get(name)

    def topic_name(self, topic_id: bytes) -> str | None:
        t = None if self.image is None else self.image.topics_by_id.get(topic_id)
        return None if t is None else t.name

    def _regex_matches(self, regex: str) -> set[str]:
        pattern = self._regex_cache.get(regex)
        if pattern is None:
            try:
                pattern = self._regex_cache[regex] = re.compile(regex)
            except re.error:
                return set()
        names = () if self.image is None else self.image.topics_by_name
        return {n for n in names if n not in INTERNAL_TOPICS and pattern.fullmatch(n)}

    def subscribed_names(self, member: ConsumerGroupMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names |= self._regex_matches(member.subscribed_topic_regex)
        return names

    def _subscription_metadata(self, group: ConsumerGroup, removed: tuple[ConsumerGroupMember, ...] = (),
                               added: tuple[ConsumerGroupMember, ...] = ()) -> dict[str, TopicMetadata]:
        """The metadata of every topic the group's members subscribe to (by name or regex), as
        the broker's image has it now, with the members `removed` taken out and `added` put in.
        Works from the group's per-topic/per-regex subscriber counts: O(subscribed topics), not
        O(members)."""
        names, regexes = group.subscribed_topic_name_counts, group.subscribed_regex_counts
        if len(removed) != len(added) or any(
                _subscription(r) != _subscription(a) for r, a in zip(removed, added, strict=True)):
            names, regexes = dict(names), dict(regexes)
            for m in removed:
                count_subscription(names, regexes, m, -1)
            for m in added:
                count_subscription(names, regexes, m, +1)
        out: dict[str, TopicMetadata] = {}
        for name in self._resolve(names, regexes):
            t = self._topic(name)
            if t is not None and t.partitions:
                out[name] = TopicMetadata(t.topic_id, name, len(t.partitions))
        return out

    def _resolve(self, names: dict[str, int], regexes: dict[str, int]) -> Iterable[str]:
        if not regexes:
            return names
        out = set(names)
        for regex in regexes:
            out |= self._regex_matches(regex)
        return out

    def _subscribed_ids(self, member: ConsumerGroupMember, metadata: dict[str, TopicMetadata]) -> frozenset[bytes]:
        return frozenset(metadata[n].topic_id for n in self.subscribed_names(member) if n in metadata)

    def preferred_assignor(self, members: dict[str, ConsumerGroupMember] | None) -> str:
        """The assignor most members ask for (Kafka's computePreferredServerAssignor), else the default."""
        counts = Counter(m.server_assignor for m in (members or {}).values() if m.server_assignor)
        if counts:
            return max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
        return self.config.consumer_group_assignors[0]

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(self, req: ConsumerGroupHeartbeatRequest, version: int, client_id: str, client_host: str,
                  now_ms: int) -> CoordinatorResult:
        try:
            validate_heartbeat(req, version, self.config.consumer_group_assignors)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(req, now_ms)
            return self._heartbeat(req, version, client_id, client_host)
        except KafkaError as exc:
            return CoordinatorResult(response=heartbeat_error(exc.code, exc.message))

    def _heartbeat(self, req: ConsumerGroupHeartbeatRequest, version: int, client_id: str,
                   client_host: str) -> CoordinatorResult:
        gid, epoch = req.group_id, req.member_epoch
        records: list[CoordinatorRecord] = []
        group = self.groups.get(gid)
        if group is None:
            # a classic group of that id: an Empty one gives way, a non-empty one is converted
            # (online upgrade) or refuses (GROUP_ID_NOT_FOUND)
            group = self.upgrade_classic_group(gid, epoch, records)
            if group is None:
                if epoch != 0:
                    # the group is gone (deleted, or its records expired): make the member rejoin
                    raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Consumer group {gid} not found.")
                group = ConsumerGroup(gid)  # scratch: replaying the records creates the real one
        member_id = req.member_id
        if version < CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION and epoch == 0 and not member_id:
            member_id = new_member_id()
        # read-only on the steady path; copied only when a member joins (a static takeover
        # edits the copies) or a new target assignment is computed
        members = group.members
        targets = group.target_assignment
        member = members.get(member_id)
        replaced: tuple[ConsumerGroupMember, ...] = () if member is None else (member,)
        owned = _owned(req.topic_partitions)
        is_new = False
        if epoch == 0:
            if member is None:
                if len(members) >= self.config.consumer_group_max_size:
                    raise KafkaError(Errors.GROUP_MAX_SIZE_REACHED,
                                        f"The consumer group has reached its maximum capacity of "
                                        f"{self.config.consumer_group_max_size} members.")
                members, targets = dict(members), dict(targets)
                member = self.static_takeover(group, req.instance_id, member_id, members, targets, records)
                if member is not None:
                    assert req.instance_id is not None  # a takeover is by instance id
                    replaced = (group.members[group.static_members[req.instance_id]],)
                else:
                    member = ConsumerGroupMember(member_id)
                    is_new = True
        else:
            if member is None:
                raise KafkaError(Errors.UNKNOWN_MEMBER_ID,
                                    f"Member {member_id} is not a member of group {gid}.")
            _check_member_epoch(member, epoch, owned)
            if req.instance_id is not None and member.instance_id not in (None, req.instance_id):
                raise KafkaError(Errors.FENCED_INSTANCE_ID,
                                    f"Member {member_id} has instance id {member.instance_id}, "
                                    f"not {req.instance_id}.")
        regex = req.subscribed_topic_regex if version >= 1 else None
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            subscribed_topic_names=(tuple(req.subscribed_topic_names) if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(regex or None) if regex is not None else member.subscribed_topic_regex,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            client_id=client_id, client_host=client_host)
        reconciled = self.update_member(group, member, updated, replaced, is_new, members, targets, owned, records)
        self.schedule_session(gid, reconciled)
        full = epoch == 0 or (req.rebalance_timeout_ms != -1 and owned is not None
                              and (req.subscribed_topic_names is not None or regex is not None))
        resp = R(throttle_time_ms=0, error_code=0, error_message=None, member_id=member_id,
                 member_epoch=reconciled.member_epoch,
                 heartbeat_interval_ms=self.heartbeat_interval_ms(gid), assignment=None)
        if full or reconciled.assigned_partitions != member.assigned_partitions:
            resp.assignment = R.Assignment(topic_partitions=[
                R.TopicPartitions(topic_id=tid, partitions=sorted(parts))
                for tid, parts in sorted(reconciled.assigned_partitions.items())])
        return CoordinatorResult(records=records, response=resp)

    def update_member(self, group: ConsumerGroup, member: ConsumerGroupMember, updated: ConsumerGroupMember,
                      replaced: tuple[ConsumerGroupMember, ...], is_new: bool,
                      members: dict[str, ConsumerGroupMember], targets: dict[str, Assignment],
                      owned: dict[bytes, frozenset[int]] | None,
                      records: list[CoordinatorRecord]) -> ConsumerGroupMember:
        """Steps 2-4 of a heartbeat, shared with a classic member's JoinGroup: persist the
        member's changed metadata, bump the group epoch when subscriptions or the subscribed
        topics changed, compute a new target assignment when the group epoch is ahead of it,
        and reconcile the member towards its target. Returns the reconciled member; the
        records go to `records`."""
        gid, member_id = group.group_id, updated.member_id
        bump = is_new
        if is_new or updated.subscription_key() != member.subscription_key():
            records.append(rec.member_metadata_record(gid, updated))
            bump = bump or (set(updated.subscribed_topic_names) != set(member.subscribed_topic_names)
                            or updated.subscribed_topic_regex != member.subscribed_topic_regex)
        metadata = self._subscription_metadata(group, replaced, (updated,))
        if metadata != group.subscription_metadata:
            records.append(rec.partition_metadata_record(gid, metadata))
            bump = True
        group_epoch = group.group_epoch + 1 if bump else group.group_epoch
        if bump:
            records.append(rec.group_epoch_record(gid, group_epoch))
        target_epoch = group.target_assignment_epoch
        if group_epoch > target_epoch:
            if members is group.members:
                members = dict(members)
            members[member_id] = updated
            targets = self._compute_targets(gid, members, targets, metadata, records)
            records.append(rec.target_assignment_epoch_record(gid, group_epoch))
            target_epoch = group_epoch
        reconciled = reconcile(updated, target_epoch, targets.get(member_id, {}),
                               self._subscribed_ids(updated, metadata), owned, group.current_partition_epoch)
        if is_new or reconciled.assignment_key() != member.assignment_key():
            records.append(rec.current_assignment_record(gid, reconciled))
            # classic members have join and sync deadlines instead of a rebalance timeout
            if reconciled.state == MemberState.UNREVOKED_PARTITIONS and not reconciled.use_classic_protocol:
                self._schedule_rebalance(gid, reconciled)
            else:
                self.timer.cancel(rebalance_key(gid, member_id))
        return reconciled

    def static_takeover(self, group: ConsumerGroup, instance_id: str | None, member_id: str,
                        members: dict[str, ConsumerGroupMember], targets: dict[str, Assignment],
                        records: list[CoordinatorRecord], use_classic_protocol: bool = False
                        ) -> ConsumerGroupMember | None:
        """A static member rejoining under a new member id takes over its old place (KIP-345)."""
        if instance_id is None:
            return None
        old_id = group.static_members.get(instance_id)
        if old_id is None or old_id == member_id:
            return None
        old = members[old_id]
        # two consumer-protocol instances: the old one must have left (epoch -2) first
        if not use_classic_protocol and not old.use_classic_protocol and old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise KafkaError(Errors.UNRELEASED_INSTANCE_ID,
                                f"Static member {old_id} with instance id {instance_id} is not released yet.")
        gid = group.group_id
        records.extend(rec.member_removal_records(gid, old_id))
        self._cancel_timers(gid, old_id)
        del members[old_id]
        target = targets.pop(old_id, {})
        targets[member_id] = target
        new = replace(old, member_id=member_id, member_epoch=0, previous_member_epoch=0, state=MemberState.STABLE,
                      partitions_pending_revocation={})
        records.append(rec.member_metadata_record(gid, new))
        records.append(rec.target_member_record(gid, member_id, target))
        records.append(rec.current_assignment_record(gid, new))
        return new

    def _compute_targets(self, gid: str, members: dict[str, ConsumerGroupMember], targets: dict[str, Assignment],
                         metadata: dict[str, TopicMetadata], records: list[CoordinatorRecord]
                         ) -> dict[str, Assignment]:
        assignor = get_assignor(self.preferred_assignor(members))
        assert assignor is not None
        specs = {mid: MemberSpec(mid, self._subscribed_ids(m, metadata), targets.get(mid, {}), m.instance_id,
                                 m.rack_id) for mid, m in members.items()}
        topics = {t.topic_id: t.num_partitions for t in metadata.values()}
        new = assignor.assign(specs, topics)
        for mid in sorted(new):
            if mid not in targets or new[mid] != targets[mid]:
                records.append(rec.target_member_record(gid, mid, new[mid]))
        return new

    # ------------------------------------------------------------------ leaving and fencing

    def _leave(self, req: ConsumerGroupHeartbeatRequest, now_ms: int) -> CoordinatorResult:
        gid = req.group_id
        group = self.groups.get(gid)
        if group is None:
            raise KafkaError(Errors.GROUP_ID_NOT_FOUND, f"Consumer group {gid} not found.")
        member = group.members.get(req.member_id)
        if member is None and req.instance_id is not None:
            known = group.static_members.get(req.instance_id)
            if known is not None and req.member_id and known != req.member_id:
                raise KafkaError(Errors.FENCED_INSTANCE_ID,
                                    f"Instance id {req.instance_id} belongs to member {known}.")
            member = group.members.get(known) if known is not None else None
        if member is None:
            raise KafkaError(Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {gid}.")
        resp = R(throttle_time_ms=0, error_code=0, error_message=None, member_id=member.member_id,
                 member_epoch=req.member_epoch, heartbeat_interval_ms=0, assignment=None)
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and member.instance_id is not None:
            # a static member leaving temporarily keeps its assignment until its session expires
            left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                           previous_member_epoch=member.member_epoch)
            self.timer.cancel(rebalance_key(gid, member.member_id))
            self.schedule_session(gid, member)
            log.info("group %s: static member %s left temporarily", gid, member.member_id)
            return CoordinatorResult(records=[rec.current_assignment_record(gid, left)], response=resp)
        log.info("group %s: member %s left", gid, member.member_id)
        return self.fence_member(group, member.member_id, now_ms, resp)

    def fence_member(self, group: ConsumerGroup, member_id: str, now_ms: int, response: Any = None
                     ) -> CoordinatorResult:
        """Kafka's consumerGroupFenceMember: remove the member; when only classic members would
        remain, the group is converted to a classic group instead (online downgrade: the state
        is changed in memory, the records only persist it)."""
        records = self.downgrade(group, member_id, now_ms)
        if records is not None:
            return CoordinatorResult(records=records, response=response, replay=False)
        return CoordinatorResult(records=self.fence_records(group, member_id), response=response)

    def fence_records(self, group: ConsumerGroup, member_id: str) -> list[CoordinatorRecord]:
        """Remove a member: its records' tombstones, the new subscription metadata, a new group epoch."""
        gid = group.group_id
        self._cancel_timers(gid, member_id)
        records = rec.member_removal_records(gid, member_id)
        member = group.members.get(member_id)
        metadata = self._subscription_metadata(group, () if member is None else (member,))
        if metadata != group.subscription_metadata:
            records.append(rec.partition_metadata_record(gid, metadata))
        records.append(rec.group_epoch_record(gid, group.group_epoch + 1))
        return records

    def subscription_metadata_without(self, group: ConsumerGroup, removed: tuple[ConsumerGroupMember, ...]
                                      ) -> dict[str, TopicMetadata]:
        """The group's subscription metadata once `removed` are gone."""
        return self._subscription_metadata(group, removed)

    def cancel_timers(self, gid: str, mid: str) -> None:
        self._cancel_timers(gid, mid)

    def _cancel_timers(self, gid: str, mid: str) -> None:
        self.timer.cancel(session_key(gid, mid))
        self.timer.cancel(rebalance_key(gid, mid))
        self.timer.cancel(join_key(gid, mid))
        self.timer.cancel(sync_key(gid, mid))

    def schedule_session(self, gid: str, member: ConsumerGroupMember) -> None:
        """The member's session deadline: group.consumer.session.timeout.ms, or a classic
        member's own JoinGroup session timeout."""
        classic = member.classic_member_metadata
        timeout = classic.session_timeout_ms if classic is not None else self.session_timeout_ms(gid)
        self.schedule_session_ms(gid, member.member_id, timeout)

    # A GROUP config resource's (type 32) consumer.* override wins for its group (Kafka's
    # GroupConfigManager). The image holds the overrides, validated by the controller before
    # they were written (controller/group_configs.py), so they parse as ints.
    def _group_override(self, gid: str, key: str) -> int | None:
        configs = getattr(self.image, "configs", None)
        raw = configs.get((32, gid), {}).get(key) if configs is not None else None
        return None if raw is None else int(raw)

    def session_timeout_ms(self, gid: str) -> int:
        v = self._group_override(gid, "consumer.session.timeout.ms")
        return self.config.consumer_group_session_timeout_ms if v is None else v

    def heartbeat_interval_ms(self, gid: str) -> int:
        v = self._group_override(gid, "consumer.heartbeat.interval.ms")
        return self.config.consumer_group_heartbeat_interval_ms if v is None else v

    def schedule_session_ms(self, gid: str, mid: str, timeout_ms: int) -> None:
        self.timer.schedule(session_key(gid, mid), timeout_ms, lambda now: self._session_expired(gid, mid, now),
                            kind="heartbeat")

    def fence_later(self, key: str, gid: str, mid: str, timeout_ms: int, why: str, if_absent: bool = False) -> None:
        """A classic member's join or sync deadline: fenced when it passes (Kafka's
        scheduleConsumerGroupJoinTimeoutIfAbsent / scheduleConsumerGroupSyncTimeout)."""
        if if_absent and self.timer.is_scheduled(key):
            return

        def expire(now: int) -> CoordinatorResult | None:
            group = self.groups.get(gid)
            if group is None or mid not in group.members:
                return None
            log.info("group %s: member %s fenced, %s", gid, mid, why)
            return self.fence_member(group, mid, now)
        self.timer.schedule(key, timeout_ms, expire, kind="task")

    def _session_expired(self, gid: str, mid: str, now_ms: int) -> CoordinatorResult | None:
        group = self.groups.get(gid)
        if group is None or mid not in group.members:
            return None
        log.info("group %s: member %s fenced, its session expired", gid, mid)
        return self.fence_member(group, mid, now_ms)

    def _schedule_rebalance(self, gid: str, member: ConsumerGroupMember) -> None:
        mid, epoch = member.member_id, member.member_epoch
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else \
            self.session_timeout_ms(gid)
        self.timer.schedule(rebalance_key(gid, mid), timeout,
                            lambda now: self._rebalance_expired(gid, mid, epoch, now), kind="task")

    def _rebalance_expired(self, gid: str, mid: str, epoch: int, now_ms: int) -> CoordinatorResult | None:
        group = self.groups.get(gid)
        member = None if group is None else group.members.get(mid)
        if member is None or member.member_epoch != epoch or member.state != MemberState.UNREVOKED_PARTITIONS:
            return None
        log.info("group %s: member %s fenced, it did not revoke its partitions in time", gid, mid)
        return self.fence_member(group, mid, now_ms)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ offsets

    def validate_offset_commit(self, group: ConsumerGroup, member_id: str, member_epoch: int, version: int) -> int:
        """Kafka's ConsumerGroup.validateOffsetCommit: an error code, 0 if allowed."""
        if member_epoch < 0 and group.is_empty():
            return 0  # admin / assign()-only commits to an Empty group
        member = group.members.get(member_id)
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        if version < 9 and not member.use_classic_protocol:
            return Errors.UNSUPPORTED_VERSION  # consumer-protocol members must use OffsetCommit v9+
        return _member_epoch_error(member, member_epoch)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> int:
        """Kafka's ConsumerGroup.validateOffsetFetch: an error code, 0 if allowed."""
        group = self.groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return 0
        member = group.members.get(member_id or "")
        if member is None:
            return Errors.UNKNOWN_MEMBER_ID
        return _member_epoch_error(member, member_epoch)

    def delete_group_records(self, group_id: str) -> list[CoordinatorRecord]:
        group = self.groups[group_id]
        return rec.group_tombstones(group_id, sorted(group.members))


def replay_into(group: ConsumerGroup, record: CoordinatorRecord) -> None:
    """Apply one ConsumerGroup* record (types 3..8) to `group` (a group tombstone is the caller's)."""
    kind, key, value = record.key_version, record.key, record.value
    if kind == rec.GROUP_METADATA:
        if value is not None:
            group.group_epoch = value.epoch
    elif kind == rec.PARTITION_METADATA:
        group.replay_partition_metadata(value)
    elif kind == rec.MEMBER_METADATA:
        group.replay_member_metadata(key.member_id, value)
    elif kind == rec.TARGET_ASSIGNMENT_METADATA:
        group.target_assignment_epoch = value.assignment_epoch if value is not None else 0
    elif kind == rec.TARGET_ASSIGNMENT_MEMBER:
        group.replay_target_member(key.member_id, value)
    elif kind == rec.CURRENT_MEMBER_ASSIGNMENT:
        group.replay_current_assignment(key.member_id, value)


def _member_epoch_error(member: ConsumerGroupMember, received: int) -> int:
    """Kafka's ConsumerGroup.validateMemberEpoch: a classic member's generation id must be its
    member epoch (ILLEGAL_GENERATION), a consumer member's epoch likewise (STALE_MEMBER_EPOCH)."""
    if received == member.member_epoch:
        return 0
    return Errors.ILLEGAL_GENERATION if member.use_classic_protocol else Errors.STALE_MEMBER_EPOCH


def _subscription(member: ConsumerGroupMember) -> tuple[frozenset[str], str | None]:
    return frozenset(member.subscribed_topic_names), member.subscribed_topic_regex or None


def _owned(topic_partitions: Any) -> dict[bytes, frozenset[int]] | None:
    if topic_partitions is None:
        return None
    out: dict[bytes, frozenset[int]] = {}
    for tp in topic_partitions:
        out[bytes(tp.topic_id)] = out.get(bytes(tp.topic_id), frozenset()) | frozenset(tp.partitions)
    return out


def _check_member_epoch(member: ConsumerGroupMember, received: int, owned: dict[bytes, frozenset[int]] | None) -> None:
    """Kafka's throwIfMemberEpochIsInvalid: a member ahead of us, or behind without being a
    retry of the previous epoch that owns nothing new, is fenced."""
    if received > member.member_epoch:
        raise KafkaError(Errors.FENCED_MEMBER_EPOCH,
                            f"The consumer group member has a greater member epoch ({received}) than the one "
                            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                            "all its partitions and rejoin.")
    if received < member.member_epoch:
        # a lost response: the member may retry with its previous epoch, owning only what it had
        if received == member.previous_member_epoch and owned is not None and all(
                parts <= member.assigned_partitions.get(tid, frozenset()) for tid, parts in owned.items()):
            return
        raise KafkaError(Errors.FENCED_MEMBER_EPOCH,
                            f"The consumer group member has a smaller member epoch ({received}) than the one "
                            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                            "all its partitions and rejoin.")
