"""pybroker.client.consumer as a classic group member next to librdkafka (range assignor):
the two split the partitions between them, and each reads only its own."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer

from pybroker.client.admin import TopicPartition
from pybroker.client.consumer import Consumer


def test_pybroker_and_librdkafka_members_share_a_group(broker, topic):
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for part in range(3):
        for i in range(5):
            p.produce(topic, value=f"p{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    ours = Consumer(broker.bootstrap_servers, group_id=group, auto_offset_reset="earliest",
                    heartbeat_interval_ms=200, session_timeout_ms=10000, rebalance_timeout_ms=10000)
    ours.subscribe([topic])
    assert ours.assignment() == [TopicPartition(topic, p) for p in range(3)]

    stop = threading.Event()
    seen: list = []

    def poll_ours() -> None:  # keeps heartbeating, so the rebalance reaches this member
        while not stop.is_set():
            seen.extend(ours.poll(0.2))

    t = threading.Thread(target=poll_ours, daemon=True)
    t.start()
    rd = RdConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                     "partition.assignment.strategy": "range", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 10000})
    rd.subscribe([topic])
    theirs: list = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (rd.assignment() and len(ours.assignment()) < 3):
            m = rd.poll(0.2)
            if m is not None and m.error() is None:
                theirs.append(m)
        mine = set(ours.assignment())
        rd_parts = {TopicPartition(tp.topic, tp.partition) for tp in rd.assignment()}
        assert mine and rd_parts and not (mine & rd_parts)
        assert mine | rd_parts == {TopicPartition(topic, p) for p in range(3)}
        for _ in range(50):
            m = rd.poll(0.2)
            if m is not None and m.error() is None:
                theirs.append(m)
        assert {m.partition() for m in theirs} <= {tp.partition for tp in rd_parts}
    finally:
        stop.set()
        t.join(30)
        rd.close()
        ours.close()
