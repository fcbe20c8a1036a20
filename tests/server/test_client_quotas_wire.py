"""DescribeClientQuotas (48) / AlterClientQuotas (49) on the wire (KIP-546), and the
byte-rate quotas they configure (KIP-13, throttling as KIP-219).

Pins Kafka's rules and messages (ClientQuotaControlManager, ClientQuotasImage.describe),
that quotas live in the metadata log (a restart keeps them, and keeps enforcing them),
Kafka's throttle time X = (O - T) / T * W for a client's first request (W = 10 s: 11
samples of 1 s, never less than 10 whole windows), and that a throttled connection reads
no further request until the throttle time has passed.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.controller.client_quotas import java_hash_order
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import (
    AlterClientQuotasRequest,
    ApiVersionsRequest,
    CreateTopicsRequest,
    DescribeClientQuotasRequest,
    FetchRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

Entry = AlterClientQuotasRequest.EntryData
Entity = AlterClientQuotasRequest.EntityData
Op = AlterClientQuotasRequest.OpData
Component = DescribeClientQuotasRequest.ComponentData
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
REMOVE = object()


def entry(entity: dict, ops: dict) -> Entry:
    return Entry(entity=[Entity(entity_type=t, entity_name=n) for t, n in entity.items()],
                 ops=[Op(key=k, value=0.0, remove=True) if v is REMOVE else Op(key=k, value=float(v), remove=False)
                      for k, v in ops.items()])


def alter(wire: WireClient, *entries: Entry, validate_only: bool = False, version: int = 1) -> list:
    resp = wire.request(ApiKey.ALTER_CLIENT_QUOTAS, version,
                        AlterClientQuotasRequest(entries=list(entries), validate_only=validate_only))
    return [(dict((e.entity_type, e.entity_name) for e in r.entity), r.error_code, r.error_message)
            for r in resp.entries]


def describe(wire: WireClient, *components: tuple, strict: bool = False, version: int = 1):
    return wire.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, DescribeClientQuotasRequest(
        components=[Component(entity_type=t, match_type=mt, match=m) for t, mt, m in components], strict=strict))


def as_dict(resp) -> dict:
    assert resp.error_code == 0, resp.error_message
    return {frozenset((e.entity_type, e.entity_name) for e in x.entity): {v.key: v.value for v in x.values}
            for x in resp.entries}


def ent(**kw) -> frozenset:
    return frozenset((k.replace("_", "-"), v) for k, v in kw.items())


def ok(wire: WireClient, entity: dict, ops: dict) -> None:
    assert alter(wire, entry(entity, ops)) == [(entity, 0, None)]


# ------------------------------------------------------------------ alter / describe rules

@pytest.mark.parametrize("keys, java_order", [
    # printed by java.util.HashMap(keys.length).keySet() on OpenJDK
    (["producer_byte_rate", "consumer_byte_rate"], ["consumer_byte_rate", "producer_byte_rate"]),
    (["user", "client-id"], ["client-id", "user"]),
    (["ip", "user", "client-id"], ["client-id", "user", "ip"]),
    (["group", "user"], ["user", "group"]),
    (["request_percentage", "producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate", "x"],
     ["x", "producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate", "request_percentage"]),
])
def test_java_hash_order_matches_javas_hashmap(keys, java_order):
    assert java_hash_order(keys, len(keys)) == java_order


def test_set_describe_and_remove_a_user_quota(wire):
    ok(wire, {"user": "alice"}, {"producer_byte_rate": 222222, "consumer_byte_rate": 333333})
    got = as_dict(describe(wire, ("user", EXACT, "alice")))
    assert got == {ent(user="alice"): {"producer_byte_rate": 222222.0, "consumer_byte_rate": 333333.0}}
    ok(wire, {"user": "alice"}, {"producer_byte_rate": REMOVE})
    assert as_dict(describe(wire, ("user", EXACT, "alice"))) == {ent(user="alice"): {"consumer_byte_rate": 333333.0}}
    ok(wire, {"user": "alice"}, {"consumer_byte_rate": REMOVE, "request_percentage": REMOVE})
    assert as_dict(describe(wire, ("user", EXACT, "alice"))) == {}


def test_validate_only_checks_but_writes_nothing(wire):
    assert alter(wire, entry({"user": "vo"}, {"producer_byte_rate": 1000}), validate_only=True) == [
        ({"user": "vo"}, 0, None)]
    assert as_dict(describe(wire, ("user", EXACT, "vo"))) == {}
    assert alter(wire, entry({"user": "vo"}, {"producer_byte_rate": 1.5}), validate_only=True) == [
        ({"user": "vo"}, Errors.INVALID_REQUEST, "producer_byte_rate cannot be a fractional value.")]


def test_v0_speaks_the_same_rules(wire):
    assert alter(wire, entry({"client-id": "v0"}, {"consumer_byte_rate": 5}), version=0) == [
        ({"client-id": "v0"}, 0, None)]
    assert as_dict(describe(wire, ("client-id", EXACT, "v0"), version=0)) == {
        ent(client_id="v0"): {"consumer_byte_rate": 5.0}}


@pytest.mark.parametrize("entity, ops, message", [
    ({"group": "g"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
    ({"user": ""}, {"producer_byte_rate": 1}, "Empty user not supported"),
    ({"client-id": ""}, {"producer_byte_rate": 1}, "Empty client-id not supported"),
    ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
    ({"ip": "1.2.3.4", "user": "u"}, {"producer_byte_rate": 1},
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ({"ip": "no such host.invalid"}, {"connection_creation_rate": 1},
     "no such host.invalid is not a valid IP or resolvable host."),
    ({"user": "u"}, {"connection_creation_rate": 1}, "Invalid configuration key connection_creation_rate"),
    ({"ip": "1.2.3.4"}, {"producer_byte_rate": 1}, "Invalid configuration key producer_byte_rate"),
    ({"user": "u"}, {"no_such_quota": 1}, "Invalid configuration key no_such_quota"),
    ({"user": "u"}, {"producer_byte_rate": 0}, "Quota producer_byte_rate must be greater than 0"),
    ({"client-id": "c"}, {"request_percentage": -1.5}, "Quota request_percentage must be greater than 0"),
    ({"user": "u"}, {"consumer_byte_rate": 10.25}, "consumer_byte_rate cannot be a fractional value."),
    ({"user": "u"}, {"producer_byte_rate": 1e19}, "Proposed value for producer_byte_rate is too large for a LONG."),
    ({"ip": None}, {"connection_creation_rate": 3e9},
     "Proposed value for connection_creation_rate is too large for an INT."),
    ({"ip": "10.0.0.1"}, {"connection_creation_rate": 2.5}, "connection_creation_rate cannot be a fractional value."),
    # several faults: the first in Kafka's HashMap iteration order is reported
    ({"user": "", "client-id": ""}, {"producer_byte_rate": 1}, "Empty client-id not supported"),
    ({"user": "u"}, {"producer_byte_rate": 0, "consumer_byte_rate": 0}, "Quota consumer_byte_rate must be greater than 0"),
])
def test_invalid_alterations_answer_invalid_request_with_kafkas_message(wire, entity, ops, message):
    before = as_dict(describe(wire))
    assert alter(wire, entry(entity, ops)) == [(entity, Errors.INVALID_REQUEST, message)]
    assert as_dict(describe(wire)) == before


def test_one_bad_op_fails_the_whole_entity_but_not_the_others(wire):
    res = alter(wire, entry({"user": "mixed"}, {"producer_byte_rate": 100, "consumer_byte_rate": 0.5}),
                entry({"user": "fine"}, {"producer_byte_rate": 100}))
    assert res == [({"user": "mixed"}, Errors.INVALID_REQUEST, "consumer_byte_rate cannot be a fractional value."),
                   ({"user": "fine"}, 0, None)]
    got = as_dict(describe(wire, ("user", SPECIFIED, None)))
    assert ent(user="mixed") not in got and got[ent(user="fine")] == {"producer_byte_rate": 100.0}


def test_double_valued_keys_take_fractions(wire):
    ok(wire, {"user": "frac", "client-id": "c"}, {"request_percentage": 12.5, "controller_mutation_rate": 0.5})
    assert as_dict(describe(wire, ("user", EXACT, "frac"), ("client-id", EXACT, "c"), strict=True)) == {
        ent(user="frac", client_id="c"): {"request_percentage": 12.5, "controller_mutation_rate": 0.5}}


def test_duplicate_key_or_entity_is_ignored_with_kafkas_message(wire):
    dup_key = Entry(entity=[Entity(entity_type="user", entity_name="dk")],
                    ops=[Op(key="producer_byte_rate", value=1.0), Op(key="producer_byte_rate", value=2.0)])
    assert alter(wire, dup_key) == [({"user": "dk"}, Errors.INVALID_REQUEST,
                                     "Ignoring duplicate entity ClientQuotaEntity(entries={user=dk})")]
    # the second naming fails; the first one was valid and is written, as in Kafka
    res = alter(wire, entry({"client-id": "de", "user": None}, {"producer_byte_rate": 7}),
                entry({"user": None, "client-id": "de"}, {"producer_byte_rate": 8}))
    assert res == [({"client-id": "de", "user": None}, Errors.INVALID_REQUEST,
                    "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=de, user=null})")]
    assert as_dict(describe(wire, ("client-id", EXACT, "de"))) == {
        ent(user=None, client_id="de"): {"producer_byte_rate": 7.0}}
    assert as_dict(describe(wire, ("user", EXACT, "dk"))) == {}


def test_ip_entities_take_connection_creation_rate(wire):
    ok(wire, {"ip": "192.168.7.7"}, {"connection_creation_rate": 40})
    ok(wire, {"ip": "localhost"}, {"connection_creation_rate": 41})
    ok(wire, {"ip": None}, {"connection_creation_rate": 30})
    got = as_dict(describe(wire, ("ip", SPECIFIED, None)))
    assert got[ent(ip="192.168.7.7")] == {"connection_creation_rate": 40.0}
    assert got[ent(ip="localhost")] == {"connection_creation_rate": 41.0}
    assert as_dict(describe(wire, ("ip", DEFAULT, None))) == {ent(ip=None): {"connection_creation_rate": 30.0}}


@pytest.mark.parametrize("components, code, message", [
    ([("", EXACT, "x")], Errors.INVALID_REQUEST, "Invalid empty entity type."),
    ([("user", EXACT, "a"), ("user", SPECIFIED, None)], Errors.INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ([("group", SPECIFIED, None)], Errors.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("user", EXACT, None)], Errors.INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", DEFAULT, "a")], Errors.INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", SPECIFIED, "a")], Errors.INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], Errors.INVALID_REQUEST, "Unknown match type 7"),
    ([("ip", SPECIFIED, None), ("client-id", EXACT, "c")], Errors.INVALID_REQUEST,
     "Invalid entity filter component combination. IP filter component should not be used with "
     "user or clientId filter component."),
])
def test_rejected_filters_answer_an_error_and_no_entries(wire, components, code, message):
    resp = describe(wire, *components)
    assert (resp.error_code, resp.error_message, resp.entries) == (code, message, None)


def test_filter_semantics_exact_default_specified_and_strict():
    with EmbeddedBroker() as b:
        w = WireClient("127.0.0.1", b.port)
        try:
            for entity in ({"user": "a"}, {"user": None}, {"user": "a", "client-id": "c"},
                           {"user": None, "client-id": "c"}, {"client-id": "c"}, {"client-id": None}):
                ok(w, entity, {"producer_byte_rate": 100})
            ok(w, {"ip": "1.2.3.4"}, {"connection_creation_rate": 5})

            def names(*components, strict=False):
                return set(as_dict(describe(w, *components, strict=strict)))

            a, da = ent(user="a"), ent(user=None)
            ac, dac = ent(user="a", client_id="c"), ent(user=None, client_id="c")
            c, dc, ip = ent(client_id="c"), ent(client_id=None), ent(ip="1.2.3.4")
            assert names() == {a, da, ac, dac, c, dc, ip}
            assert names(strict=True) == set()
            assert names(("user", EXACT, "a")) == {a, ac}
            assert names(("user", EXACT, "a"), strict=True) == {a}
            assert names(("user", DEFAULT, None)) == {da, dac}
            assert names(("user", SPECIFIED, None)) == {a, da, ac, dac}
            assert names(("user", SPECIFIED, None), strict=True) == {a, da}
            assert names(("client-id", EXACT, "c"), ("user", SPECIFIED, None)) == {ac, dac}
            assert names(("client-id", DEFAULT, None), strict=True) == {dc}
            assert names(("user", EXACT, "nobody")) == set()
            assert names(("ip", SPECIFIED, None)) == {ip}
        finally:
            w.close()


# a small domain so that sequences hit the same entities and keys again
_entities = st.sampled_from([{"user": "p"}, {"user": None}, {"client-id": "q"}, {"user": "p", "client-id": "q"},
                             {"client-id": None, "user": None}])
_ops = st.dictionaries(st.sampled_from(["producer_byte_rate", "consumer_byte_rate", "request_percentage"]),
                       st.one_of(st.just(REMOVE), st.integers(1, 10**9), st.integers(-3, 0),
                                 st.floats(0.1, 1000, allow_nan=False)), min_size=1, max_size=3)


def _valid(key, value) -> bool:
    if value is REMOVE:
        return True
    if value <= 0:
        return False
    return key == "request_percentage" or math.fmod(value, 1.0) <= 1e-6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_entities, _ops, st.booleans()), min_size=1, max_size=6))
def test_describe_after_any_alterations_matches_a_model(wire, steps):
    # start from no user/client-id quotas
    for e in as_dict(describe(wire, ("user", SPECIFIED, None))) | as_dict(describe(wire, ("client-id", SPECIFIED, None))):
        current = as_dict(describe(wire, *[(t, EXACT, n) if n is not None else (t, DEFAULT, None) for t, n in e],
                                   strict=True))[e]
        ok(wire, dict(e), dict.fromkeys(current, REMOVE))
    model: dict[frozenset, dict[str, float]] = {}
    for entity, ops, validate_only in steps:
        res = alter(wire, entry(entity, ops), validate_only=validate_only)
        valid = all(_valid(k, v) for k, v in ops.items())
        assert res[0][1] == (0 if valid else Errors.INVALID_REQUEST)
        if valid and not validate_only:
            values = model.setdefault(frozenset(entity.items()), {})
            for k, v in ops.items():
                if v is REMOVE:
                    values.pop(k, None)
                else:
                    values[k] = float(v)
            model = {e: v for e, v in model.items() if v}
    got = as_dict(describe(wire, ("user", SPECIFIED, None))) | as_dict(describe(wire, ("client-id", SPECIFIED, None)))
    assert got == model


# ------------------------------------------------------------------ persistence

def test_quotas_survive_a_restart_and_are_still_enforced(tmp_path: Path):
    log_dir = str(tmp_path / "data")
    with EmbeddedBroker(log_dir=log_dir) as b:
        w = WireClient("127.0.0.1", b.port)
        ok(w, {"user": "kept"}, {"producer_byte_rate": 4096})
        ok(w, {"client-id": "slow"}, {"producer_byte_rate": 2000})
        ok(w, {"ip": None}, {"connection_creation_rate": 9})
        ok(w, {"user": "gone"}, {"consumer_byte_rate": 1})
        ok(w, {"user": "gone"}, {"consumer_byte_rate": REMOVE})
        want = as_dict(describe(w))
        w.close()
    assert ent(user="gone") not in want and len(want) == 3
    with EmbeddedBroker(log_dir=log_dir) as b:
        w = WireClient("127.0.0.1", b.port)
        try:
            assert as_dict(describe(w)) == want
            topic = new_topic(w)
            size, throttle = produce_timed(w, topic, "slow", 23000)
            assert throttle == expected_throttle_ms(size, 2000)
        finally:
            w.close()


# ------------------------------------------------------------------ enforcement

_n = [0]


def new_topic(w: WireClient) -> str:
    _n[0] += 1
    name = f"quota-{_n[0]}"
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1,
                                                                         replication_factor=1)])
    assert w.request(ApiKey.CREATE_TOPICS, 7, req).topics[0].error_code == 0
    return name


def produce_request(topic: str, payload_bytes: int) -> ProduceRequest:
    batch = build_batch([(int(time.time() * 1000), None, b"x" * payload_bytes, [])])
    return ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])


def produce_timed(w: WireClient, topic: str, client_id: str, payload_bytes: int) -> tuple[int, int]:
    """Produce once as client_id; returns (request size as Kafka counts it, throttle_time_ms)."""
    req = produce_request(topic, payload_bytes)
    size = len(encode_request(ApiKey.PRODUCE, 9, 1, client_id, req)) - 4
    w.send(ApiKey.PRODUCE, 9, req, client_id=client_id)
    _, resp = w.receive(ApiKey.PRODUCE, 9)
    assert resp.responses[0].partition_responses[0].error_code == 0
    return size, resp.throttle_time_ms


def expected_throttle_ms(size: int, quota: float) -> int:
    # a fresh sensor: one sample, so W = 10 whole windows of 1 s = 10000 ms
    observed = size / 10.0
    return 0 if observed <= quota else math.floor((observed - quota) / quota * 10000 + 0.5)


def test_producer_over_its_byte_rate_is_throttled_and_its_connection_muted():
    with EmbeddedBroker() as b:
        w = WireClient("127.0.0.1", b.port)
        other = WireClient("127.0.0.1", b.port)
        try:
            topic = new_topic(w)
            ok(w, {"client-id": "slow-producer"}, {"producer_byte_rate": 2000})
            size, throttle = produce_timed(w, topic, "slow-producer", 23000)
            assert throttle == expected_throttle_ms(size, 2000) > 500
            # muted: the next request is not read until the throttle time has passed
            start = time.monotonic()
            w.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                 client_software_version="1"))
            waited = time.monotonic() - start
            assert waited >= 0.8 * throttle / 1000
            # another connection (another client-id) is neither throttled nor muted
            assert produce_timed(other, topic, "fast-producer", 23000)[1] == 0
        finally:
            w.close()
            other.close()


def test_the_default_client_id_quota_applies_to_other_clients_and_specific_wins():
    with EmbeddedBroker() as b:
        w = WireClient("127.0.0.1", b.port)
        try:
            topic = new_topic(w)
            ok(w, {"client-id": None}, {"producer_byte_rate": 2000})
            ok(w, {"client-id": "vip"}, {"producer_byte_rate": 10**9})
            size, throttle = produce_timed(w, topic, "anyone", 23000)
            assert throttle == expected_throttle_ms(size, 2000) > 0
            w.close()
            w = WireClient("127.0.0.1", b.port)
            assert produce_timed(w, topic, "vip", 23000)[1] == 0
            # <user> beats <client-id>: the principal is User:ANONYMOUS on PLAINTEXT
            ok(w, {"user": "ANONYMOUS"}, {"producer_byte_rate": 10**9})
            w.close()
            w = WireClient("127.0.0.1", b.port)
            assert produce_timed(w, topic, "anyone-else", 23000)[1] == 0
        finally:
            w.close()


def test_no_quota_means_no_throttling():
    with EmbeddedBroker() as b:
        w = WireClient("127.0.0.1", b.port)
        try:
            topic = new_topic(w)
            for _ in range(20):
                assert produce_timed(w, topic, "free", 200_000)[1] == 0
            # a quota of another type or another client does not throttle this one either
            ok(w, {"client-id": "someone-else"}, {"producer_byte_rate": 1})
            ok(w, {"client-id": "free"}, {"consumer_byte_rate": 1})
            for _ in range(5):
                assert produce_timed(w, topic, "free", 200_000)[1] == 0
        finally:
            w.close()


def fetch(w: WireClient, topic: str, client_id: str):
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                           topic=topic, partitions=[FetchRequest.FetchPartition(
                               partition=0, fetch_offset=0, partition_max_bytes=1 << 22)])])
    w.send(ApiKey.FETCH, 11, req, client_id=client_id)
    return w.receive(ApiKey.FETCH, 11)[1]


def test_consumer_over_its_byte_rate_gets_an_empty_throttled_response():
    with EmbeddedBroker() as b:
        w = WireClient("127.0.0.1", b.port)
        try:
            topic = new_topic(w)
            assert produce_timed(w, topic, "loader", 6000)[1] == 0
            ok(w, {"client-id": "slow-consumer"}, {"consumer_byte_rate": 1000})
            first = fetch(w, topic, "slow-consumer")
            assert first.throttle_time_ms == 0
            assert len(bytes(first.responses[0].partitions[0].records)) > 6000
            second = fetch(w, topic, "slow-consumer")  # 12000+ bytes in 10 s > 1000 B/s
            assert second.throttle_time_ms > 0 and second.responses == []
            # the throttled bytes were unrecorded: once the mute is over the same fetch is
            # throttled about as long again (W grew by under 1 s), not ~4x longer as it would
            # be had the second fetch's bytes counted
            third = fetch(w, topic, "slow-consumer")
            assert third.responses == [] and 0 < third.throttle_time_ms <= 1.2 * second.throttle_time_ms
        finally:
            w.close()


# ------------------------------------------------------------------ precedence (no sockets)

def test_most_specific_quota_wins_in_kafkas_precedence_order():
    from pybroker.server.quota import ClientQuotaManager

    levels = [  # (user, client-id) manager keys, most specific first ("" absent, None default)
        ("u", "c"), ("u", None), ("u", ""), (None, "c"), (None, None), (None, ""), ("", "c"), ("", None)]
    overrides = {e: float(i + 1) for i, e in enumerate(levels)}
    m = ClientQuotaManager("Produce")
    for i in range(len(levels)):
        m.set_overrides(dict(list(overrides.items())[i:]))
        assert m.quota("u", "c") == float(i + 1), levels[i]
    m.set_overrides({("", None): 5.0, ("", "c"): 6.0})
    assert (m.quota("u", "c"), m.quota("u", "other"), m.quota("u", "")) == (6.0, 5.0, None)
    m.set_overrides({})
    assert m.quota("u", "c") is None and m.record_and_get_throttle_time_ms("u", "c", 1e12, 0) == 0


def test_rate_window_grows_from_ten_to_eleven_seconds_then_slides():
    from pybroker.server.quota import Rate

    r = Rate(11, 1000)
    r.record(1000.0, 0)
    assert r.window_size(0) == 10_000 and r.measure(0) == 100.0
    assert r.window_size(10_500) == 10_500  # 10 whole windows elapsed: the real span counts
    r.record(1000.0, 10_500)
    assert r.measure(10_500) == 2000.0 / 10.5
    # a sample whose last event is 11 windows old is reset (to start now): only the second
    # sample counts, over its 0.5 s plus 10 whole windows
    assert r.measure(11_000) == 1000.0 / 10.5
    assert r.measure(21_600) == 0.0
