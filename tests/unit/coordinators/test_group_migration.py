"""KIP-848 online migration on one shard, with injected time: a ConsumerGroupHeartbeat converts
a classic group (upgrade), classic members keep using JoinGroup/SyncGroup/Heartbeat/LeaveGroup
inside the consumer group (eager and cooperative), the last consumer-protocol member leaving
converts the group back (downgrade), group.consumer.migration.policy and the size limits,
and replaying the records rebuilds the same mixed state."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pybroker.config import BROKER_CONFIGS, ConfigError
from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.group import consumer_protocol as cp
from pybroker.coordinators.group.classic_group import ClassicGroupState
from pybroker.coordinators.group.consumer_group import MemberState
from pybroker.coordinators.group.group_config import GroupConfig, parse_migration_policy
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    ConsumerProtocolSubscription,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)

from .test_consumer_group import CGHarness, Client, group_view

SESSION_MS = 10_000
REBALANCE_MS = 30_000
CONSUMER_SESSION_MS = 45_000


def subscription(topics: list[str], owned: dict[str, set[int]] | None = None, version: int = 1) -> bytes:
    S = ConsumerProtocolSubscription
    body = S(topics=topics, user_data=None,
             owned_partitions=[S.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in (owned or {}).items()],
             generation_id=-1, rack_id=None).encode(version)
    return struct.pack(">h", version) + body


def assignment_bytes(parts: dict[str, set[int]], version: int = 1) -> bytes:
    return cp.serialize_assignment({t: frozenset(p) for t, p in parts.items()}, version)


def decoded(assignment: bytes) -> dict[str, set[int]]:
    a = cp.deserialize_assignment(assignment)
    return {tp.topic: set(tp.partitions) for tp in a.assigned_partitions}


class MixedHarness(CGHarness):
    """Classic requests routed as the coordinator routes them (shard.classic_*)."""

    def cjoin(self, group: str, member_id: str = "", topics: list[str] | None = None,
              owned: dict[str, set[int]] | None = None, protocols: tuple[str, ...] = ("range",), version: int = 5,
              protocol_type: str = "consumer", instance_id: str | None = None) -> Any:
        meta = subscription(topics or ["t"], owned)
        req = JoinGroupRequest(group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
                               member_id=member_id, group_instance_id=instance_id, protocol_type=protocol_type,
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=meta)
                                          for n in protocols], reason=None)
        fut = self.run(self.shard.classic_join(req, version, "classic-client", "/127.0.0.1", self.now))
        return fut.value if fut.done else fut  # a classic group's join may wait for the others

    def csync(self, group: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
              version: int = 5, protocol_name: str | None = None) -> Any:
        req = SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                               group_instance_id=None, protocol_type="consumer" if version >= 5 else None,
                               protocol_name=protocol_name,
                               assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                            for m, a in (assignments or {}).items()])
        fut = self.run(self.shard.classic_sync(req, version, self.now))
        assert fut.done
        return fut.value

    def chb(self, group: str, member_id: str, generation: int) -> int:
        req = HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None)
        return self.shard.classic_heartbeat(req, 4, self.now)

    def cleave(self, group: str, member_ids: list[str]) -> Any:
        req = LeaveGroupRequest(group_id=group, member_id="", members=[
            LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=None, reason=None) for m in member_ids])
        return self.run(self.shard.classic_leave(req, 5, self.now))

    def classic_member(self, group: str, topics: list[str], protocols: tuple[str, ...] = ("range",),
                       owned: dict[str, set[int]] | None = None) -> tuple[str, Any]:
        """A new classic member through MEMBER_ID_REQUIRED; returns its id and JoinGroup answer."""
        first = self.cjoin(group, topics=topics, protocols=protocols)
        assert first.error_code == Errors.MEMBER_ID_REQUIRED, first
        resp = self.cjoin(group, first.member_id, topics=topics, protocols=protocols, owned=owned)
        return first.member_id, resp


def classic_group_of_one(h: MixedHarness, partitions: int = 4,
                         protocols: tuple[str, ...] = ("range", "roundrobin")) -> tuple[str, int]:
    """A Stable classic group "g" whose one member holds every partition of "t"."""
    mid, resp = h.classic_member("g", ["t"], protocols=protocols)
    assert resp.error_code == 0 and resp.leader == mid
    sync = h.csync("g", mid, resp.generation_id, {mid: assignment_bytes({"t": set(range(partitions))})},
                   protocol_name=protocols[0])
    assert sync.error_code == 0
    assert h.shard.groups.group("g").state == ClassicGroupState.STABLE
    return mid, resp.generation_id


def record_types(entries: list[tuple[bytes, bytes | None]]) -> list[tuple[int, bool]]:
    out = []
    for key, value in entries:
        r = serde.decode(key, value)
        out.append((r.key_version, r.value is not None))
    return out


def upgraded(h: MixedHarness, protocols: tuple[str, ...] = ("range", "roundrobin")) -> tuple[str, int, Client]:
    """Classic group of one member, then a consumer-protocol member joins: the upgrade."""
    mid, gen = classic_group_of_one(h, protocols=protocols)
    c = Client(h, "g", ["t"])
    c.join()
    return mid, gen, c


# ---------------------------------------------------------------------- upgrade


def test_consumer_heartbeat_upgrades_a_classic_group_in_one_batch():
    h = MixedHarness(GroupConfig(initial_rebalance_delay_ms=0, consumer_group_session_timeout_ms=CONSUMER_SESSION_MS))
    t = h.image.create("t", 4)
    mid, gen = classic_group_of_one(h)
    before = len(h.log)
    c = Client(h, "g", ["t"])
    c.join()
    # the classic tombstone, then Kafka's createConsumerGroupRecords, then the heartbeat's own records
    assert record_types(h.log[before:before + 6]) == [(2, False), (5, True), (3, True), (7, True), (6, True),
                                                      (8, True)]
    assert serde.decode(*h.log[before + 2]).value.epoch == gen
    assert h.shard.groups.group("g") is None
    g = h.group("g")
    classic = g.members[mid]
    assert classic.use_classic_protocol and classic.classic_member_metadata.session_timeout_ms == SESSION_MS
    assert [n for n, _ in classic.classic_member_metadata.supported_protocols] == ["range", "roundrobin"]
    assert classic.member_epoch == gen and classic.assigned_partitions == {t: frozenset(range(4))}
    assert g.num_classic_protocol_members == 1 and g.group_epoch == gen + 1
    # the new member waits: its partitions are still the classic member's
    assert c.epoch == gen + 1 and c.owned == {}
    assert h.shard.consumer.group("g").members[c.member_id].state == MemberState.UNRELEASED_PARTITIONS
    assert group_view(h.rebuilt(), "g") == group_view(h.shard, "g")


def test_describe_tells_classic_members_from_consumer_members():
    """ConsumerGroupDescribe v1 (KIP-1099): MemberType 0 for the classic member a migration kept, 1
    for the consumer-protocol member; DescribeGroups does not describe the (now consumer) group:
    Dead before v6, GROUP_ID_NOT_FOUND from v6 (KIP-1043)."""
    h = MixedHarness(GroupConfig(initial_rebalance_delay_ms=0, consumer_group_session_timeout_ms=CONSUMER_SESSION_MS))
    h.image.create("t", 4)
    mid, _gen, c = upgraded(h)
    d = h.shard.consumer_group_describe("g", False)
    assert d.error_code == 0
    assert {m.member_id: m.member_type for m in d.members} == {mid: 0, c.member_id: 1}
    v5 = h.shard.describe_group("g", False, 5)
    assert (v5.error_code, v5.error_message, v5.group_state) == (0, None, "Dead")
    v6 = h.shard.describe_group("g", False, 6)
    assert (v6.error_code, v6.error_message, v6.group_state) == (
        Errors.GROUP_ID_NOT_FOUND, "Group g is not a classic group.", "Dead")
    missing = h.shard.describe_group("nope", False, 6)
    assert (missing.error_code, missing.error_message) == (Errors.GROUP_ID_NOT_FOUND, "Group nope not found.")


def test_eager_classic_member_rejoins_and_the_partitions_move():
    h = MixedHarness()
    t = h.image.create("t", 4)
    mid, gen, c = upgraded(h)
    epoch = h.group("g").group_epoch
    assert h.chb("g", mid, gen) == Errors.REBALANCE_IN_PROGRESS
    assert h.timer.is_scheduled(f"consumer-join-g-{mid}")
    # an eager member rejoins owning nothing
    resp = h.cjoin("g", mid, topics=["t"], protocols=("range", "roundrobin"))
    assert (resp.error_code, resp.generation_id, resp.protocol_type, resp.protocol_name) == (0, epoch, "consumer",
                                                                                           "range")
    assert resp.leader == "" and resp.members == [] and resp.skip_assignment is False and resp.member_id == mid
    assert not h.timer.is_scheduled(f"consumer-join-g-{mid}") and h.timer.is_scheduled(f"consumer-sync-g-{mid}")
    sync = h.csync("g", mid, epoch, protocol_name="range")
    assert sync.error_code == 0 and (sync.protocol_type, sync.protocol_name) == ("consumer", "range")
    kept = decoded(sync.assignment)["t"]
    assert len(kept) == 2 and not h.timer.is_scheduled(f"consumer-sync-g-{mid}")
    assert h.chb("g", mid, epoch) == 0
    c.poll()
    assert c.owned == {t: set(range(4)) - kept}
    assert h.group("g").state.value == "Stable"
    assert group_view(h.rebuilt(), "g") == group_view(h.shard, "g")


def test_cooperative_classic_member_revokes_before_the_other_gets_its_partitions():
    h = MixedHarness()
    t = h.image.create("t", 4)
    mid, gen, c = upgraded(h, protocols=("cooperative-sticky",))
    epoch = h.group("g").group_epoch
    assert h.chb("g", mid, gen) == Errors.REBALANCE_IN_PROGRESS
    # a protocol no classic member had is refused (the member itself counts)
    assert h.cjoin("g", mid, topics=["t"], protocols=("range",)).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    resp = h.cjoin("g", mid, topics=["t"], owned={"t": {0, 1, 2, 3}}, protocols=("cooperative-sticky",))
    # still owning what moved: it stays at its epoch, UNREVOKED_PARTITIONS, and syncs what it keeps
    assert resp.error_code == 0 and resp.generation_id == gen and resp.protocol_name == "cooperative-sticky"
    assert h.group("g").members[mid].state == MemberState.UNREVOKED_PARTITIONS
    sync = h.csync("g", mid, gen, protocol_name="cooperative-sticky")
    assert sync.error_code == 0
    kept = decoded(sync.assignment)["t"]
    assert len(kept) == 2
    c.poll()
    assert c.owned == {}  # nothing before the classic member revoked
    assert h.chb("g", mid, gen) == Errors.REBALANCE_IN_PROGRESS
    resp = h.cjoin("g", mid, topics=["t"], owned={"t": kept}, protocols=("cooperative-sticky",))
    assert resp.generation_id == epoch
    assert decoded(h.csync("g", mid, epoch).assignment)["t"] == kept
    c.poll()
    assert c.owned == {t: set(range(4)) - kept}
    assert h.chb("g", mid, epoch) == 0


def test_empty_classic_group_is_replaced_not_converted():
    h = MixedHarness()
    h.image.create("t", 1)
    h.commit("g", {("t", 0): (5, None)})
    c = Client(h, "g", ["t"])
    before = len(h.log)
    c.join()
    assert record_types(h.log[before:before + 2]) == [(2, False), (5, True)]
    assert h.group("g").group_epoch == 1 and h.fetch("g")[("t", 0)].offset == 5


@pytest.mark.parametrize("policy", ["disabled", "downgrade", "DisAbled", "nonsense"])
def test_upgrade_refused_by_policy(policy):
    h = MixedHarness(GroupConfig(initial_rebalance_delay_ms=0, consumer_group_migration_policy=policy))
    h.image.create("t", 4)
    classic_group_of_one(h)
    resp = h.hb("g", "m", 0, topics=["t"], owned={}, rebalance_ms=REBALANCE_MS)
    assert resp.error_code == Errors.GROUP_ID_NOT_FOUND
    assert h.group("g") is None and h.shard.groups.group("g").state == ClassicGroupState.STABLE


def test_upgrade_refused_above_consumer_max_size_and_for_other_protocol_types():
    h = MixedHarness(GroupConfig(initial_rebalance_delay_ms=0, consumer_group_max_size=1))
    h.image.create("t", 4)
    a, _ = h.classic_member("g", ["t"])
    b, pending = h.classic_member("g", ["t"])
    assert not pending.done  # the classic rebalance waits for the first member
    assert h.hb("g", "m", 0, topics=["t"], owned={}, rebalance_ms=REBALANCE_MS).error_code == \
        Errors.GROUP_ID_NOT_FOUND
    h2 = MixedHarness()
    h2.image.create("t", 4)
    first = h2.cjoin("c", protocol_type="connect")
    h2.cjoin("c", first.member_id, protocol_type="connect")
    assert h2.hb("c", "m", 0, topics=["t"], owned={}, rebalance_ms=REBALANCE_MS).error_code == \
        Errors.GROUP_ID_NOT_FOUND


def test_upgrade_mid_rebalance_answers_pending_joins_with_rebalance_in_progress():
    h = MixedHarness()
    h.image.create("t", 4)
    mid, gen = classic_group_of_one(h)
    # a second classic member starts a rebalance; the first has not rejoined yet
    first = h.cjoin("g", topics=["t"], protocols=("range",))
    pending = h.shard.classic_join(JoinGroupRequest(
        group_id="g", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS, member_id=first.member_id,
        group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=subscription(["t"]))],
        reason=None), 5, "c", "/h", h.now)
    fut = h.run(pending)
    assert not fut.done and h.shard.groups.group("g").state == ClassicGroupState.PREPARING_REBALANCE
    Client(h, "g", ["t"]).join()
    assert fut.done and fut.value.error_code == Errors.REBALANCE_IN_PROGRESS
    g = h.group("g")
    assert set(g.members) >= {mid, first.member_id} and g.num_classic_protocol_members == 2


def test_non_zero_epoch_heartbeat_for_a_classic_group_is_group_id_not_found():
    h = MixedHarness()
    h.image.create("t", 4)
    classic_group_of_one(h)
    assert h.hb("g", "m", 3).error_code == Errors.GROUP_ID_NOT_FOUND


# ---------------------------------------------------------------------- classic members in a consumer group


def test_new_classic_member_joins_a_consumer_group():
    h = MixedHarness()
    t = h.image.create("t", 4)
    c = Client(h, "g", ["t"])
    c.join()
    mid, resp = h.classic_member("g", ["t"])
    g = h.group("g")
    assert resp.error_code == 0 and g.members[mid].use_classic_protocol and resp.generation_id == g.group_epoch
    # it gets what the consumer member releases
    assert decoded(h.csync("g", mid, resp.generation_id).assignment) == {}
    c.poll()
    c.poll()
    assert h.chb("g", mid, resp.generation_id) == Errors.REBALANCE_IN_PROGRESS  # its partitions were released
    resp = h.cjoin("g", mid, topics=["t"])
    got = decoded(h.csync("g", mid, resp.generation_id).assignment)["t"]
    assert len(got) == 2 and c.owned == {t: set(range(4)) - got}


def test_classic_join_errors_in_a_consumer_group():
    h = MixedHarness(GroupConfig(initial_rebalance_delay_ms=0, consumer_group_max_size=3))
    h.image.create("t", 4)
    Client(h, "g", ["t"]).join()
    mid, _ = h.classic_member("g", ["t"], protocols=("range",))
    # every classic member must share a protocol; the type must be "consumer"
    assert h.cjoin("g", topics=["t"], protocols=("roundrobin",)).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert h.cjoin("g", protocol_type="connect").error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    h.classic_member("g", ["t"], protocols=("roundrobin", "range"))
    # the size limit is checked first (Kafka's throwIfConsumerGroupIsFull)
    assert h.cjoin("g", topics=["t"], protocols=("roundrobin",)).error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert h.cjoin("g", topics=["t"]).error_code == Errors.GROUP_MAX_SIZE_REACHED
    # v3: no MEMBER_ID_REQUIRED round; still refused at the size limit
    assert h.cjoin("g", topics=["t"], version=3).error_code == Errors.GROUP_MAX_SIZE_REACHED


def test_classic_sync_and_heartbeat_errors_in_a_consumer_group():
    h = MixedHarness()
    h.image.create("t", 4)
    c = Client(h, "g", ["t"])
    c.join()
    mid, resp = h.classic_member("g", ["t"])
    gen = resp.generation_id
    assert h.csync("g", mid, gen + 5).error_code == Errors.ILLEGAL_GENERATION
    assert h.csync("g", mid, gen, protocol_name="roundrobin").error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert h.csync("g", "nobody", gen).error_code == Errors.UNKNOWN_MEMBER_ID
    assert h.csync("g", c.member_id, c.epoch).error_code == Errors.UNKNOWN_MEMBER_ID  # not a classic member
    assert h.chb("g", mid, gen + 1) == Errors.ILLEGAL_GENERATION
    assert h.chb("g", c.member_id, c.epoch) == Errors.UNKNOWN_MEMBER_ID
    # a classic member's commits: its generation is its member epoch; v8 is fine for it
    assert h.commit("g", {("t", 0): (1, None)}, generation=gen, member_id=mid) == {("t", 0): 0}
    assert h.commit("g", {("t", 0): (1, None)}, generation=gen + 1, member_id=mid) == \
        {("t", 0): Errors.ILLEGAL_GENERATION}
    assert h.commit("g", {("t", 0): (1, None)}, generation=c.epoch, member_id=c.member_id) == \
        {("t", 0): Errors.UNSUPPORTED_VERSION}


def test_classic_leave_in_a_consumer_group_bumps_the_epoch():
    h = MixedHarness()
    h.image.create("t", 4)
    c = Client(h, "g", ["t"])
    c.join()
    mid, _ = h.classic_member("g", ["t"])
    epoch = h.group("g").group_epoch
    resp = h.cleave("g", [mid, c.member_id, "ghost"])
    assert [(m.member_id, m.error_code) for m in resp.members] == [
        (mid, 0), (c.member_id, Errors.UNKNOWN_MEMBER_ID), ("ghost", Errors.UNKNOWN_MEMBER_ID)]
    g = h.group("g")
    assert mid not in g.members and g.group_epoch == epoch + 1 and g.num_classic_protocol_members == 0
    assert group_view(h.rebuilt(), "g") == group_view(h.shard, "g")


def test_classic_member_that_never_rejoins_is_fenced_after_its_rebalance_timeout():
    h = MixedHarness(GroupConfig(initial_rebalance_delay_ms=0, consumer_group_session_timeout_ms=10**9,
                                 consumer_group_migration_policy="upgrade"))
    h.image.create("t", 4)
    mid, gen, c = upgraded(h)
    assert h.chb("g", mid, gen) == Errors.REBALANCE_IN_PROGRESS
    for _ in range(4):  # heartbeats keep its session, not its join deadline
        h.advance(SESSION_MS // 2)
        assert h.chb("g", mid, gen) == Errors.REBALANCE_IN_PROGRESS
    h.advance(REBALANCE_MS)
    assert mid not in h.group("g").members


def test_classic_member_session_expires_with_its_own_timeout():
    h = MixedHarness(GroupConfig(initial_rebalance_delay_ms=0, consumer_group_session_timeout_ms=10**9,
                                 consumer_group_migration_policy="upgrade"))
    h.image.create("t", 4)
    mid, gen, c = upgraded(h)
    h.advance(SESSION_MS - 1)
    c.poll()
    assert mid in h.group("g").members
    h.advance(2)
    assert mid not in h.group("g").members


# ---------------------------------------------------------------------- downgrade


def test_last_consumer_member_leaving_downgrades_and_rebalances():
    h = MixedHarness()
    h.image.create("t", 4)
    mid, gen, c = upgraded(h)
    epoch = h.group("g").group_epoch
    h.cjoin("g", mid, topics=["t"], protocols=("range", "roundrobin"))
    kept = decoded(h.csync("g", mid, epoch).assignment)["t"]
    before = len(h.log)
    c.leave()
    # Kafka's createGroupTombstoneRecords order, then the classic group's GroupMetadata
    members = 2
    assert record_types(h.log[before:]) == [(8, False)] * members + [(7, False)] * members + [(6, False)] + \
        [(5, False)] * members + [(4, False), (3, False), (2, True)]
    assert h.group("g") is None
    cg = h.shard.groups.group("g")
    assert cg.state == ClassicGroupState.PREPARING_REBALANCE and cg.generation_id == epoch
    assert list(cg.members) == [mid] and cg.leader_id == mid and cg.protocol_name == "range"
    stored = serde.decode(*h.log[-1]).value
    assert stored.generation == epoch and decoded(bytes(stored.members[0].assignment)) == {"t": kept}
    # the classic member is told to rejoin; it leads the next generation alone
    assert h.chb("g", mid, epoch) == Errors.REBALANCE_IN_PROGRESS
    resp = h.cjoin("g", mid, topics=["t"], protocols=("range", "roundrobin"))
    assert resp.error_code == 0 and resp.generation_id == epoch + 1 and resp.leader == mid
    assert [m.member_id for m in resp.members] == [mid]
    assert h.csync("g", mid, epoch + 1, {mid: assignment_bytes({"t": {0, 1, 2, 3}})}).error_code == 0
    rebuilt = h.rebuilt()
    assert rebuilt.consumer.group("g") is None and rebuilt.groups.group("g").generation_id == epoch + 1


def test_consumer_member_session_expiry_downgrades():
    h = MixedHarness(GroupConfig(initial_rebalance_delay_ms=0, consumer_group_session_timeout_ms=CONSUMER_SESSION_MS))
    h.image.create("t", 4)
    mid, gen, c = upgraded(h)
    for _ in range(10):
        h.advance(SESSION_MS // 2)
        code = h.chb("g", mid, h.shard.groups.group("g").generation_id if h.group("g") is None
                     else h.group("g").members[mid].member_epoch)
        if code == Errors.REBALANCE_IN_PROGRESS and h.group("g") is not None:
            epoch = h.group("g").group_epoch
            h.cjoin("g", mid, topics=["t"], protocols=("range", "roundrobin"))
            h.csync("g", mid, epoch)
    assert h.group("g") is None and list(h.shard.groups.group("g").members) == [mid]


@pytest.mark.parametrize("policy", ["upgrade", "disabled"])
def test_downgrade_refused_by_policy_keeps_a_consumer_group(policy):
    h = MixedHarness(GroupConfig(initial_rebalance_delay_ms=0, consumer_group_migration_policy="bidirectional"))
    h.image.create("t", 4)
    mid, gen, c = upgraded(h)
    h.shard.migration.config = GroupConfig(consumer_group_migration_policy=policy)
    epoch = h.group("g").group_epoch
    c.leave()
    g = h.group("g")
    assert g is not None and list(g.members) == [mid] and g.group_epoch == epoch + 1
    assert h.shard.groups.group("g") is None


def test_downgrade_refused_above_group_max_size():
    h = MixedHarness()
    h.image.create("t", 4)
    mid, gen, c = upgraded(h)
    h.classic_member("g", ["t"])
    h.shard.migration.config = GroupConfig(max_size=1)
    c.leave()
    assert h.group("g") is not None and h.group("g").num_classic_protocol_members == 2


def test_last_member_leaving_leaves_an_empty_consumer_group():
    h = MixedHarness()
    h.image.create("t", 4)
    c = Client(h, "g", ["t"])
    c.join()
    c.leave()
    assert h.group("g") is not None and h.group("g").is_empty() and h.shard.groups.group("g") is None


# ---------------------------------------------------------------------- policy configuration


def test_migration_policy_config_as_kafka_defines_it():
    d = BROKER_CONFIGS["group.consumer.migration.policy"]
    assert (d.type, d.default) == ("string", "bidirectional")
    for ok in ("bidirectional", "UPGRADE", "Downgrade", "disabled"):
        d.validator(d.name, ok)
    with pytest.raises(ConfigError):
        d.validator(d.name, "sideways")
    assert GroupConfig.from_broker_config({}).consumer_group_migration_policy == "bidirectional"
    cfg = GroupConfig.from_broker_config({"group.consumer.migration.policy": "UpGrade"})
    assert (cfg.upgrade_enabled, cfg.downgrade_enabled) == (True, False)
    assert parse_migration_policy(None) == "disabled" and parse_migration_policy("Downgrade") == "downgrade"


# ---------------------------------------------------------------------- replay


def mixed_view(shard: Any, gid: str) -> tuple:
    cg = shard.consumer.group(gid)
    if cg is not None:
        return ("consumer", *group_view(shard, gid), cg.num_classic_protocol_members,
                dict(cg.classic_protocol_support))
    g = shard.groups.group(gid)
    if g is None:
        return ("none",)
    return ("classic", g.generation_id, g.protocol_type, g.leader_id,
            {m.member_id: (m.session_timeout_ms, m.assignment) for m in g.members.values()})


step = st.sampled_from(["classic_join", "classic_rejoin", "classic_heartbeat", "classic_leave", "consumer_join",
                        "consumer_poll", "consumer_leave", "time"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(step, st.integers(0, 2)), min_size=3, max_size=25))
@example([("classic_join", 0), ("consumer_join", 0), ("classic_join", 0), ("consumer_leave", 0),
          ("classic_rejoin", 0), ("classic_rejoin", 1)])  # a follower rejoining after a downgrade
def test_replaying_any_mixed_history_rebuilds_the_same_groups(steps):
    h = MixedHarness(GroupConfig(initial_rebalance_delay_ms=0, consumer_group_session_timeout_ms=CONSUMER_SESSION_MS))
    h.image.create("t", 6)
    classic: list[str] = []
    consumers: list[Client] = []
    for op, i in steps:
        cg = h.group("g")
        if op == "classic_join":
            mid, resp = h.classic_member("g", ["t"], protocols=("range",))
            if getattr(resp, "error_code", None) == 0:
                classic.append(mid)
                h.csync("g", mid, resp.generation_id, {mid: assignment_bytes({"t": {0, 1}})})
        elif classic and op in ("classic_rejoin", "classic_heartbeat", "classic_leave"):
            mid = classic[i % len(classic)]
            gen = (cg.members[mid].member_epoch if cg is not None and mid in cg.members
                   else getattr(h.shard.groups.group("g"), "generation_id", 0))
            if op == "classic_leave":
                h.cleave("g", [mid])
                classic.remove(mid)
            elif op == "classic_heartbeat":
                h.chb("g", mid, gen)
            else:
                resp = h.cjoin("g", mid, topics=["t"])
                # In a classic group only the leader's SyncGroup completes at once; a follower's
                # waits for the leader's (Kafka's CompletingRebalance), so only the leader syncs here.
                if getattr(resp, "error_code", None) == 0 and (h.group("g") is not None or resp.leader == mid):
                    h.csync("g", mid, resp.generation_id, {m: assignment_bytes({"t": {2}}) for m in classic})
        elif op == "consumer_join":
            c = Client(h, "g", ["t"])
            resp = h.hb("g", c.member_id, 0, topics=["t"], owned={}, rebalance_ms=REBALANCE_MS)
            if resp.error_code == 0:
                c._take(resp)
                consumers.append(c)
        elif consumers and op == "consumer_poll":
            c = consumers[i % len(consumers)]
            if cg is not None and c.member_id in cg.members:
                c.poll()
        elif consumers and op == "consumer_leave":
            c = consumers.pop(i % len(consumers))
            if cg is not None and c.member_id in cg.members:
                c.leave()
        elif op == "time":
            h.advance(SESSION_MS // 3)
        assert mixed_view(h.rebuilt(), "g")[:1] == mixed_view(h.shard, "g")[:1]
        if h.group("g") is not None:
            assert mixed_view(h.rebuilt(), "g") == mixed_view(h.shard, "g")
            owners = h.group("g").partition_owners
            owned = [(tid, p) for m in h.group("g").members.values() for tid, ps in m.owned().items() for p in ps]
            assert len(owned) == len(set(owned)) == len(owners)
