"""Share groups (KIP-932) with confluent-kafka 2.16's ShareConsumer (librdkafka's share consumer)
against a pybroker process: what tests/server/test_share_consumer_wire.py does not cover (the
delivery limit, a member killed with SIGKILL, a broker restart, offsets altered by an admin).

Each record is acquired by one member at a time, for share.record.lock.duration.ms, and
acknowledged ACCEPT (done), RELEASE (redelivered, its delivery count rising) or REJECT
(archived); a lock that runs out releases the record; a record delivered
share.delivery.count.limit times is archived. Share groups start at share.auto.offset.reset
(latest by default): every test sets earliest on its group first, as a user would with
kafka-configs.sh.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from .adapters import confluent_admin
from .group_helpers import create_topic, produce_to_partitions, require_apis, wait_until

SHARE_APIS = {76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge"}

BROKER_OVERRIDES = {
    "group.share.min.session.timeout.ms": "1000",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.record.lock.duration.ms": "1000",
}


@pytest.fixture(autouse=True)
def _share_apis(broker):
    require_apis(broker.bootstrap, SHARE_APIS)


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    admin = confluent_admin(bootstrap)
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    fut = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)])
    for f in fut.values():
        f.result(timeout=20)


def share_group(bootstrap: str, **configs: str) -> str:
    group = f"share-{uuid.uuid4().hex[:8]}"
    set_group_configs(bootstrap, group, share_auto_offset_reset="earliest", **configs)
    return group


def consumer(bootstrap: str, group: str, topic: str, **conf: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       **{k.replace("_", "."): v for k, v in conf.items()}})
    c.subscribe([topic])
    return c


def poll_records(c: ShareConsumer, timeout: float = 1.0) -> list:
    out = []
    for m in c.poll(timeout):
        if m.error() is not None:  # transient (a broker restarting) unless fatal
            assert not m.error().fatal(), m.error()
            continue
        out.append(m)
    return out


def drain(c: ShareConsumer, n: int, timeout: float = 30.0, ack=None) -> list:
    """Poll until n records came back (explicit mode: each acknowledged with `ack` if given)."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        batch = poll_records(c, 0.5)
        if ack is not None:
            for m in batch:
                c.acknowledge(m, ack)
        out.extend(batch)
    assert len(out) >= n, f"{len(out)} of {n} records came back in {timeout}s"
    return out


def test_poison_record_archived_after_delivery_limit(broker, topic):
    create_topic(broker.bootstrap, topic, 1)
    produce_to_partitions(broker.bootstrap, topic, [0], 1, "poison")
    group = share_group(broker.bootstrap, share_delivery_count_limit="2")
    c = consumer(broker.bootstrap, group, topic, share_acknowledgement_mode="explicit")
    try:
        counts = []
        for _ in range(2):
            (m,) = drain(c, 1, ack=AcknowledgeType.RELEASE)
            counts.append(m.delivery_count())
            c.commit_sync()
        assert counts == [1, 2]
        # the limit is reached: archived, so the next record is the next thing delivered
        produce_to_partitions(broker.bootstrap, topic, [0], 1, "after")
        (m,) = drain(c, 1, ack=AcknowledgeType.ACCEPT)
        c.commit_sync()
        assert (m.offset(), m.delivery_count()) == (1, 1)
    finally:
        c.close()


MEMBER_SCRIPT = """
import sys
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
n = 0
while n == 0:
    n = len([m for m in c.poll(0.5) if m.error() is None])
print("acquired", n, flush=True)
sys.stdin.read()  # hold the records until killed
"""


def test_killed_member_records_go_to_another(broker, topic):
    create_topic(broker.bootstrap, topic, 1)
    produce_to_partitions(broker.bootstrap, topic, [0], 20, "killed")
    # a long lock: the records come back because the dead member's connection and session go,
    # not its lock
    group = share_group(broker.bootstrap, share_record_lock_duration_ms="60000")
    proc = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, broker.bootstrap, group, topic],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("acquired"), line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        c = consumer(broker.bootstrap, group, topic, share_acknowledgement_mode="explicit")
        try:
            got = drain(c, 20, timeout=30, ack=AcknowledgeType.ACCEPT)
            c.commit_sync()
            assert sorted(m.offset() for m in got) == list(range(20))
            # released when the dead member's connection closed, and, as Kafka does, without
            # counting a delivery the member may never have processed
            assert {m.delivery_count() for m in got} == {1}
        finally:
            c.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_broker_restart_keeps_acknowledgements_and_redelivers_in_flight(broker_factory, topic):
    node = broker_factory(**BROKER_OVERRIDES)
    require_apis(node.bootstrap, SHARE_APIS)
    create_topic(node.bootstrap, topic, 1)
    produce_to_partitions(node.bootstrap, topic, [0], 20, "restart")
    group = share_group(node.bootstrap)
    a = consumer(node.bootstrap, group, topic, share_acknowledgement_mode="explicit")
    try:
        got = drain(a, 20)
        for m in got:
            if m.offset() < 10:
                a.acknowledge(m, AcknowledgeType.ACCEPT)
        a.commit_sync()  # 0-9 accepted and persisted; 10-19 held, in flight
        node.restart(signal.SIGKILL)
    finally:
        a.close()
    b = consumer(node.bootstrap, group, topic, share_acknowledgement_mode="explicit")
    try:
        again = drain(b, 10, timeout=60, ack=AcknowledgeType.ACCEPT)
        b.commit_sync()
        assert sorted(m.offset() for m in again) == list(range(10, 20))
        assert poll_records(b, 1.0) == []
    finally:
        b.close()


def test_offsets_altered_through_the_admin_api(broker, topic):
    from pybroker.client.admin import AdminClient, TopicPartition

    create_topic(broker.bootstrap, topic, 1)
    produce_to_partitions(broker.bootstrap, topic, [0], 10, "alter")
    group = share_group(broker.bootstrap)
    c = consumer(broker.bootstrap, group, topic)
    try:
        assert sorted(m.offset() for m in drain(c, 10)) == list(range(10))
        poll_records(c, 0.5)  # the implicit acknowledgement of the last records goes with this poll
    finally:
        c.close()
    tp = TopicPartition(topic, 0)
    with AdminClient(broker.bootstrap) as admin:
        wait_until(lambda: admin.describe_share_group(group).state == "Empty", 20, what="an empty share group")
        admin.alter_share_group_offsets(group, {tp: 4})
        assert admin.describe_share_group_offsets(group)[tp][0] == 4
    c = consumer(broker.bootstrap, group, topic)
    try:
        got = drain(c, 6)
        assert sorted(m.offset() for m in got) == list(range(4, 10))
        assert {m.delivery_count() for m in got} == {1}
    finally:
        c.close()
