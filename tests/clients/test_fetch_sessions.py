"""Incremental fetch sessions (KIP-227) with real clients, checked on the wire.

kafka-python 3.0 is the client among ours that asks for sessions (Fetch v7+ with session id 0
and epoch 0, then incremental fetches); librdkafka (confluent-kafka, kcat) and aiokafka send
epoch -1 and never get one. Every connection runs through a counting relay (wire_tap.py), so
the tests see the Fetch frames' sizes and session fields as sent, not the broker's opinion.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition

from .wire_tap import WireTap

PARTITIONS = 1000
WITH_DATA = 50  # partitions that get records; the rest stay empty


@pytest.fixture
def tapped(broker_factory):
    """A broker whose advertised listener is a wire tap: every client connection is counted."""
    tap = WireTap()
    node = broker_factory(**{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{tap.port}"})
    tap.start(node.port)
    yield node, tap
    tap.close()


def create_and_fill(bootstrap: str, topic: str) -> dict[int, bytes]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=60)[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = {p: f"value-{p}".encode() for p in range(0, PARTITIONS, PARTITIONS // WITH_DATA)}
    for p, v in sent.items():
        producer.produce(topic, v, partition=p)
    assert producer.flush(30) == 0
    return sent


def consume_kafka_python(bootstrap: str, topic: str, want: int, sessions: bool, extra_polls: int
                         ) -> dict[int, bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             fetch_max_wait_ms=100, enable_incremental_fetch_sessions=sessions)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < want and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                for r in records:
                    got[tp.partition] = r.value
        for _ in range(extra_polls):  # idle fetches: nothing new anywhere
            assert not consumer.poll(timeout_ms=200)
        return got
    finally:
        consumer.close()


def test_kafka_python_consumes_1000_partitions_through_an_incremental_session(tapped, topic):
    node, tap = tapped
    bootstrap = f"127.0.0.1:{tap.port}"
    sent = create_and_fill(bootstrap, topic)
    assert consume_kafka_python(bootstrap, topic, len(sent), sessions=True, extra_polls=10) == sent

    fetches = tap.fetches()
    assert len(fetches) >= 10
    first, rest = fetches[0], fetches[1:]
    assert (first.session_id, first.session_epoch) == (0, 0)  # asks for a session
    assert first.request_bytes > PARTITIONS * 20  # names every partition
    assert first.response_bytes > PARTITIONS * 20  # and is answered for every partition
    # then one session, epochs 1, 2, 3, ...; each request names only what changed
    assert len({f.session_id for f in rest}) == 1 and rest[0].session_id > 0
    assert [f.session_epoch for f in rest] == list(range(1, len(rest) + 1))
    idle = rest[-8:]  # the extra polls: no records anywhere, nothing changed
    assert all(f.request_bytes < 200 and f.response_bytes < 200 for f in idle), idle
    total_incremental = sum(f.request_bytes + f.response_bytes for f in rest)
    assert total_incremental < first.request_bytes + first.response_bytes


def test_kafka_python_without_sessions_sends_every_partition_every_time(tapped, topic):
    """The contrast: the same consumer with sessions turned off names all 1,000 partitions in
    every request and gets all of them back (what the session saves)."""
    node, tap = tapped
    bootstrap = f"127.0.0.1:{tap.port}"
    sent = create_and_fill(bootstrap, topic)
    assert consume_kafka_python(bootstrap, topic, len(sent), sessions=False, extra_polls=5) == sent
    fetches = tap.fetches()
    assert len(fetches) >= 5
    assert all(f.session_epoch == -1 for f in fetches)
    assert all(f.request_bytes > PARTITIONS * 20 and f.response_bytes > PARTITIONS * 20 for f in fetches)


def test_librdkafka_fetches_sessionless_and_consumes_1000_partitions(tapped, topic):
    node, tap = tapped
    bootstrap = f"127.0.0.1:{tap.port}"
    sent = create_and_fill(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fs-librdkafka",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([CTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got[m.partition()] = m.value()
    finally:
        consumer.close()
    assert got == sent
    fetches = tap.fetches()
    assert fetches and all(f.session_id in (0, None) for f in fetches)
