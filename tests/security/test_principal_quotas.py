"""The authenticated principal reaches quotas and the request log (issue 20 item 4).

An embedded broker (same code as the `pybroker` command, in this process so the request logger's
records are visible to caplog) with a PLAINTEXT listener and a SASL_PLAINTEXT one whose PLAIN users
are alice and bob. A `user=alice` producer_byte_rate quota throttles confluent-kafka producing as
alice (librdkafka's throttle_cb) and delivers every record, while bob, on the same client-id, is
never throttled: the quota is looked up by the SASL username (Kafka's DefaultQuotaCallback uses
KafkaPrincipal.getName), not by the client-id or as User:ANONYMOUS. A <user, client-id> quota
applies to that pair only. The request log names each request's principal and listener.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.testing import EmbeddedBroker
from tests.clients.test_client_quotas import _alter_v0, produce_counting_throttles
from tests.cluster.harness import free_ports

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')


class _Broker:
    def __init__(self, embedded: EmbeddedBroker, plain: int, sasl: int) -> None:
        self.embedded = embedded
        self.plain = f"127.0.0.1:{plain}"
        self.sasl = f"127.0.0.1:{sasl}"


@pytest.fixture(scope="module")
def broker() -> Iterator[_Broker]:
    plain, sasl = free_ports(2)
    embedded = EmbeddedBroker(port=plain, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    })
    embedded.start()
    try:
        yield _Broker(embedded, plain, sasl)
    finally:
        embedded.close()


def _topic(bootstrap: str) -> str:
    name = f"pq-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: a collected handle fails its futures
    for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
        f.result(15)
    return name


def _produce_as(bootstrap: str, topic: str, user: str, client_id: str, count: int, size: int) -> list[float]:
    """Produce `count` records of `size` bytes as `user` (every one delivered); the throttle times."""
    return produce_counting_throttles(bootstrap, topic, count, size, **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
        "sasl.password": f"{user}-secret", "client.id": client_id})


def test_a_user_quota_throttles_that_sasl_user_and_not_another_with_the_same_client_id(broker):
    topic = _topic(broker.plain)
    assert _alter_v0(broker.plain, {"user": "alice"}, {"producer_byte_rate": 10_000.0}) == [(0, None)]
    client_id = f"shared-{uuid.uuid4().hex[:6]}"
    # 130 kB in the first 10 s window: ~30% over a 10 kB/s quota for alice, unlimited for bob
    alice = _produce_as(broker.sasl, topic, "alice", client_id, 130, 1000)
    bob = _produce_as(broker.sasl, topic, "bob", client_id, 130, 1000)
    assert alice and max(alice) > 0, "alice's user quota never throttled her producer"
    assert not any(t > 0 for t in bob), f"bob has no quota but was throttled: {bob}"


def test_a_user_client_id_quota_applies_only_to_that_pair(broker):
    topic = _topic(broker.plain)
    client_id = f"pair-{uuid.uuid4().hex[:6]}"
    assert _alter_v0(broker.plain, {"user": "bob", "client-id": client_id},
                     {"producer_byte_rate": 10_000.0}) == [(0, None)]
    bob = _produce_as(broker.sasl, topic, "bob", client_id, 130, 1000)
    bob_other = _produce_as(broker.sasl, topic, "bob", client_id + "-other", 130, 1000)
    assert bob and max(bob) > 0, "the <bob, client-id> quota never throttled"
    assert not any(t > 0 for t in bob_other), f"another client-id of bob was throttled: {bob_other}"


def test_the_request_log_names_the_principal_and_listener(broker, caplog):
    topic = _topic(broker.plain)
    with caplog.at_level(logging.DEBUG, logger="pybroker.request"):
        _produce_as(broker.sasl, topic, "bob", "logged-client", 3, 100)
    lines = [r.getMessage() for r in caplog.records if r.name == "pybroker.request"]
    produce = [line for line in lines if line.startswith("request PRODUCE ") and "client=logged-client" in line]
    assert produce, f"no PRODUCE request logged: {lines[:5]}"
    assert all("principal=User:bob" in line and "listener=SASL_PLAINTEXT" in line for line in produce), produce[0]
