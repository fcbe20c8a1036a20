"""Committed offsets, admin operations, retention, record bytes and replay."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.group.classic_group import ClassicGroupState as S
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.runtime import java_string_hash, partition_for
from pybroker.protocol.errors import Errors

from .harness import ShardHarness


def test_partition_for_matches_java_string_hashcode():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -2**31  # Utils.abs maps MIN_VALUE to 0
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("héllo→") == _java_hash_reference("héllo→")
    assert partition_for("my-group", 50) == (java_string_hash("my-group") & 0x7FFFFFFF) % 50


def _java_hash_reference(s: str) -> int:
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (31 * h + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_record_bytes_follow_kafka_layout():
    rec = serde.offset_commit_record("g", "t", 7, 42, 3, "meta", 1000)
    key, value = rec.encode()
    assert key == struct.pack(">hh1sh1si", 1, 1, b"g", 1, b"t", 7)
    # value v3: offset i64, leader epoch i32, metadata string, commit timestamp i64
    assert value == struct.pack(">hqih4sq", 3, 42, 3, 4, b"meta", 1000)
    with_expiry = serde.offset_commit_record("g", "t", 7, 42, 3, "", 1000, expire_timestamp_ms=5000).encode()[1]
    assert with_expiry == struct.pack(">hqhqq", 1, 42, 0, 1000, 5000)
    tomb = serde.offset_commit_tombstone("g", "t", 7).encode()
    assert tomb == (key, None)
    gkey, _ = serde.group_metadata_tombstone("grp").encode()
    assert gkey == struct.pack(">hh3s", 2, 3, b"grp")
    assert serde.decode(key, value).value.metadata == "meta"


def test_simple_commit_creates_an_empty_group_and_metadata_round_trips():
    h = ShardHarness()
    errors = h.commit("simple", {("t", 0): (10, "m0"), ("t", 1): (20, None)})
    assert errors == {("t", 0): 0, ("t", 1): 0}
    g = h.shard.groups.group("simple")
    assert g is not None and g.state == S.EMPTY
    got = h.fetch("simple")
    assert got[("t", 0)].offset == 10 and got[("t", 0)].metadata == "m0" and got[("t", 0)].leader_epoch == 3
    assert got[("t", 1)].metadata == ""
    assert h.fetch("simple", [("t", [0, 5])])[("t", 5)] is None
    assert h.shard.describe_group("simple", False).group_state == "Empty"
    assert [x.group_state for x in h.shard.list_groups([], [])] == ["Empty"]


def test_commit_validation_against_the_group():
    h = ShardHarness()
    leader, = h.form_group("g", 1)
    assert h.commit("g", {("t", 0): (1, "")}, generation=1, member_id=leader) == {("t", 0): 0}
    assert h.commit("g", {("t", 0): (1, "")}, generation=9, member_id=leader) == {("t", 0): Errors.ILLEGAL_GENERATION}
    assert h.commit("g", {("t", 0): (1, "")}, generation=1, member_id="x") == {("t", 0): Errors.UNKNOWN_MEMBER_ID}
    # generation -1 without member: only an Empty group accepts it
    assert h.commit("g", {("t", 0): (1, "")}) == {("t", 0): Errors.UNKNOWN_MEMBER_ID}
    # unknown group with a generation: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND from v9
    assert h.commit("nope", {("t", 0): (1, "")}, generation=3, member_id="m", version=8) == {
        ("t", 0): Errors.ILLEGAL_GENERATION}
    assert h.commit("nope", {("t", 0): (1, "")}, generation=3, member_id="m", version=9) == {
        ("t", 0): Errors.GROUP_ID_NOT_FOUND}
    too_big = "x" * (h.config.offset_metadata_max_bytes + 1)
    assert h.commit("g", {("t", 0): (1, too_big)}, generation=1, member_id=leader) == {
        ("t", 0): Errors.OFFSET_METADATA_TOO_LARGE}


def test_commit_during_completing_rebalance_is_rebalance_in_progress_but_allowed_while_preparing():
    h = ShardHarness()
    a, b = h.form_group("g", 2)
    fa = h.join("g", member_id=a)  # PreparingRebalance: commits of the old generation still count
    assert h.commit("g", {("t", 0): (5, "")}, generation=1, member_id=b) == {("t", 0): 0}
    h.join("g", member_id=b)
    assert fa.done and h.shard.groups.group("g").state == S.COMPLETING_REBALANCE
    assert h.commit("g", {("t", 0): (6, "")}, generation=2, member_id=b) == {("t", 0): Errors.REBALANCE_IN_PROGRESS}


def test_delete_groups_and_offsets():
    h = ShardHarness()
    leader, = h.form_group("g", 1, protocols=[("range", _subscription(["t"]))])
    h.commit("g", {("t", 0): (1, ""), ("u", 0): (2, "")}, generation=1, member_id=leader)
    assert h.run(h.shard.delete_groups(["g", "missing"])) == [("g", Errors.NON_EMPTY_GROUP),
                                                              ("missing", Errors.GROUP_ID_NOT_FOUND)]
    top, parts, records = h.shard.offsets.delete_offsets("g", [("t", [0]), ("u", [0])])
    assert top == 0 and parts == [("t", [(0, Errors.GROUP_SUBSCRIBED_TO_TOPIC)]), ("u", [(0, 0)])]
    h.run(serde_result(records))
    assert ("u", 0) not in h.fetch("g") and ("t", 0) in h.fetch("g")
    h.leave("g", [(leader, None)])
    assert h.run(h.shard.delete_groups(["g"])) == [("g", 0)]
    assert h.shard.groups.group("g") is None and h.fetch("g") == {}
    assert h.shard.describe_group("g", False).group_state == "Dead"
    assert h.rebuilt().groups.group("g") is None


def test_offsets_of_empty_groups_expire_after_retention():
    h = ShardHarness(GroupConfig(initial_rebalance_delay_ms=0, offsets_retention_ms=60_000,
                                 offsets_retention_check_interval_ms=10_000))
    h.commit("simple", {("t", 0): (1, "")})
    leader, = h.form_group("active", 1, session_ms=1_000_000)
    h.commit("active", {("t", 0): (1, "")}, generation=1, member_id=leader)
    h.advance(50_000)
    h.heartbeat("active", leader, 1)
    h.commit("simple", {("t", 1): (1, "")})  # a later commit keeps its own clock
    h.advance(20_000)
    h.heartbeat("active", leader, 1)
    assert h.fetch("simple") .keys() == {("t", 1)}
    assert h.fetch("active").keys() == {("t", 0)}  # members: never expired
    h.advance(60_000)
    assert h.shard.groups.group("simple") is None  # all offsets gone: the group is deleted
    assert h.rebuilt().groups.group("simple") is None


def test_a_retention_time_past_the_int64_range_is_added_as_java_longs_and_commits():
    """OffsetCommit v2-v4: Kafka's expiry is now + retention_time_ms in Java longs, which wrap; the
    sum, a Python int, once overflowed the record's int64 field and the commit failed with an
    internal error (the slow protocol fuzz, PYBROKER_FUZZ_SEED=666473316)."""
    h = ShardHarness()
    assert h.commit("g", {("t", 0): (5, None)}, version=2, retention_ms=2**63 - 1) == {("t", 0): 0}
    assert h.fetch("g")[("t", 0)].offset == 5
    assert h.commit("g", {("t", 0): (6, None)}, version=2, retention_ms=60_000) == {("t", 0): 0}
    assert h.fetch("g")[("t", 0)].expire_timestamp_ms == h.now + 60_000


def test_list_groups_filters_by_state_and_type():
    h = ShardHarness()
    h.commit("empty", {("t", 0): (1, "")})
    h.form_group("stable", 1)
    assert [g.group_id for g in h.shard.list_groups(["stable"], [])] == ["stable"]
    assert [g.group_id for g in h.shard.list_groups(["Empty", "Stable"], ["classic"])] == ["empty", "stable"]
    assert h.shard.list_groups([], ["consumer"]) == []


def test_describe_stable_group_shows_protocol_members_and_assignments():
    h = ShardHarness()
    leader, follower = h.form_group("g", 2)
    d = h.shard.describe_group("g", True)
    assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
    assert {m.member_id: m.member_assignment for m in d.members} == {leader: leader.encode(),
                                                                      follower: follower.encode()}
    assert all(m.client_host == "/127.0.0.1" and m.member_metadata == b"meta" for m in d.members)


def test_rebuilding_from_the_log_gives_the_same_groups_and_offsets():
    h = ShardHarness()
    leader, follower = h.form_group("g", 2)
    h.commit("g", {("t", 0): (11, "a"), ("t", 1): (12, "b")}, generation=1, member_id=leader)
    h.commit("simple", {("x", 3): (7, "s")})
    rebuilt = h.rebuilt()
    g0, g1 = h.shard.groups.group("g"), rebuilt.groups.group("g")
    assert g1.state == S.STABLE and g1.generation_id == g0.generation_id and g1.leader_id == g0.leader_id
    assert {m: x.assignment for m, x in g1.members.items()} == {m: x.assignment for m, x in g0.members.items()}
    assert rebuilt.offsets.offsets == h.shard.offsets.offsets
    assert rebuilt.groups.group("simple").state == S.EMPTY


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["g1", "g2", "g3"]), st.sampled_from(["a", "b"]), st.integers(0, 2),
                          st.one_of(st.none(), st.integers(0, 10**6)), st.text(max_size=5)), max_size=30))
def test_replaying_any_history_of_commits_and_deletes_rebuilds_the_offsets(ops):
    h = ShardHarness()
    for group, topic, partition, offset, meta in ops:
        if offset is None:
            _, _, records = h.shard.offsets.delete_offsets(group, [(topic, [partition])])
            h.run(serde_result(records))
        else:
            h.commit(group, {(topic, partition): (offset, meta)})
    assert h.rebuilt().offsets.offsets == h.shard.offsets.offsets


def serde_result(records):
    from pybroker.coordinators.shard import CoordinatorResult
    return CoordinatorResult(records=records)


def _subscription(topics: list[str]) -> bytes:
    from pybroker.protocol.messages import ConsumerProtocolSubscription
    return struct.pack(">h", 1) + ConsumerProtocolSubscription(topics=topics, user_data=None,
                                                               owned_partitions=[]).encode(1)
