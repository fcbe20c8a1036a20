"""confluent-kafka's ShareConsumer (librdkafka's share consumer) against a live pybroker: the group
coordinator assigns, this node's share partitions deliver, and the share coordinator keeps their
state in __share_group_state (the broker's own DefaultStatePersister); what was acknowledged is
read back with DescribeShareGroupOffsets (pybroker's admin client)."""

from __future__ import annotations

import time

import pytest

from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.testing import EmbeddedBroker

from .test_dynamic_configs_wire import SET, incremental
from .test_live_versions import create_topic
from .wire import WireClient

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip(f"confluent-kafka {ck.version()[0]} has no ShareConsumer (2.16+)", allow_module_level=True)

LOCK_MS = 2000


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides={"group.share.record.lock.duration.ms": LOCK_MS,
                                   "group.share.min.record.lock.duration.ms": 1000,
                                   "group.share.heartbeat.interval.ms": 1000,
                                   "group.share.min.heartbeat.interval.ms": 1000}) as b:
        yield b


@pytest.fixture
def wire(broker):
    c = WireClient("127.0.0.1", broker.port)
    yield c
    c.close()


def setup(broker, wire, name, partitions=1, records=20, **configs):
    tid = create_topic(wire, name, partitions)
    settings = {"share.auto.offset.reset": "earliest", **configs}
    assert incremental(wire, [(32, name + "-g", [(k, SET, v) for k, v in settings.items()])]) == [(0, None)]
    p = ck.Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(records):
        p.produce(name, b"%d" % i, partition=i % partitions)
    assert p.flush(15) == 0
    return tid


def consumer(broker, group, **conf):
    c = ck.ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "log_level": 3,
                          **conf})
    return c


def poll_until(consumers, want, timeout_s=30.0, ack=None):
    """Poll every consumer until `want(seen)`; seen: (consumer index, partition, offset, delivery count)."""
    seen = []
    deadline = time.monotonic() + timeout_s
    while not want(seen) and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            for m in c.poll(0.2):
                if m.error():
                    continue
                seen.append((i, m.partition(), m.offset(), m.delivery_count()))
                if ack is not None:
                    ack(c, m)
    return seen


def test_records_go_to_one_member_at_a_time_and_are_acknowledged(broker, wire):
    setup(broker, wire, "sc-many", partitions=2, records=60)
    cs = [consumer(broker, "sc-many-g") for _ in range(3)]
    try:
        for c in cs:
            c.subscribe(["sc-many"])
        seen = poll_until(cs, lambda s: len({(p, o) for _, p, o, _ in s}) >= 60)
        records = [(p, o) for _, p, o, _ in seen]
        assert sorted(set(records)) == sorted((i % 2, i // 2) for i in range(60))
        assert len(records) == 60  # implicit acknowledgement: nothing delivered twice
        for c in cs:
            c.poll(0.2)  # the implicit acknowledgement of the last poll goes with the next
    finally:
        for c in cs:
            c.close()

    # every acknowledgement reached the share partitions: a new member of the group gets only
    # what is produced after them
    later = consumer(broker, "sc-many-g")
    try:
        later.subscribe(["sc-many"])
        p = ck.Producer({"bootstrap.servers": broker.bootstrap_servers})
        p.produce("sc-many", b"after", partition=1)
        assert p.flush(15) == 0
        seen = poll_until([later], lambda s: len(s) >= 1, timeout_s=20)
        seen += poll_until([later], lambda s: False, timeout_s=1.0)  # and nothing else comes
        assert [(p, o, n) for _, p, o, n in seen] == [(1, 30, 1)]
    finally:
        later.close()
    # and the share coordinator holds the groups' state (DescribeShareGroupOffsets)
    with AdminClient(broker.bootstrap_servers) as admin:
        offsets = admin.describe_share_group_offsets("sc-many-g")
    assert set(offsets) == {TopicPartition("sc-many", 0), TopicPartition("sc-many", 1)}


def test_release_and_reject_in_explicit_mode(broker, wire):
    setup(broker, wire, "sc-explicit", records=4)
    c = consumer(broker, "sc-explicit-g", **{"share.acknowledgement.mode": "explicit"})
    try:
        c.subscribe(["sc-explicit"])

        def ack(cons, m):  # release 0 once, reject 1, accept the rest
            kind = ck.AcknowledgeType.ACCEPT
            if m.offset() == 0 and m.delivery_count() == 1:
                kind = ck.AcknowledgeType.RELEASE
            elif m.offset() == 1:
                kind = ck.AcknowledgeType.REJECT
            cons.acknowledge(m, kind)
        seen = poll_until([c], lambda s: (0, 0, 2) in [(p, o, n) for _, p, o, n in s], ack=ack)
        assert [(o, n) for _, _, o, n in seen if o == 0] == [(0, 1), (0, 2)]  # redelivered, counted
        assert [n for _, _, o, n in seen if o == 1] == [1]  # rejected: never again
        c.commit_sync()
        assert poll_until([c], lambda s: bool(s), timeout_s=1.5, ack=ack) == []
    finally:
        c.close()


def test_a_closed_members_records_go_to_another_at_once(broker, wire):
    setup(broker, wire, "sc-leave", records=10)
    a = consumer(broker, "sc-leave-g", **{"share.acknowledgement.mode": "explicit"})
    b = None
    try:
        a.subscribe(["sc-leave"])
        seen = poll_until([a], lambda s: len(s) >= 10)
        assert sorted(o for _, _, o, _ in seen) == list(range(10))
        a.close()  # nothing acknowledged: its records are released when its share session closes
        a = None
        b = consumer(broker, "sc-leave-g")
        b.subscribe(["sc-leave"])
        started = time.monotonic()
        again = poll_until([b], lambda s: len({o for _, _, o, _ in s}) >= 10, timeout_s=20)
        assert sorted({o for _, _, o, _ in again}) == list(range(10))
        # released, not timed out (the lock is 2 s, the share session's release is immediate; the
        # delivery that never finished is not counted)
        assert all(n == 1 for _, _, _, n in again)
        assert time.monotonic() - started < 15
    finally:
        for c in (a, b):
            if c is not None:
                c.close()


def test_a_lock_timeout_redelivers_with_the_count_raised(broker, wire):
    setup(broker, wire, "sc-timeout", records=3, **{"share.record.lock.duration.ms": "2000"})
    a = consumer(broker, "sc-timeout-g")
    b = consumer(broker, "sc-timeout-g")
    try:
        a.subscribe(["sc-timeout"])
        first = poll_until([a], lambda s: len(s) >= 3)
        assert sorted((o, n) for _, _, o, n in first) == [(0, 1), (1, 1), (2, 1)]
        # a stops polling (it stays in the group): past its 2 s locks the records go to b
        b.subscribe(["sc-timeout"])
        again = poll_until([b], lambda s: len(s) >= 3)
        assert sorted((o, n) for _, _, o, n in again) == [(0, 2), (1, 2), (2, 2)]
    finally:
        a.close()
        b.close()
