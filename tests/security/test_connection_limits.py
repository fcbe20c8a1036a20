"""Hostile connections and load against a live pybroker on loopback (Kafka's ConnectionQuotas and
SocketServer): per-address limits and their overrides, the broker-wide and per-listener limits
(accepting waits for a slot; the inter-broker listener is protected), the connection creation
rate, idle expiry with real clients reconnecting, the memory bound before authentication, the
reaping of half-open and dribbling connections before authentication, the delay of a failed
authentication's answer, and all of the limits changed at run time with IncrementalAlterConfigs.

Raw sockets bind a source address of their own in 127.0.0.0/8 (127.0.0.2, 127.0.0.3, ...) so the
per-address counts are theirs alone; the real clients (confluent-kafka, kafka-python) connect from
127.0.0.1. Assertions are on counts and on what each socket sees, never on durations.
"""

from __future__ import annotations

import itertools
import re
import select
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import (
    AlterClientQuotasRequest,
    ApiVersionsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from tests.clients.adapters import (
    confluent_admin,
    confluent_consume,
    confluent_produce,
    confluent_producer,
    kafka_python_consume,
    kafka_python_producer,
)
from tests.clients.broker import BrokerProcess, BrokerStartError
from tests.clients.helpers import numbered
from tests.metrics.scrape import metrics_url_from_log, scrape, wait_for

from .raw import FrameSocket
from .test_tls_listener import ssl_conf

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
_sources = itertools.count(2)


def fresh_source() -> str:
    """A loopback source address no other test uses (127.0.0.2, 127.0.0.3, ...)."""
    n = next(_sources)
    return f"127.0.{n // 250}.{n % 250 + 2}"


class Raw(FrameSocket):
    """A blocking client socket from a chosen source address, speaking size-prefixed frames."""

    closed_errors = (ConnectionResetError, TimeoutError)

    def __init__(self, port: int, source: str = "127.0.0.1", timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
        self.correlation = 0

    def send(self, api_key: int, version: int, body: object) -> int:
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "raw", body))
        return self.correlation

    def request(self, api_key: int, version: int, body: object) -> object:
        corr = self.send(api_key, version, body)
        frame = self.read_frame()
        assert frame is not None, "connection closed instead of an answer"
        got, resp = decode_response(api_key, version, frame)
        assert got == corr
        return resp

    def api_versions(self) -> bool:
        """True when the broker answers an ApiVersions request; False when it closes instead."""
        try:
            self.send(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
        except OSError:
            return False
        return self.read_frame() is not None

    def readable_within(self, seconds: float) -> bool:
        """Has the broker sent anything (or closed) within `seconds`? (a bounded wait for an event
        that must NOT happen: used only where a positive check follows)"""
        return bool(select.select([self.sock], [], [], seconds)[0])

    def closed(self) -> bool:
        """True once the broker has closed its end without sending anything (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """``start(**overrides) -> BrokerProcess`` (stopped by PID after the test)."""
    started: list[BrokerProcess] = []

    def make(**overrides: str) -> BrokerProcess:
        node = BrokerProcess(tmp_path / f"data{len(started)}", overrides=overrides)
        started.append(node)
        try:
            node.start()
        except BrokerStartError as exc:
            pytest.fail(f"pybroker could not start:\n{exc}", pytrace=False)
        return node

    yield make
    for node in started:
        node.close()


def ports(node: BrokerProcess) -> dict[str, int]:
    text = node.output_path.read_text(errors="replace")
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"listening on (\w+)://[^\s]+:(\d+)", text)}


def until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def served_connection(port: int, source: str, timeout_s: float = 20.0) -> Raw:
    """A connection the broker serves, retried while a slot frees (closing is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        raw = Raw(port, source)
        if raw.api_versions():
            return raw
        raw.close()
        assert time.monotonic() < deadline, f"no connection from {source} was served"
        time.sleep(0.05)


def incremental_alter(node: BrokerProcess, entries: dict[str, str | None], resource: str = "") -> tuple[int, str]:
    """IncrementalAlterConfigs v1 on the BROKER resource (cluster default ""): SET, or DELETE for
    None; (error code, message). Sent from 127.0.0.1 (confluent-kafka cannot name the default)."""
    raw = Raw(node.port)
    req = IncrementalAlterConfigsRequest(validate_only=False, resources=[
        IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=4, resource_name=resource, configs=[
            IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=0 if v is not None else 1,
                                                           value=v) for k, v in entries.items()])])
    resp = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, req)
    raw.close()
    r = resp.responses[0]  # type: ignore[attr-defined]
    return r.error_code, r.error_message


def alter_broker(node: BrokerProcess, entries: dict[str, str | None], resource: str = "") -> None:
    """incremental_alter, then wait until the node describes the change as applied (its own
    BROKER resource lists the new value at the layer set, or no longer at that layer)."""
    error, message = incremental_alter(node, entries, resource)
    assert error == 0, message
    layer = 2 if resource else 3  # DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG

    def applied() -> bool:
        raw = Raw(node.port)
        req = DescribeConfigsRequest(include_synonyms=True, include_documentation=False, resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=4, resource_name=str(node.node_id),
                                                           configuration_keys=list(entries))])
        res = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, req).results[0]  # type: ignore[attr-defined]
        raw.close()
        described = {c.name: {s.source: s.value for s in c.synonyms} for c in res.configs}
        return all(described.get(k, {}).get(layer) == v for k, v in entries.items())

    until(applied, f"the broker applied {entries}")


# ------------------------------------------------------------------ per address


def test_the_connection_over_max_connections_per_ip_is_closed_and_the_slot_frees(start):
    node = start(**{"max.connections.per.ip": "3"})
    source = fresh_source()
    held = [Raw(node.port, source) for _ in range(3)]
    assert all(r.api_versions() for r in held)
    extra = Raw(node.port, source)
    assert extra.closed(), "the 4th connection from one address was not closed"
    # another address is not affected
    other = Raw(node.port, fresh_source())
    assert other.api_versions()
    # a closed connection frees its slot
    held.pop().close()
    held.append(served_connection(node.port, source))
    assert Raw(node.port, source).closed()
    for r in [*held, other, extra]:
        r.close()


def test_overrides_raise_and_lower_the_limit_per_address(start):
    vip, banned, plain = fresh_source(), fresh_source(), fresh_source()
    node = start(**{"max.connections.per.ip": "1",
                    "max.connections.per.ip.overrides": f"127.0.0.1:100,{vip}:4,{banned}:0"})
    held = [Raw(node.port, vip) for _ in range(4)]
    assert all(r.api_versions() for r in held)
    assert Raw(node.port, vip).closed()
    assert Raw(node.port, banned).closed()
    one = Raw(node.port, plain)
    assert one.api_versions()
    assert Raw(node.port, plain).closed()
    # real clients from 127.0.0.1 (override 100) are unaffected
    admin = confluent_admin(node.bootstrap)
    assert admin.list_topics(timeout=15).brokers


def test_zero_per_ip_needs_overrides_as_in_kafka(start, tmp_path):
    node = BrokerProcess(tmp_path / "bad", overrides={"max.connections.per.ip": "0"})
    with pytest.raises(BrokerStartError, match="max.connections.per.ip can be set to zero only if"):
        node.start()
    node.close()
    vip = fresh_source()
    node = start(**{"max.connections.per.ip": "0", "max.connections.per.ip.overrides": f"127.0.0.1:50,{vip}:2"})
    held = [Raw(node.port, vip) for _ in range(2)]
    assert all(r.api_versions() for r in held)
    assert Raw(node.port, vip).closed()
    assert Raw(node.port, fresh_source()).closed()


# ------------------------------------------------------------------ broker-wide and per listener


def test_max_connections_makes_accepting_wait_until_a_slot_frees(start):
    node = start(**{"max.connections": "3"})
    held = [Raw(node.port, fresh_source()) for _ in range(3)]
    assert all(r.api_versions() for r in held)
    waiting = Raw(node.port, fresh_source())  # the kernel completes the handshake; pybroker waits
    waiting.send(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
    assert not waiting.readable_within(1.0), "a connection over max.connections was served or closed"
    held.pop().close()
    assert waiting.read_frame() is not None, "the waiting connection was not served once a slot freed"


TWO_LISTENERS = {"listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
                 "inter.broker.listener.name": "PLAINTEXT"}


def test_the_inter_broker_listener_is_protected_from_max_connections(start):
    """max.connections=2 with two listeners: EXTERNAL fills the broker; the inter-broker listener
    (PLAINTEXT) still accepts, and an EXTERNAL connection is closed to make room, as Kafka's
    closeExcessConnections does."""
    node = start(**TWO_LISTENERS, **{"max.connections": "2"})
    p = ports(node)
    old = Raw(p["EXTERNAL"], fresh_source())
    assert old.api_versions()
    recent = Raw(p["EXTERNAL"], fresh_source())
    assert recent.api_versions()
    inter = Raw(p["PLAINTEXT"], fresh_source())
    assert inter.api_versions(), "the inter-broker listener did not accept over max.connections"
    # exactly one EXTERNAL connection is closed
    until(lambda: sum(not r.api_versions() for r in (old, recent)) == 1, "one EXTERNAL connection closed")
    for r in (old, recent, inter):
        r.close()


def test_listener_max_connections_holds_that_listener_alone(start):
    node = start(**TWO_LISTENERS, **{"listener.name.external.max.connections": "1"})
    p = ports(node)
    first = served_connection(p["EXTERNAL"], fresh_source())
    second = Raw(p["EXTERNAL"], fresh_source())
    second.send(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
    assert not second.readable_within(1.0), "EXTERNAL served over listener.name.external.max.connections"
    assert Raw(p["PLAINTEXT"], fresh_source()).api_versions()  # another listener is not held
    first.close()
    assert second.read_frame() is not None


# ------------------------------------------------------------------ creation rate


@pytest.mark.parametrize("key", ["max.connection.creation.rate", "listener.name.plaintext.max.connection.creation.rate"])
def test_connection_creation_rate_bounds_how_many_are_accepted(start, key):
    """10 connections/s, measured over 2 windows of 1 s: of 100 connections opened at once, the
    broker serves at most ~10 per second of a 2 s observation (40 allows for the first window's
    burst and a slow machine), and at least the first few."""
    node = start(**{key: "10", "quota.window.num": "2", "quota.window.size.seconds": "1"})
    source = fresh_source()
    socks = [Raw(node.port, source) for _ in range(100)]
    for r in socks:
        r.send(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
    deadline = time.monotonic() + 2.0
    answered: set[int] = set()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([r.sock for r in socks if id(r.sock) not in answered], [], [],
                                    max(0.0, deadline - time.monotonic()))
        answered.update(id(s) for s in ready)
    assert 5 <= len(answered) <= 40, f"{len(answered)} of 100 connections served within 2 s at 10/s"
    # the rest are served later, not refused
    for r in socks[:len(answered) + 5]:
        assert r.read_frame() is not None
    for r in socks:
        r.close()


def test_without_a_rate_every_connection_is_served_at_once(start):
    """The control for the test above: the same 100 connections, no rate, all served."""
    node = start()
    source = fresh_source()
    socks = [Raw(node.port, source) for _ in range(100)]
    for r in socks:
        r.send(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
    assert all(r.read_frame() is not None for r in socks)
    for r in socks:
        r.close()


def test_connection_creation_rate_quota_of_an_ip_entity(start):
    """KIP-612: AlterClientQuotas ip=<address> connection_creation_rate=5 (2 windows of 1 s): of
    40 connections opened at once from that address, those over the rate are held and closed
    unanswered; another address is not affected."""
    node = start(**{"quota.window.num": "2", "quota.window.size.seconds": "1"})
    limited, probe = fresh_source(), fresh_source()
    raw = Raw(node.port)
    Entry, Entity, Op = (AlterClientQuotasRequest.EntryData, AlterClientQuotasRequest.EntityData,
                         AlterClientQuotasRequest.OpData)
    resp = raw.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, AlterClientQuotasRequest(validate_only=False, entries=[
        Entry(entity=[Entity(entity_type="ip", entity_name=ip)],
              ops=[Op(key="connection_creation_rate", value=rate, remove=False)])
        for ip, rate in ((limited, 5.0), (probe, 1.0))]))
    raw.close()
    assert [e.error_code for e in resp.entries] == [0, 0]  # type: ignore[attr-defined]
    until(lambda: not Raw(node.port, probe).api_versions(), "the ip quotas applied")  # 1/s: soon one is closed
    socks = [Raw(node.port, limited) for _ in range(40)]
    for r in socks:
        r.send(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
    outcomes = [r.read_frame() is not None for r in socks]  # answered, or closed unanswered
    assert 1 <= sum(outcomes) <= 15, f"{sum(outcomes)} of 40 served at 5/s"
    others = [Raw(node.port, fresh_source()) for _ in range(20)]
    assert all(r.api_versions() for r in others)
    for r in [*socks, *others]:
        r.close()


# ------------------------------------------------------------------ dynamic changes and metrics


def connection_count(url: str, listener: str) -> float:
    return scrape(url).value("kafka_server_socket_server_metrics_connection_count", listener=listener,
                             networkProcessor="0")


def test_limits_change_at_run_time_and_show_in_metrics(start):
    """Every limit set and removed with IncrementalAlterConfigs, sent on the inter-broker listener
    (PLAINTEXT: protected from max.connections, and with its own listener limit of 100, since a
    listener's limit is max.connections unless listener.name.<l>.max.connections says otherwise),
    tried on EXTERNAL."""
    node = start(**TWO_LISTENERS, **{"metrics.listener": "http://127.0.0.1:0",
                                     "listener.name.plaintext.max.connections": "100"})
    url = metrics_url_from_log(node.output_path)
    ext = ports(node)["EXTERNAL"]
    source = fresh_source()
    alter_broker(node, {"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "127.0.0.1:1000"})
    held = [Raw(ext, source) for _ in range(2)]
    assert all(r.api_versions() for r in held)
    assert Raw(ext, source).closed()
    # a per-broker value overrides the cluster default
    alter_broker(node, {"max.connections.per.ip": "3"}, resource="1")
    held.append(Raw(ext, source))
    assert held[-1].api_versions()
    assert Raw(ext, source).closed()
    alter_broker(node, {"max.connections.per.ip": None}, resource="1")
    alter_broker(node, {"max.connections.per.ip": None, "max.connections.per.ip.overrides": None})
    # max.connections lowered under what is open: the excess connections of the unprotected
    # listener are closed (Kafka's closeExcessConnections), and accepting there waits
    inter = [Raw(node.port, fresh_source()) for _ in range(2)]
    assert all(r.api_versions() for r in inter)
    alter_broker(node, {"max.connections": "2"})
    until(lambda: connection_count(url, "EXTERNAL") == 0, "the EXTERNAL connections closed")
    assert all(r.closed() for r in held)
    waiting = Raw(ext, fresh_source())
    waiting.send(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
    assert not waiting.readable_within(1.0), "served over max.connections"
    assert all(r.api_versions() for r in inter)  # the inter-broker listener goes on
    alter_broker(node, {"max.connections": None})
    assert waiting.read_frame() is not None, "not served once max.connections was raised"
    # per listener: listener.name.external.max.connections=1 holds EXTERNAL at the waiting one
    alter_broker(node, {"listener.name.external.max.connections": "1"})
    blocked = Raw(ext, fresh_source())
    blocked.send(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
    assert not blocked.readable_within(1.0), "served over listener.name.external.max.connections"
    waiting.close()
    assert blocked.read_frame() is not None
    alter_broker(node, {"listener.name.external.max.connections": None})
    for r in [blocked, *inter]:
        r.close()
    s = scrape(url)
    assert s.value("kafka_server_socket_server_metrics_connection_creation_total", listener="EXTERNAL",
                   networkProcessor="0") >= 5
    assert s.value("kafka_server_socket_server_metrics_connection_close_total", listener="EXTERNAL",
                   networkProcessor="0") >= 4
    assert s.value("kafka_network_acceptor_acceptorblocked_percent", listener="EXTERNAL") > 0
    assert s.value("kafka_network_acceptor_acceptorblocked_percent", listener="PLAINTEXT") == 0
    assert s.value("kafka_server_socket_server_metrics_connection_accept_rate", listener="EXTERNAL") > 0


def test_bad_dynamic_values_are_refused(start):
    node = start()
    for key, value, text in (("max.connections.per.ip.overrides", "127.0.0.1:x", "Error parsing configuration"),
                             ("max.connections.per.ip.overrides", "bad/host:3", "contains invalid addresses"),
                             ("max.connections.per.ip", "0", "can be set to zero only if"),
                             ("max.connections", "-1", "Value must be at least 0"),
                             ("max.connection.creation.rate", "-5", "Value must be at least 0"),
                             ("listener.name.plaintext.max.connections", "-2", "Value must be at least 0")):
        error, message = incremental_alter(node, {key: value})
        assert error == 42 and text in (message or ""), (key, error, message)  # INVALID_REQUEST
    assert Raw(node.port, fresh_source()).api_versions()


# ------------------------------------------------------------------ idle connections and real clients


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_a_client_whose_connections_were_idle_closed_reconnects(start, client):
    node = start(**{"connections.max.idle.ms": "1500", "metrics.listener": "http://127.0.0.1:0"})
    url = metrics_url_from_log(node.output_path)
    topic = f"idle-{uuid.uuid4().hex[:8]}"
    admin = confluent_admin(node.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    del admin
    first, second = numbered(5, prefix=b"a"), numbered(5, prefix=b"b")
    if client == "confluent":
        producer = confluent_producer(node.bootstrap)

        def send(recs: list) -> None:
            for r in recs:
                producer.produce(topic, key=r.key, value=r.value, partition=0)
            assert producer.flush(30) == 0
    else:
        producer = kafka_python_producer(node.bootstrap)

        def send(recs: list) -> None:
            for r in recs:
                producer.send(topic, key=r.key, value=r.value, partition=0).get(30)
    send(first)
    created = scrape(url).total("kafka_server_socket_server_metrics_connection_creation_total")
    # every connection that existed then is closed by the broker for idleness
    wait_for(url, lambda s: s.total("kafka_server_socket_server_metrics_connection_close_total") >= created,
             timeout_s=30, what="the idle connections closed")
    send(second)  # the same producer, over new connections
    if client == "kafka-python":
        producer.close()
    if client == "confluent":
        got = confluent_consume(node.bootstrap, topic, count=10)
    else:
        got = kafka_python_consume(node.bootstrap, topic, count=10)
    assert [r.value for r in got] == [r.value for r in first + second]


def test_real_clients_work_under_tight_limits(start):
    """confluent-kafka and kafka-python produce and consume with 6 connections per address and
    5 new connections per second (the clients' bootstrap and broker connections fit; a burst of
    them is delayed, not refused)."""
    node = start(**{"max.connections.per.ip": "6", "max.connection.creation.rate": "5",
                    "quota.window.num": "2", "quota.window.size.seconds": "1"})
    topic = f"limits-{uuid.uuid4().hex[:8]}"
    admin = confluent_admin(node.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    del admin
    recs = numbered(10, prefix=b"c")
    producer = confluent_producer(node.bootstrap)
    for r in recs[:5]:
        producer.produce(topic, key=r.key, value=r.value, partition=0)
    assert producer.flush(30) == 0
    del producer
    kp = kafka_python_producer(node.bootstrap)
    for r in recs[5:]:
        kp.send(topic, key=r.key, value=r.value, partition=0).get(30)
    kp.close()
    assert [r.value for r in confluent_consume(node.bootstrap, topic, count=10)] == [r.value for r in recs]
    assert [r.value for r in kafka_python_consume(node.bootstrap, topic, count=10)] == [r.value for r in recs]


def test_a_talking_connection_is_not_idle(start):
    node = start(**{"connections.max.idle.ms": "1000"})
    raw = Raw(node.port, fresh_source())
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # 3 idle times of requests every 200 ms
        assert raw.request(ApiKey.METADATA, 4, MetadataRequest(topics=[], allow_auto_topic_creation=False))
        time.sleep(0.2)
    assert raw.closed(), "the connection was not closed once it went quiet"


# ------------------------------------------------------------------ before authentication

SASL_LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_huge_frames_before_authentication_are_refused_without_allocating(start):
    """50 connections announce 2 GiB - 1 (and 2 GiB, negative as an int32) frames on the SASL
    listener before authenticating, and 200 more announce 500 KB and send one byte: each
    announcement over sasl.server.max.receive.size is closed; the broker's RSS grows by far less
    than one such frame, and by less than a third of what the 200 announcements would take
    (memory follows the bytes received). On the PLAINTEXT listener, over socket.request.max.bytes
    closes too."""
    node = start(**SASL_LISTENERS)
    p = ports(node)
    assert node.pid is not None
    Raw(p["SASL_PLAINTEXT"]).api_versions()  # warm up the listener's code paths
    before = rss_kib(node.pid)
    huge = []
    for i in range(50):
        raw = Raw(p["SASL_PLAINTEXT"], fresh_source() if i == 0 else "127.0.0.1")
        raw.sock.sendall(struct.pack(">I", 0x7FFFFFFF if i % 2 else 0x80000000) + b"\0" * 1024)
        huge.append(raw)
    assert all(r.closed() for r in huge), "a 2 GiB announcement was not closed"
    small = []
    for _ in range(200):  # under the limit: memory follows the bytes that arrive, not the announcement
        raw = Raw(p["SASL_PLAINTEXT"])
        raw.sock.sendall(struct.pack(">i", 500_000) + b"\0")
        small.append(raw)
    plain = Raw(p["PLAINTEXT"])
    plain.sock.sendall(struct.pack(">i", 0x7FFFFFFF) + b"\0" * 64)
    assert plain.closed()
    grown_kib = rss_kib(node.pid) - before
    assert grown_kib < 32 * 1024, f"RSS grew by {grown_kib} KiB"
    for r in [*huge, *small, plain]:
        r.close()


def test_half_open_and_dribbling_connections_are_reaped_before_authentication(start):
    """connections.max.idle.ms=2000: a connection that says nothing, one that sends half a
    request header and stops, and one that dribbles a SaslHandshake a byte every 200 ms (active,
    so idle expiry alone would keep it) are all closed; a real client still logs in."""
    node = start(**SASL_LISTENERS, **{"connections.max.idle.ms": "2000"})
    port = ports(node)["SASL_PLAINTEXT"]
    silent = Raw(port, fresh_source(), timeout=30)
    half = Raw(port, fresh_source(), timeout=30)
    half.sock.sendall(struct.pack(">i", 40) + b"\x00\x11")
    dribbler = Raw(port, fresh_source(), timeout=30)
    frame = encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "raw", SaslHandshakeRequest(mechanism="PLAIN"))
    frame = frame[:4] + b"".join([frame[4:]] * 100)  # longer than the exchange may last
    closed_dribbler = False
    give_up = time.monotonic() + 20  # 10x the bound
    for byte in frame:
        if time.monotonic() > give_up:
            break
        try:
            dribbler.sock.sendall(bytes([byte]))
        except OSError:
            closed_dribbler = True
            break
        if dribbler.readable_within(0.2):
            closed_dribbler = dribbler.closed()
            break
    assert closed_dribbler, "a dribbling unauthenticated connection was never closed"
    assert silent.closed() and half.closed()
    admin_ok = Raw(port, fresh_source())
    admin_ok.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    resp = admin_ok.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
    assert resp.error_code == 0  # type: ignore[attr-defined]


def test_failed_authentication_delay_holds_only_that_connection(start):
    """connection.failed.authentication.delay.ms=5000: a wrong password's answer and close wait
    5 s; meanwhile another connection logs in and is served, and the failed one has seen nothing."""
    node = start(**SASL_LISTENERS, **{"connection.failed.authentication.delay.ms": "5000"})
    port = ports(node)["SASL_PLAINTEXT"]
    bad = Raw(port, fresh_source())
    bad.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    bad.send(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong"))
    good = Raw(port, fresh_source())
    good.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    ok = good.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
    assert ok.error_code == 0  # type: ignore[attr-defined]
    meta = good.request(ApiKey.METADATA, 4, MetadataRequest(topics=[], allow_auto_topic_creation=False))
    assert meta.brokers  # type: ignore[attr-defined]
    assert not bad.readable_within(0), "the failed authentication was answered before the delay"
    frame = bad.read_frame()
    assert frame is not None
    _, failed = decode_response(ApiKey.SASL_AUTHENTICATE, 2, frame)
    assert failed.error_code == 58
    assert bad.closed()


def test_failed_authentication_delay_must_be_below_the_idle_time(tmp_path):
    node = BrokerProcess(tmp_path / "bad", overrides={"connection.failed.authentication.delay.ms": "5000",
                                                      "connections.max.idle.ms": "1000"})
    with pytest.raises(BrokerStartError, match="should always be less than connections.max.idle.ms"):
        node.start()
    node.close()


def client_hello() -> bytes:
    """A real TLS ClientHello (what ssl's client side writes first)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_tls_handshakes_dribbled_or_stopped_half_way_are_reaped(tls_broker_factory, pki):
    """connections.max.idle.ms=2000 on an SSL listener: a ClientHello sent a byte every 200 ms
    (active, so idle expiry alone would keep it, as Kafka would), and a ClientHello followed by
    silence, are both closed; a real client is served meanwhile and after."""
    b = tls_broker_factory(**{"connections.max.idle.ms": "2000"})
    port = int(b.ssl.rsplit(":", 1)[1])
    hello = client_hello()
    stopped = Raw(port, fresh_source(), timeout=30)
    stopped.sock.sendall(hello)  # the server answers with its flight, then waits for ours forever
    dribbler = Raw(port, fresh_source(), timeout=30)
    closed = False
    give_up = time.monotonic() + 20  # 10x the bound
    for byte in hello * 10:  # far longer than the handshake may last
        if time.monotonic() > give_up:
            break
        try:
            dribbler.sock.sendall(bytes([byte]))
        except OSError:
            closed = True
            break
        if dribbler.readable_within(0.2):
            closed = dribbler.closed()
            break
    assert closed, "a dribbled ClientHello kept its connection"
    deadline = time.monotonic() + 30
    while True:  # the server's flight arrives first; then EOF
        try:
            data = stopped.sock.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
        assert time.monotonic() < deadline, "a handshake stopped half way was kept"
    assert confluent_produce(b.ssl, "after-dribblers", numbered(2), **ssl_conf(pki)) == [0, 1]
