"""One min-ISR rule, Kafka 4's (issue 19 item 2): acks=all is checked against
effectiveMinIsr = min(min.insync.replicas, replica count), as Partition.appendRecordsToLeader does.

An RF=1 topic with min.insync.replicas=2 (say, under a cluster-wide default of 2) accepts acks=all
on Kafka; pybroker's Produce handler used the raw setting and refused it with NOT_ENOUGH_REPLICAS.
The high watermark and the under-min-ISR metrics already used the capped value.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import unique_topic


def create(bootstrap: str, topic: str, replication: int, min_isr: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replication, config={"min.insync.replicas": str(min_isr)})]
                        )[topic].result(30)


def read_all(bootstrap: str, topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        for _ in range(120):
            m = c.poll(0.25)
            if m is not None and not m.error():
                got.append(m.value())
            if len(got) >= n:
                break
        return got
    finally:
        c.close()


def test_acks_all_on_rf1_with_min_insync_2_is_accepted_by_every_client(broker) -> None:
    topic = unique_topic("minisr")
    create(broker.bootstrap, topic, replication=1, min_isr=2)
    # confluent-kafka (librdkafka), idempotent: acks=all
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 15000})
    errors: list[object] = []
    for i in range(5):
        p.produce(topic, b"c%d" % i, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(20) == 0 and not errors, errors
    # kafka-python, acks=all
    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0, request_timeout_ms=15000)
    try:
        for i in range(5):
            kp.send(topic, b"k%d" % i).get(timeout=20)
    finally:
        kp.close()
    # aiokafka, acks=all
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def aio() -> None:
        ap = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", request_timeout_ms=15000)
        await ap.start()
        try:
            for i in range(5):
                await ap.send_and_wait(topic, b"a%d" % i)
        finally:
            await ap.stop()

    asyncio.run(aio())
    expected = [b"%s%d" % (c, i) for c in (b"c", b"k", b"a") for i in range(5)]
    assert sorted(read_all(broker.bootstrap, topic, 15)) == sorted(expected)
