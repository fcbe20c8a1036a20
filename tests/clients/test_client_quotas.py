"""Client quotas (KIP-546 admin, KIP-13/KIP-219 enforcement) through real clients.

- confluent-kafka-python's upstream integration test (tests/integration/admin/
  test_client_quotas.py: a validate_only alteration is not visible; producer_byte_rate
  222222 set for a user entity; an EXACT user filter describes 222222.0; an op with value
  None removes it and the entity disappears) is reproduced step by step. Its
  AdminClient.alter_client_quotas / describe_client_quotas are not in any released
  confluent-kafka (2.16.1 is the newest on PyPI), so the test runs through that API when the
  installed client has it and is skipped, saying why, when it does not.
- The same scenario always runs through independent codecs: alterations from a hand-written
  AlterClientQuotas v0 encoder (not pybroker's codec), describes through aiokafka 0.14's own
  DescribeClientQuotasRequest (v0) on its AIOKafkaClient. kafka-python 3.0.12 has no client
  quota admin API (its KafkaAdminClient has neither method).
- A confluent-kafka (librdkafka 2.16) producer whose client-id has a small producer_byte_rate
  is throttled (librdkafka reports the broker's throttle_time_ms through throttle_cb) and
  still delivers every record.
"""

from __future__ import annotations

import asyncio
import struct
import uuid

import pytest

from . import rawkafka
from .adapters import aiokafka_common, confluent_admin, confluent_producer

API_DESCRIBE_CLIENT_QUOTAS, API_ALTER_CLIENT_QUOTAS = 48, 49
_cid = [100]


def _alter_v0(bootstrap: str, entity: dict[str, str | None], ops: dict[str, float | None],
              validate_only: bool = False) -> list[tuple[int, str | None]]:
    """AlterClientQuotas v0, encoded by hand: [(error_code, error_message)] per entry."""
    body = struct.pack(">i", 1) + struct.pack(">i", len(entity))
    for t, name in entity.items():
        body += rawkafka.string(t) + rawkafka.string(name)
    body += struct.pack(">i", len(ops))
    for key, value in ops.items():
        body += rawkafka.string(key) + struct.pack(">d?", 0.0 if value is None else value, value is None)
    body += struct.pack(">?", validate_only)
    _cid[0] += 1
    host, port = bootstrap.rsplit(":", 1)
    with rawkafka.Connection(host, int(port)) as conn:
        cid, resp = conn.request(rawkafka.frame(
            rawkafka.request_header(API_ALTER_CLIENT_QUOTAS, 0, _cid[0]) + body))
    assert cid == _cid[0]
    r = rawkafka.Reader(resp)
    r.take("i")  # throttle_time_ms
    out = []
    for _ in range(r.take("i")):
        code, message = r.take("h"), r.string()
        for _ in range(r.take("i")):
            r.string(), r.string()
        out.append((code, message))
    return out


async def _aiokafka_describe(bootstrap: str, components: list[tuple[str, int, str | None]]) -> dict:
    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.admin import DescribeClientQuotasRequest

    common = aiokafka_common(bootstrap)
    client = AIOKafkaClient(bootstrap_servers=common["bootstrap_servers"],
                            request_timeout_ms=common["request_timeout_ms"])
    await client.bootstrap()
    try:
        node = next(iter(client.cluster.brokers())).nodeId
        resp = await client.send(node, DescribeClientQuotasRequest(components=components, strict=False))
    finally:
        await client.close()
    assert resp.error_code == 0, resp.error_message
    return {frozenset((t, n) for t, n in entity): dict(values) for entity, values in resp.entries}


def aiokafka_describe_user(bootstrap: str, user: str) -> dict:
    return asyncio.run(_aiokafka_describe(bootstrap, [("user", 0, user)]))


def test_upstream_confluent_client_quotas(broker):
    """confluent-kafka-python tests/integration/admin/test_client_quotas.py, step by step."""
    admin_mod = pytest.importorskip("confluent_kafka.admin")
    if not hasattr(admin_mod, "ClientQuotaAlteration"):
        import confluent_kafka

        pytest.skip(f"confluent-kafka {confluent_kafka.version()} has no client quota admin API "
                    "(unreleased upstream); the same scenario runs in test_client_quota_scenario_*")
    from confluent_kafka.admin import (
        ClientQuotaAlteration,
        ClientQuotaAlterationOp,
        ClientQuotaEntity,
        ClientQuotaFilter,
        ClientQuotaFilterComponent,
        ClientQuotaMatchType,
    )

    admin = confluent_admin(broker.bootstrap)

    def describe_user(user):
        f = ClientQuotaFilter([ClientQuotaFilterComponent("user", ClientQuotaMatchType.EXACT, user)])
        return admin.describe_client_quotas(f).result(timeout=15)

    user = f"confluent-kafka-python-{uuid.uuid4().hex}"
    entity = ClientQuotaEntity({"user": user})
    key = "producer_byte_rate"
    validate_only = ClientQuotaAlteration(entity, [ClientQuotaAlterationOp(key, 111111.0)])
    assert admin.alter_client_quotas([validate_only], validate_only=True)[entity].result(timeout=15) is None
    assert entity not in describe_user(user)
    alteration = ClientQuotaAlteration(entity, [ClientQuotaAlterationOp(key, 222222.0)])
    assert admin.alter_client_quotas([alteration])[entity].result(timeout=15) is None
    assert describe_user(user)[entity][key] == 222222.0
    removal = ClientQuotaAlteration(entity, [ClientQuotaAlterationOp(key, None)])
    assert admin.alter_client_quotas([removal])[entity].result(timeout=15) is None
    assert entity not in describe_user(user)


def test_client_quota_scenario_through_independent_codecs(broker):
    """The upstream scenario: raw AlterClientQuotas v0 + aiokafka's DescribeClientQuotas v0."""
    bootstrap = broker.bootstrap
    user = f"confluent-kafka-python-{uuid.uuid4().hex}"
    me = frozenset({("user", user)})
    key = "producer_byte_rate"
    assert _alter_v0(bootstrap, {"user": user}, {key: 111111.0}, validate_only=True) == [(0, None)]
    assert me not in aiokafka_describe_user(bootstrap, user)
    assert _alter_v0(bootstrap, {"user": user}, {key: 222222.0}) == [(0, None)]
    assert aiokafka_describe_user(bootstrap, user) == {me: {key: 222222.0}}
    assert _alter_v0(bootstrap, {"user": user}, {key: None}) == [(0, None)]
    assert me not in aiokafka_describe_user(bootstrap, user)
    # and an invalid value is refused with Kafka's message, leaving nothing behind
    assert _alter_v0(bootstrap, {"user": user}, {key: 2.5}) == [(42, f"{key} cannot be a fractional value.")]
    assert me not in aiokafka_describe_user(bootstrap, user)


def test_aiokafka_describe_sees_default_entities_as_null_names(broker):
    bootstrap = broker.bootstrap
    assert _alter_v0(bootstrap, {"user": None, "client-id": "ai-c"}, {"consumer_byte_rate": 777.0}) == [(0, None)]
    got = asyncio.run(_aiokafka_describe(bootstrap, [("client-id", 0, "ai-c")]))
    assert got == {frozenset({("user", None), ("client-id", "ai-c")}): {"consumer_byte_rate": 777.0}}


def produce_counting_throttles(bootstrap: str, topic: str, count: int, size: int, **conf: object) -> list[float]:
    """A confluent-kafka producer (`conf` added) sends `count` records of `size` bytes, every one
    of which must be delivered; returns the throttle times librdkafka reported (throttle_cb)."""
    throttles: list[float] = []
    delivered: list[object] = []
    producer = confluent_producer(bootstrap, acks=1, **{
        "throttle_cb": lambda ev: throttles.append(ev.throttle_time), "message.timeout.ms": 60_000,
        "batch.size": 4096, **conf})

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append(msg.offset())

    for i in range(count):
        producer.produce(topic, value=b"%05d" % i + b"x" * (size - 5), on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(60) == 0
    for _ in range(20):  # throttle events are served by poll()
        if throttles:
            break
        producer.poll(0.1)
    assert len(delivered) == count and len(set(delivered)) == count
    return throttles


def test_confluent_producer_over_its_quota_is_throttled_but_delivers_everything(broker, topic):
    client_id = f"throttled-{uuid.uuid4().hex[:8]}"
    quota = 10_000.0
    assert _alter_v0(broker.bootstrap, {"client-id": client_id}, {"producer_byte_rate": quota}) == [(0, None)]
    # 130 kB in the first 10 s window: ~30% over a 10 kB/s quota
    throttles = produce_counting_throttles(broker.bootstrap, topic, 130, 1000, **{"client.id": client_id})
    assert throttles and max(throttles) > 0
