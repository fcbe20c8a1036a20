"""A JoinGroup does not wait for its write, and a failed write leaves no ghost member (Kafka's
GroupCoordinatorService.joinGroup), on a real one-node broker in virtual time.

The reproducer (kafka-python's suite on a fresh 3-node cluster): the first JoinGroup of a new
group writes the group's first record to a brand-new RF=3 __consumer_offsets partition whose
followers have not fetched yet. Here the partition gets a second ISR replica that never fetches,
so no write is committed until the test lets it. The first JoinGroup must be answered
MEMBER_ID_REQUIRED at once (it used to wait offsets.commit.timeout.ms, answer REQUEST_TIMED_OUT
and keep its pending member id, so the client's next join took a second id and its rebalance
waited a session timeout for the first). A write the partition refuses reverts the group it
created; one that is not replicated in time is answered COORDINATOR_NOT_AVAILABLE, as Kafka maps
REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from typing import Any

import trio

from pybroker.clock import TrioClock
from pybroker.log.errors import KafkaStorageError
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import DescribeGroupsRequest, JoinGroupRequest, SyncGroupRequest
from pybroker.server.broker import Broker
from tests.server.test_virtual_time import AsyncWire, find_coordinator, run_virtual

from .harness import ShardHarness

GROUPS = "__consumer_offsets"
SESSION_MS = 30_000
COMMIT_TIMEOUT_MS = 5_000
OVERRIDES = {"offsets.commit.timeout.ms": str(COMMIT_TIMEOUT_MS),
             # the silent follower is never shrunk out of the ISR while a scenario runs
             "replica.lag.time.max.ms": "600000"}
PROTOCOLS = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]


def join_request(group: str, member_id: str = "", instance_id: str | None = None) -> JoinGroupRequest:
    return JoinGroupRequest(group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=SESSION_MS,
                            member_id=member_id, group_instance_id=instance_id, protocol_type="consumer",
                            protocols=PROTOCOLS)


async def ready(wire: AsyncWire, group: str) -> Any:
    """The __consumer_offsets partition of `group`, once its shard is loaded."""
    await find_coordinator(wire, group, 0)
    for _ in range(100):
        resp = await wire.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[group]))
        if resp.groups[0].error_code != Errors.COORDINATOR_LOAD_IN_PROGRESS:
            return
        await trio.sleep(0.1)
    raise AssertionError("the group coordinator never loaded")


def silent_follower(broker: Broker) -> Any:
    """Give __consumer_offsets-0 a second ISR replica that has not fetched: nothing appended from
    now on is committed (what a brand-new RF=3 partition is until its followers fetch)."""
    p = broker.replica_manager.get_partition(GROUPS, 0)
    assert p is not None and p.is_leader
    p.replicas, p.isr = [*p.replicas, 2], [*p.isr, 2]
    p.update_replicas(broker.clock.wall_ms())
    return p


def follower_leaves(broker: Broker, p: Any) -> None:
    """The silent follower is gone (shrunk out of the ISR): the leader's appends commit again."""
    p.replicas, p.isr = [p.local_id], [p.local_id]
    p.update_replicas(broker.clock.wall_ms())
    broker.replica_manager.after_append(p)
    assert p.high_watermark == p.log.log_end_offset


async def describe(wire: AsyncWire, group: str) -> Any:
    return (await wire.request(ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[group]))).groups[0]


def test_the_first_join_of_a_new_group_is_answered_before_its_record_is_replicated() -> None:
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        group = "g-fresh"
        await ready(wire, group)
        p = silent_follower(broker)
        first = await wire.request(ApiKey.JOIN_GROUP, 5, join_request(group))
        assert first.error_code == Errors.MEMBER_ID_REQUIRED, first
        assert p.high_watermark < p.log.log_end_offset  # answered while the group's record is uncommitted
        started = trio.current_time()
        joined = await wire.request(ApiKey.JOIN_GROUP, 5, join_request(group, first.member_id))
        assert (joined.error_code, joined.generation_id, joined.leader) == (0, 1, first.member_id), joined
        assert [m.member_id for m in joined.members] == [first.member_id]
        assert trio.current_time() - started < SESSION_MS / 1000  # no pending member of another id to wait for
        # the leader's SyncGroup writes the assignment: not replicated in offsets.commit.timeout.ms,
        # it is answered as Kafka maps REQUEST_TIMED_OUT
        sync = SyncGroupRequest(group_id=group, generation_id=1, member_id=first.member_id, group_instance_id=None,
                                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                                    member_id=first.member_id, assignment=b"a")])
        assert (await wire.request(ApiKey.SYNC_GROUP, 3, sync)).error_code == Errors.COORDINATOR_NOT_AVAILABLE
        # a write that timed out is not reverted (Kafka's runtime reverts only a refused append)
        assert [m.member_id for m in (await describe(wire, group)).members] == [first.member_id]
        follower_leaves(broker, p)
        synced = await wire.request(ApiKey.SYNC_GROUP, 3, sync)
        assert (synced.error_code, synced.assignment) == (0, b"a")
        assert (await describe(wire, group)).group_state == "Stable"

    run_virtual(OVERRIDES, scenario)


def refuse_next_append(broker: Broker, monkeypatch: Any) -> list[int]:
    """The next __consumer_offsets append fails as a failed log dir does (KAFKA_STORAGE_ERROR)."""
    rm = broker.replica_manager
    real = rm.append
    refused: list[int] = []

    def append(partition: Any, *args: Any, **kwargs: Any) -> Any:
        if partition.topic == GROUPS and not refused:
            refused.append(partition.partition)
            raise KafkaStorageError("injected: the log dir failed")
        return real(partition, *args, **kwargs)

    monkeypatch.setattr(rm, "append", append)
    return refused


def test_a_join_whose_group_record_is_refused_leaves_no_ghost_member(monkeypatch) -> None:
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        group = "g-refused"
        await ready(wire, group)
        refused = refuse_next_append(broker, monkeypatch)
        first = await wire.request(ApiKey.JOIN_GROUP, 5, join_request(group))
        # answered before the write (Kafka sends MEMBER_ID_REQUIRED whatever the write does) ...
        assert refused == [0] and first.error_code == Errors.MEMBER_ID_REQUIRED, first
        # ... which failed: the group it created is gone, with its pending member
        assert (await describe(wire, group)).group_state == "Dead"
        again = await wire.request(ApiKey.JOIN_GROUP, 5, join_request(group, first.member_id))
        assert again.error_code == Errors.UNKNOWN_MEMBER_ID  # the client starts over, as with Kafka
        second = await wire.request(ApiKey.JOIN_GROUP, 5, join_request(group))
        assert second.error_code == Errors.MEMBER_ID_REQUIRED
        started = trio.current_time()
        joined = await wire.request(ApiKey.JOIN_GROUP, 5, join_request(group, second.member_id))
        assert (joined.error_code, [m.member_id for m in joined.members]) == (0, [second.member_id]), joined
        assert trio.current_time() - started < SESSION_MS / 1000  # no ghost of the first id to wait for

    run_virtual(OVERRIDES, scenario)


def test_a_join_waiting_for_its_rebalance_gets_the_refused_writes_error(monkeypatch) -> None:
    """JoinGroup v3 (no MEMBER_ID_REQUIRED) and a static member join the new group at once and wait
    for the rebalance: a refused group record answers them with Kafka's mapping of the log's error
    (KAFKA_STORAGE_ERROR -> NOT_COORDINATOR) and leaves no member behind."""
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        for group, version, instance in (("g-v3", 3, None), ("g-static", 5, "instance-1")):
            await ready(wire, group)
            refuse_next_append(broker, monkeypatch)
            resp = await wire.request(ApiKey.JOIN_GROUP, version, join_request(group, instance_id=instance))
            assert (resp.error_code, resp.member_id) == (Errors.NOT_COORDINATOR, ""), resp
            group_now = await describe(wire, group)
            assert (group_now.group_state, group_now.members) == ("Dead", [])
            monkeypatch.undo()
            joined = await wire.request(ApiKey.JOIN_GROUP, version, join_request(group, instance_id=instance))
            assert joined.error_code == 0 and len(joined.members) == 1, joined

    # Kafka's default initial delay: the join waits for the rebalance (with 0 this node completes
    # an initial rebalance within the JoinGroup itself, where Kafka defers it to its timer)
    run_virtual({**OVERRIDES, "group.initial.rebalance.delay.ms": "3000"}, scenario)


# ---------------------------------------------------------------------- the shard on its own


def test_a_refused_new_group_record_takes_the_group_and_its_pending_member_away():
    h = ShardHarness()
    h.write_failure = ("refused", KafkaError(Errors.NOT_ENOUGH_REPLICAS))
    first = h.join("g", version=5)
    assert first.done and first.value.error_code == Errors.MEMBER_ID_REQUIRED  # answered before the write
    assert h.shard.groups.group("g") is None and h.log == []
    assert not [key for key in h.timer.ops if key.startswith("heartbeat-")]  # no deadline for the pending id
    assert h.join("g", member_id=first.value.member_id, version=5).value.error_code == Errors.UNKNOWN_MEMBER_ID


def test_a_static_member_whose_replacement_is_not_committed_keeps_its_old_id():
    """Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: the old id takes its place back and
    the join is answered with the write's error, mapped (REQUEST_TIMED_OUT -> COORDINATOR_NOT_AVAILABLE)."""
    h = ShardHarness()
    old = h.join("g", instance_id="i-1", version=5).value.member_id
    assert h.sync("g", old, 1, {old: b"mine"}, instance_id="i-1").value.error_code == 0
    h.write_failure = ("not-committed", KafkaError(Errors.REQUEST_TIMED_OUT))
    again = h.join("g", instance_id="i-1", version=5)
    assert again.done
    r = again.value
    assert (r.error_code, r.member_id, r.generation_id, r.leader) == (Errors.COORDINATOR_NOT_AVAILABLE, "", 1, old)
    g = h.shard.groups.group("g")
    assert list(g.members) == [old] and g.static_members == {"i-1": old} and g.leader_id == old
    assert h.heartbeat("g", old, 1, instance_id="i-1") == 0
    assert h.sync("g", old, 1, instance_id="i-1").value.assignment == b"mine"
    h.advance(h.config.min_session_timeout_ms)  # the old id's session deadline runs again, nothing else
    assert list(h.shard.groups.group("g").members) == [old]
