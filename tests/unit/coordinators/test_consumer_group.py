"""KIP-848 consumer groups on one shard, with injected time: joining, incremental
reconciliation (revoke before reassign), leaving, fencing by session and rebalance timeouts,
epoch validation, metadata changes, and rebuilding the same state from the records."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from pybroker.coordinators.group.consumer_group import ConsumerGroupState, MemberState
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.metadata.image import PartitionRegistration, TopicImage
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import ConsumerGroupHeartbeatRequest

from .harness import ShardHarness

SESSION_MS = 45000
REBALANCE_MS = 30000


class FakeImage:
    """The two maps of MetadataImage the consumer group manager reads."""

    def __init__(self) -> None:
        self.topics_by_name: dict[str, TopicImage] = {}
        self.topics_by_id: dict[bytes, TopicImage] = {}

    def create(self, name: str, partitions: int) -> bytes:
        t = TopicImage(name, uuid.uuid4().bytes)
        self.topics_by_name[name] = self.topics_by_id[t.topic_id] = t
        self.add_partitions(name, partitions)
        return t.topic_id

    def add_partitions(self, name: str, total: int) -> None:
        t = self.topics_by_name[name]
        for p in range(len(t.partitions), total):
            t.partitions[p] = PartitionRegistration(p, [1], [1], 1, 0, 0)

    def delete(self, name: str) -> None:
        t = self.topics_by_name.pop(name)
        del self.topics_by_id[t.topic_id]

    def id(self, name: str) -> bytes:
        return self.topics_by_name[name].topic_id


class CGHarness(ShardHarness):
    def __init__(self, config: GroupConfig | None = None, now_ms: int = 1_000_000, image: FakeImage | None = None):
        self.image = image or FakeImage()
        super().__init__(config or GroupConfig(initial_rebalance_delay_ms=0), now_ms)
        self.shard.consumer.image = self.image

    def rebuilt(self):
        fresh = CGHarness(self.config, self.now, self.image)
        from pybroker.coordinators import record_serde as serde
        for offset, (key, value) in enumerate(self.log):
            fresh.shard.replay(serde.decode(key, value), offset, self.now)
        return fresh.shard

    def hb(self, group: str, member_id: str, epoch: int, topics: list[str] | None = None,
           owned: dict[bytes, set[int]] | None = None, regex: str | None = None, assignor: str | None = None,
           rebalance_ms: int = -1, instance_id: str | None = None, version: int = 1) -> Any:
        req = ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id, rack_id=None,
            rebalance_timeout_ms=rebalance_ms, subscribed_topic_names=topics, subscribed_topic_regex=regex,
            server_assignor=assignor,
            topic_partitions=None if owned is None else [
                ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in owned.items()])
        return self.run(self.shard.consumer.heartbeat(req, version, "client", "/127.0.0.1", self.now))

    def group(self, gid: str):
        return self.shard.consumer.group(gid)


def assignment_of(resp: Any) -> dict[bytes, set[int]]:
    return {tp.topic_id: set(tp.partitions) for tp in resp.assignment.topic_partitions if tp.partitions}


class Client:
    """What a KIP-848 client does: join, then heartbeat reporting what it owns; it takes
    (and revokes) whatever assignment the coordinator returns before the next heartbeat."""

    def __init__(self, h: CGHarness, group: str, topics: list[str] | None = None, member_id: str | None = None,
                 **join_kw: Any) -> None:
        self.h, self.group, self.topics = h, group, topics
        self.member_id = member_id or uuid.uuid4().hex
        self.epoch = 0
        self.owned: dict[bytes, set[int]] = {}
        self.join_kw = join_kw
        self.history: list[dict[bytes, set[int]]] = []

    def join(self) -> Any:
        resp = self.h.hb(self.group, self.member_id, 0, topics=self.topics, owned={}, rebalance_ms=REBALANCE_MS,
                         **self.join_kw)
        return self._take(resp)

    def poll(self, **kw: Any) -> Any:
        return self._take(self.h.hb(self.group, self.member_id, self.epoch, owned=self.owned, **kw))

    def leave(self) -> Any:
        return self.h.hb(self.group, self.member_id, -1)

    def _take(self, resp: Any) -> Any:
        assert resp.error_code == 0, (resp.error_code, resp.error_message)
        self.epoch = resp.member_epoch
        if resp.assignment is not None:
            self.owned = assignment_of(resp)
            self.history.append(self.owned)
        return resp


def assert_no_double_ownership(clients: list[Client]) -> None:
    seen: dict[tuple[bytes, int], str] = {}
    for c in clients:
        for tid, ps in c.owned.items():
            for p in ps:
                assert (tid, p) not in seen, f"{(tid, p)} owned by {seen[(tid, p)]} and {c.member_id}"
                seen[(tid, p)] = c.member_id


def settle(clients: list[Client], rounds: int = 10) -> None:
    for _ in range(rounds):
        for c in clients:
            c.poll()
            assert_no_double_ownership(clients)


def group_view(shard: Any, gid: str) -> tuple:
    g = shard.consumer.group(gid)
    return (g.group_epoch, g.target_assignment_epoch, dict(g.members), dict(g.target_assignment),
            dict(g.subscription_metadata), dict(g.partition_owners), dict(g.static_members))


# ---------------------------------------------------------------------- join / reconcile


def test_first_member_gets_every_partition_at_epoch_one():
    h = CGHarness()
    tid = h.image.create("t", 6)
    a = Client(h, "g", ["t"])
    resp = a.join()
    assert resp.member_epoch == 1 and resp.member_id == a.member_id
    assert resp.heartbeat_interval_ms == h.config.consumer_group_heartbeat_interval_ms
    assert a.owned == {tid: set(range(6))}
    g = h.group("g")
    assert g.group_epoch == 1 and g.target_assignment_epoch == 1 and g.state == ConsumerGroupState.STABLE
    # a steady heartbeat writes nothing and carries no assignment
    before = len(h.log)
    resp = a.poll()
    assert resp.assignment is None and len(h.log) == before and resp.member_epoch == 1


def test_second_member_waits_until_the_first_revokes():
    h = CGHarness()
    tid = h.image.create("t", 6)
    a, b = Client(h, "g", ["t"]), Client(h, "g", ["t"])
    a.join()
    b.join()
    g = h.group("g")
    assert g.group_epoch == 2
    # b reached epoch 2 but its partitions are still a's: nothing yet
    assert b.epoch == 2 and b.owned == {} and g.members[b.member_id].state == MemberState.UNRELEASED_PARTITIONS
    assert g.state == ConsumerGroupState.RECONCILING
    # a is told to give up three partitions and stays at epoch 1 until it did
    resp = h.hb("g", a.member_id, 1, owned={tid: set(range(6))})
    kept = assignment_of(resp)[tid]
    assert len(kept) == 3 and resp.member_epoch == 1
    assert g.members[a.member_id].state == MemberState.UNREVOKED_PARTITIONS
    # still owned by a: b gets nothing
    b.poll()
    assert b.owned == {}
    # a reports the revocation -> epoch 2; then b receives the released partitions
    a.owned = {tid: kept}
    a.poll()
    assert a.epoch == 2 and g.members[a.member_id].state == MemberState.STABLE
    b.poll()
    assert b.owned == {tid: set(range(6)) - kept}
    assert g.state == ConsumerGroupState.STABLE
    assert_no_double_ownership([a, b])


def test_three_members_converge_without_double_ownership():
    h = CGHarness()
    h.image.create("t", 7)
    h.image.create("u", 2)
    clients = [Client(h, "g", ["t", "u"]) for _ in range(3)]
    for i, c in enumerate(clients):
        c.join()
        settle(clients[:i + 1], 2)
    settle(clients)
    counts = [sum(len(p) for p in c.owned.values()) for c in clients]
    assert sum(counts) == 9 and max(counts) - min(counts) <= 1, counts
    assert h.group("g").state == ConsumerGroupState.STABLE


def test_leave_hands_partitions_to_the_others():
    h = CGHarness()
    tid = h.image.create("t", 4)
    a, b = Client(h, "g", ["t"]), Client(h, "g", ["t"])
    a.join()
    b.join()
    settle([a, b])
    epoch = h.group("g").group_epoch
    resp = b.leave()
    assert resp.error_code == 0 and resp.member_epoch == -1
    g = h.group("g")
    assert b.member_id not in g.members and g.group_epoch == epoch + 1
    a.poll()
    assert a.owned == {tid: set(range(4))}
    a.leave()
    assert g.state == ConsumerGroupState.EMPTY and not g.partition_owners


def test_session_timeout_fences_a_silent_member():
    h = CGHarness(GroupConfig(consumer_group_session_timeout_ms=SESSION_MS))
    tid = h.image.create("t", 4)
    a, b = Client(h, "g", ["t"]), Client(h, "g", ["t"])
    a.join()
    b.join()
    settle([a, b])
    for _ in range(5):  # a keeps heartbeating, b has died
        h.advance(SESSION_MS // 4)
        a.poll()
    g = h.group("g")
    assert b.member_id not in g.members
    assert a.owned == {tid: set(range(4))}
    # the dead member's next heartbeat is refused
    resp = h.hb("g", b.member_id, b.epoch, owned=b.owned)
    assert resp.error_code == Errors.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_fences_a_member_that_never_revokes():
    h = CGHarness(GroupConfig(consumer_group_session_timeout_ms=10 * REBALANCE_MS))
    tid = h.image.create("t", 4)
    a = Client(h, "g", ["t"])
    a.join()
    b = Client(h, "g", ["t"])
    b.join()
    # a is asked to revoke but keeps reporting everything
    h.hb("g", a.member_id, 1, owned={tid: set(range(4))})
    assert h.group("g").members[a.member_id].state == MemberState.UNREVOKED_PARTITIONS
    h.advance(REBALANCE_MS // 2)
    h.hb("g", a.member_id, 1, owned={tid: set(range(4))})
    b.poll()
    h.advance(REBALANCE_MS)
    assert a.member_id not in h.group("g").members
    b.poll()
    assert b.owned == {tid: set(range(4))}


# ---------------------------------------------------------------------- validation


def test_member_epoch_fencing_and_previous_epoch_retry():
    h = CGHarness()
    tid = h.image.create("t", 2)
    a = Client(h, "g", ["t"])
    a.join()
    assert h.hb("g", a.member_id, 5, owned=a.owned).error_code == Errors.FENCED_MEMBER_EPOCH
    assert h.hb("g", "nobody", 1, owned={}).error_code == Errors.UNKNOWN_MEMBER_ID
    b = Client(h, "g", ["t"])
    b.join()
    settle([a, b])
    m = h.group("g").members[a.member_id]
    assert m.member_epoch == 2 and m.previous_member_epoch == 1
    # a retry at the previous epoch owning a subset of the assignment is accepted ...
    resp = h.hb("g", a.member_id, 1, owned=a.owned)
    assert resp.error_code == 0 and resp.member_epoch == 2
    # ... owning more than that is not
    assert h.hb("g", a.member_id, 1, owned={tid: {0, 1}}).error_code == Errors.FENCED_MEMBER_EPOCH


@pytest.mark.parametrize("kw, code", [
    (dict(member_id="", version=1), Errors.INVALID_REQUEST),
    (dict(rebalance_ms=-1), Errors.INVALID_REQUEST),
    (dict(topics=None), Errors.INVALID_REQUEST),
    (dict(assignor="sticky"), Errors.UNSUPPORTED_ASSIGNOR),
    (dict(topics=None, regex="[unclosed"), Errors.INVALID_REGULAR_EXPRESSION),
])
def test_invalid_joins(kw, code):
    h = CGHarness()
    args = dict(member_id="m", topics=["t"], rebalance_ms=1000, owned={}) | kw
    version = args.pop("version", 1)
    member_id = args.pop("member_id")
    resp = h.hb("g", member_id, 0, version=version, **args)
    assert resp.error_code == code and resp.error_message
    assert h.group("g") is None and h.log == []


def test_v0_coordinator_generates_the_member_id():
    h = CGHarness()
    h.image.create("t", 1)
    resp = h.hb("g", "", 0, topics=["t"], owned={}, rebalance_ms=1000, version=0)
    assert resp.error_code == 0 and len(resp.member_id) == 22 and resp.member_epoch == 1


def test_group_max_size():
    h = CGHarness(GroupConfig(consumer_group_max_size=1))
    h.image.create("t", 1)
    Client(h, "g", ["t"]).join()
    resp = h.hb("g", "second", 0, topics=["t"], owned={}, rebalance_ms=1000)
    assert resp.error_code == Errors.GROUP_MAX_SIZE_REACHED


# ---------------------------------------------------------------------- metadata and assignors


def test_added_partitions_and_new_topics_trigger_a_new_assignment():
    h = CGHarness()
    tid = h.image.create("t", 2)
    a = Client(h, "g", ["t", "later"])
    a.join()
    epoch = h.group("g").group_epoch
    h.image.add_partitions("t", 4)
    a.poll()
    assert a.owned == {tid: {0, 1, 2, 3}} and h.group("g").group_epoch == epoch + 1
    lid = h.image.create("later", 3)
    a.poll()
    assert a.owned == {tid: {0, 1, 2, 3}, lid: {0, 1, 2}}
    h.image.delete("t")
    a.poll()
    assert a.owned == {lid: {0, 1, 2}}


def test_regex_subscription_follows_topic_creation():
    h = CGHarness()
    h.image.create("orders-eu", 1)
    h.image.create("other", 1)
    a = Client(h, "g", None, regex="orders-.*")
    a.join()
    assert a.owned == {h.image.id("orders-eu"): {0}}
    h.image.create("orders-us", 2)
    a.poll()
    assert a.owned == {h.image.id("orders-eu"): {0}, h.image.id("orders-us"): {0, 1}}


def test_range_assignor_gives_co_partitioned_ranges():
    h = CGHarness()
    t1, t2 = h.image.create("a", 4), h.image.create("b", 4)
    clients = [Client(h, "g", ["a", "b"], member_id=f"m{i}", assignor="range") for i in range(2)]
    for c in clients:
        c.join()
    settle(clients)
    assert clients[0].owned == {t1: {0, 1}, t2: {0, 1}}
    assert clients[1].owned == {t1: {2, 3}, t2: {2, 3}}
    desc = h.shard.consumer_group_describe("g", False)
    assert desc.assignor_name == "range"


def test_unsubscribing_a_topic_revokes_it():
    h = CGHarness()
    h.image.create("a", 2)
    t2 = h.image.create("b", 2)
    a = Client(h, "g", ["a", "b"])
    a.join()
    resp = h.hb("g", a.member_id, a.epoch, topics=["b"], owned=a.owned)
    assert assignment_of(resp) == {t2: {0, 1}}
    a.owned = assignment_of(resp)
    a.poll()
    assert h.group("g").state == ConsumerGroupState.STABLE and a.owned == {t2: {0, 1}}


# ---------------------------------------------------------------------- static members


def test_static_member_rejoins_under_a_new_id_and_keeps_its_partitions():
    h = CGHarness()
    tid = h.image.create("t", 4)
    a = Client(h, "g", ["t"], instance_id="i-a")
    b = Client(h, "g", ["t"])
    a.join()
    b.join()
    settle([a, b])
    mine = a.owned
    resp = h.hb("g", a.member_id, -2, instance_id="i-a")
    assert resp.error_code == 0 and resp.member_epoch == -2
    assert h.group("g").members[a.member_id].member_epoch == -2  # still holds its place
    a2 = Client(h, "g", ["t"], instance_id="i-a")
    a2.join()
    settle([a2, b])
    assert a2.owned == mine and a.member_id not in h.group("g").members
    assert tid in a2.owned and h.group("g").state == ConsumerGroupState.STABLE
    # while that incarnation is active, the instance id is taken
    resp = h.hb("g", "another", 0, topics=["t"], owned={}, rebalance_ms=1000, instance_id="i-a")
    assert resp.error_code == Errors.UNRELEASED_INSTANCE_ID


# ---------------------------------------------------------------------- records


def test_replaying_the_records_rebuilds_the_same_groups():
    h = CGHarness(GroupConfig(consumer_group_session_timeout_ms=SESSION_MS))
    h.image.create("t", 5)
    h.image.create("u", 3)
    clients = [Client(h, "g", ["t", "u"]) for _ in range(3)]
    for i, c in enumerate(clients):
        c.join()
        settle(clients[:i + 1], 1)
        assert group_view(h.rebuilt(), "g") == group_view(h.shard, "g")
    clients[1].leave()
    settle([clients[0], clients[2]], 3)
    h.image.add_partitions("u", 6)
    clients[0].poll()  # mid-reconciliation state is persisted too
    assert group_view(h.rebuilt(), "g") == group_view(h.shard, "g")
    rebuilt = h.rebuilt()
    assert rebuilt.consumer.group("g").state == h.group("g").state


def test_removed_group_records_replay_to_nothing():
    h = CGHarness()
    h.image.create("t", 1)
    a = Client(h, "g", ["t"])
    a.join()
    a.leave()
    assert h.run(h.shard.delete_groups(["g"])) == [("g", 0)]
    assert h.group("g") is None
    assert h.rebuilt().consumer.group("g") is None
