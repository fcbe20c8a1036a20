"""The connector over TLS and SASL: Spark writes and reads through a SASL_SSL listener (PLAIN,
the CA's PEM truststore) and an SSL listener that requires a client certificate (a PEM
keystore), with Kafka's client keys under the `kafka.` prefix, as Spark's Kafka source takes
them. Every task (Python worker) builds its own TLS context and login from the options;
confluent-kafka reads back what Spark wrote. Wrong credentials fail the job on the driver."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybroker.client.admin import AdminClient
from pybroker.security.local_ca import CA_CERT, CLIENT_KEYSTORE, NODE_KEYSTORE, ensure_local_ca
from tests.clients.adapters import DEADLINE_S
from tests.clients.broker import BrokerProcess, BrokerStartError

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_LISTENING = re.compile(rb"listening on (\w+)://([^\s]+):(\d+)")


class Secured:
    def __init__(self, node: BrokerProcess, tls: Path) -> None:
        self.node = node
        self.ports = {m.group(1).decode(): int(m.group(3)) for m in _LISTENING.finditer(node._read_output(0))}
        trust = {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(tls / CA_CERT)}
        self.options = {
            "sasl_ssl": {"kafka.bootstrap.servers": f"127.0.0.1:{self.ports['SASL_SSL']}",
                         "kafka.security.protocol": "SASL_SSL", **trust, "kafka.sasl.mechanism": "PLAIN",
                         "kafka.sasl.jaas.config": f'{PLAIN} required username="alice" password="alice-secret";'},
            "ssl": {"kafka.bootstrap.servers": f"127.0.0.1:{self.ports['SSL']}", "kafka.security.protocol": "SSL",
                    **trust, "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": str(tls / CLIENT_KEYSTORE)},
        }
        self.librdkafka = {"sasl_ssl": {"security.protocol": "SASL_SSL", "ssl.ca.location": str(tls / CA_CERT),
                                        "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                        "sasl.password": "alice-secret"}}

    @property
    def plain(self) -> str:
        return f"127.0.0.1:{self.ports['PLAINTEXT']}"


def confluent_values(bootstrap: str, topic: str, count: int, conf: dict[str, str]) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, **conf})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        values: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        return values
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tls = ensure_local_ca(tmp_path_factory.mktemp("spark-tls"))
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls / NODE_KEYSTORE),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls / CA_CERT),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN",
        "plain.sasl.jaas.config": f'{PLAIN} required user_alice="alice-secret";',
        "num.partitions": "2",
    }
    node = BrokerProcess(tmp_path_factory.mktemp("spark-secured") / "data", overrides=overrides)
    try:
        node.start()
    except BrokerStartError as exc:
        pytest.fail(f"pybroker could not start:\n{exc}", pytrace=False)
    yield Secured(node, tls)
    node.close()


@pytest.mark.parametrize("way", ["sasl_ssl", "ssl"])
def test_spark_writes_and_reads_through_a_secured_listener(spark, secured, topic, way):
    with AdminClient(secured.plain) as admin:
        admin.create_topic(topic, 2, 1, {})
    options = secured.options[way]
    df = spark.range(500).selectExpr("cast(id as string) as key", "concat('v-', cast(id as string)) as value")
    w = df.write.format("pybroker").mode("append").option("topic", topic)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()
    r = spark.read.format("pybroker").option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    back = r.load().selectExpr("cast(key as string) as key", "cast(value as string) as value")
    assert sorted((x["key"], x["value"]) for x in back.collect()) == sorted((str(i), f"v-{i}") for i in range(500))
    # an independent client reads what Spark wrote, over SASL_SSL itself
    assert sorted(confluent_values(f"127.0.0.1:{secured.ports['SASL_SSL']}", topic, 500,
                                   secured.librdkafka["sasl_ssl"])) == sorted(f"v-{i}".encode() for i in range(500))


def test_a_wrong_password_fails_the_job_on_the_driver(spark, secured, topic):
    options = {**secured.options["sasl_ssl"],
               "kafka.sasl.jaas.config": f'{PLAIN} required username="alice" password="wrong";'}
    w = spark.range(3).selectExpr("cast(id as string) as value").write.format("pybroker").mode("append")
    w = w.option("topic", topic)
    for k, v in options.items():
        w = w.option(k, v)
    with pytest.raises(Exception, match="Authentication failed|SASL_AUTHENTICATION_FAILED|authentication"):
        w.save()
