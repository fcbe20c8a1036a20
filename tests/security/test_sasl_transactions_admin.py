"""Transactions and admin calls through SASL logins, by each real client (issue 20: "each runs
produce, consume, groups, transactions and admin").

The broker is test_sasl_clients.py's (PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners, every
mechanism, the authorizer on with allow.everyone.if.no.acl.found=true, SCRAM users carol and dave).
Each client, logged in: creates a topic and describes its configs through its admin client, commits
one transaction and aborts another, and a read_committed consumer of the same client sees exactly
the committed records. confluent-kafka with SCRAM-SHA-512 over SASL_SSL, kafka-python with
SCRAM-SHA-256 over SASL_PLAINTEXT, aiokafka with PLAIN over SASL_SSL.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from tests.clients.adapters import DEADLINE_S

from .test_sasl_clients import TLS_OVERRIDES, broker, confluent_sasl, sasl_plaintext, sasl_ssl  # noqa: F401

__all__ = ["TLS_OVERRIDES"]  # the module's broker (tests/security/conftest.py reads it)

COMMITTED = [b"c-%d" % i for i in range(5)]
ABORTED = [b"a-%d" % i for i in range(3)]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_confluent_scram_sha_512_over_sasl_ssl_admin_and_transactions(broker, pki):  # noqa: F811
    conf = confluent_sasl(pki, "SCRAM-SHA-512", "carol", "carol-secret", tls=True)
    address = sasl_ssl(broker)
    topic = _name("txn-confluent")
    admin = AdminClient({"bootstrap.servers": address, **conf})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    assert "cleanup.policy" in next(iter(described.values())).result(30)
    producer = Producer({"bootstrap.servers": address, **conf, "transactional.id": _name("tx")})
    producer.init_transactions(30)
    for values, commit in ((COMMITTED, True), (ABORTED, False)):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, v)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    consumer = Consumer({"bootstrap.servers": address, **conf, "group.id": _name("g"),
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < len(COMMITTED) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        for _ in range(4):  # nothing after them: the aborted ones stay hidden
            m = consumer.poll(0.5)
            assert m is None or m.error() is not None, m.value()
    finally:
        consumer.close()
    assert got == COMMITTED


def test_kafka_python_scram_sha_256_admin_and_transactions(broker):  # noqa: F811
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    conf = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "dave", "sasl_plain_password": "dave-secret"}
    address = sasl_plaintext(broker)
    topic = _name("txn-kafka-python")
    admin = KafkaAdminClient(bootstrap_servers=address, **conf)
    try:
        admin.create_topics([KpNewTopic(topic, 1, 1)])
        described = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        assert "cleanup.policy" in str(described)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=address, transactional_id=_name("tx"), **conf)
    try:
        producer.init_transactions()
        for values, commit in ((COMMITTED, True), (ABORTED, False)):
            producer.begin_transaction()
            for v in values:
                producer.send(topic, v)
            producer.flush()
            producer.commit_transaction() if commit else producer.abort_transaction()
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=address, group_id=_name("g"), auto_offset_reset="earliest",
                             isolation_level="read_committed", consumer_timeout_ms=4000, **conf)
    try:
        got = [m.value for m in consumer]
    finally:
        consumer.close()
    assert got == COMMITTED


def test_aiokafka_plain_over_sasl_ssl_admin_and_transactions(broker, pki):  # noqa: F811
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic

    address = sasl_ssl(broker)
    topic = _name("txn-aiokafka")

    def conf() -> dict:
        return {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                "sasl_plain_password": "alice-secret",
                "ssl_context": ssl.create_default_context(cafile=str(pki.ca_pem))}

    async def run() -> list[bytes]:
        admin = AIOKafkaAdminClient(bootstrap_servers=address, **conf())
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic(topic, 1, 1)])
            assert topic in await admin.list_topics()
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=address, transactional_id=_name("tx"), **conf())
        await producer.start()
        try:
            for values, commit in ((COMMITTED, True), (ABORTED, False)):
                await producer.begin_transaction()
                for v in values:
                    await producer.send(topic, v)
                await (producer.commit_transaction() if commit else producer.abort_transaction())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=address, group_id=_name("g"),
                                    auto_offset_reset="earliest", isolation_level="read_committed", **conf())
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < len(COMMITTED) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got += [m.value for ms in batches.values() for m in ms]
            batches = await consumer.getmany(timeout_ms=2000)  # nothing after them
            got += [m.value for ms in batches.values() for m in ms]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == COMMITTED
