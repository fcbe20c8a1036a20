"""Dynamic broker configs (KIP-226) and KIP-966's cluster-level min.insync.replicas on the wire.

- BROKER resources named by this node's id or "" through AlterConfigs and
  IncrementalAlterConfigs at every advertised version (validate_only included), with
  Kafka's errors for read-only keys, bad values, other node ids, per-broker-only keys at the
  default level and the ELR min.insync.replicas rules.
- DescribeConfigs sources and synonyms for broker and topic configs across the four broker
  layers; the cluster-wide layer lists only what is set there.
- The values take effect: a cluster default log.retention.ms / log.segment.bytes on a topic
  without an override, a topic override winning, and they survive a restart.
- A fresh node finalizes eligible.leader.replicas.version 1 and writes the cluster-level
  min.insync.replicas (the static value), which every topic reports as a dynamic default.
"""

from __future__ import annotations

import time

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterConfigsRequest,
    CreateTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from pybroker.server.api_versions import SUPPORTED
from pybroker.testing import EmbeddedBroker

from .test_features_wire import finalized, update
from .test_live_versions import produce
from .test_retention_live import earliest
from .wire import WireClient

BROKER, TOPIC = 4, 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DYN_TOPIC, DYN_BROKER, DYN_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5
ELR = "eligible.leader.replicas.version"


def versions(api):
    lo, hi = SUPPORTED[api]
    return list(range(lo, hi + 1))


@pytest.fixture
def node(tmp_path):
    b = EmbeddedBroker(log_dir=str(tmp_path / "data")).start()
    w = WireClient("127.0.0.1", b.port)
    yield b, w
    w.close()
    b.stop()


def incremental(w, resources, v=1, validate_only=False):
    """resources: [(type, name, [(key, op, value)])] -> [(error, message)]"""
    req = IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
        IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=t, resource_name=n, configs=[
                IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=op, value=val)
                for k, op, val in ops]) for t, n, ops in resources])
    resp = w.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, v, req)
    return [(r.error_code, r.error_message) for r in resp.responses]


def legacy(w, resources, v=2, validate_only=False):
    """resources: [(type, name, {key: value})] -> [(error, message)]"""
    req = AlterConfigsRequest(validate_only=validate_only, resources=[
        AlterConfigsRequest.AlterConfigsResource(resource_type=t, resource_name=n, configs=[
            AlterConfigsRequest.AlterableConfig(name=k, value=val) for k, val in cfgs.items()])
        for t, n, cfgs in resources])
    resp = w.request(ApiKey.ALTER_CONFIGS, v, req)
    return [(r.error_code, r.error_message) for r in resp.responses]


def describe(w, rtype, name, keys=None, v=4, synonyms=True):
    req = DescribeConfigsRequest(include_synonyms=synonyms, include_documentation=False, resources=[
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=rtype, resource_name=name,
                                                       configuration_keys=keys)])
    res = w.request(ApiKey.DESCRIBE_CONFIGS, v, req).results[0]
    return res


def entries(w, rtype, name, keys=None, v=4):
    res = describe(w, rtype, name, keys, v)
    assert res.error_code == 0, res
    return {c.name: c for c in res.configs}


def chain(entry):
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def create(w, name, configs=None):
    req = CreateTopicsRequest(timeout_ms=5000, topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, configs=[
            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])])
    r = w.request(ApiKey.CREATE_TOPICS, 7, req).topics[0]
    assert r.error_code == 0, r
    return {c.name: (c.value, c.config_source) for c in r.configs}


# ------------------------------------------------------------------ ELR on a fresh node


def test_fresh_node_enables_elr_and_writes_the_cluster_min_insync_replicas(node):
    _, w = node
    assert finalized(w) == {"metadata.version": 29, ELR: 1, "group.version": 1, "share.version": 1}
    cluster = entries(w, BROKER, "")
    assert list(cluster) == ["min.insync.replicas"]
    e = cluster["min.insync.replicas"]
    assert (e.value, e.config_source, e.read_only) == ("1", DYN_DEFAULT, False)
    assert chain(e) == [("min.insync.replicas", "1", DYN_DEFAULT)]
    create(w, "elr")
    t = entries(w, TOPIC, "elr")["min.insync.replicas"]
    assert (t.value, t.config_source) == ("1", DYN_DEFAULT)
    assert chain(t) == [("min.insync.replicas", "1", DYN_DEFAULT), ("min.insync.replicas", "1", DEFAULT)]
    # the rest of a fresh topic is still default
    assert {n for n, c in entries(w, TOPIC, "elr").items() if c.config_source != DEFAULT} == {
        "min.insync.replicas"}


def test_the_cluster_value_is_the_static_min_insync_replicas(tmp_path):
    with EmbeddedBroker(log_dir=str(tmp_path), overrides={"min.insync.replicas": 2}) as b:
        w = WireClient("127.0.0.1", b.port)
        e = entries(w, BROKER, "")["min.insync.replicas"]
        assert e.value == "2"
        create(w, "two")
        t = entries(w, TOPIC, "two")["min.insync.replicas"]
        assert chain(t) == [("min.insync.replicas", "2", DYN_DEFAULT), ("min.insync.replicas", "2", STATIC),
                            ("min.insync.replicas", "1", DEFAULT)]
        w.close()


def test_elr_rules_for_min_insync_replicas(node):
    _, w = node
    broker_level = (Errors.INVALID_CONFIG, "Broker-level min.insync.replicas cannot be altered while ELR is enabled.")
    cluster_removal = (Errors.INVALID_CONFIG, "Cluster-level min.insync.replicas cannot be removed while ELR is "
                                              "enabled.")
    assert incremental(w, [(BROKER, "1", [("min.insync.replicas", SET, "1")])]) == [broker_level]
    assert incremental(w, [(BROKER, "1", [("min.insync.replicas", DELETE, None)])]) == [broker_level]
    assert incremental(w, [(BROKER, "", [("min.insync.replicas", DELETE, None)])]) == [cluster_removal]
    # AlterConfigs replaces the whole set: leaving the key out removes it
    assert legacy(w, [(BROKER, "", {"log.cleaner.backoff.ms": "100"})]) == [cluster_removal]
    assert entries(w, BROKER, "")["min.insync.replicas"].value == "1"
    # changing the cluster value is allowed
    assert incremental(w, [(BROKER, "", [("min.insync.replicas", SET, "2")])]) == [(0, None)]
    create(w, "t")
    assert entries(w, TOPIC, "t")["min.insync.replicas"].value == "2"


def test_disabled_elr_lifts_the_rules_and_enabling_it_again_restores_the_safety_records(node):
    _, w = node
    assert update(w, [(ELR, 0, 2)]).error_code == 0  # SAFE_DOWNGRADE
    assert incremental(w, [(BROKER, "1", [("min.insync.replicas", SET, "1")])]) == [(0, None)]
    assert incremental(w, [(BROKER, "", [("min.insync.replicas", DELETE, None)])]) == [(0, None)]
    assert "min.insync.replicas" not in entries(w, BROKER, "")
    assert entries(w, BROKER, "1", ["min.insync.replicas"])["min.insync.replicas"].config_source == DYN_BROKER
    # maybeGenerateElrSafetyRecords: cluster value back (the static one), per-broker value gone
    assert update(w, [(ELR, 1, 1)]).error_code == 0
    assert entries(w, BROKER, "")["min.insync.replicas"].value == "1"
    e = entries(w, BROKER, "1", ["min.insync.replicas"])["min.insync.replicas"]
    assert e.config_source == DYN_DEFAULT


def test_elr_level_1_depends_on_metadata_version_24(node):
    _, w = node
    assert update(w, [(ELR, 0, 2), ("metadata.version", 23, 2)]).error_code == 0
    resp = update(w, [(ELR, 1, 1)])
    assert resp.error_code == Errors.INVALID_UPDATE_VERSION
    assert resp.error_message.endswith("Invalid update version 1 for feature eligible.leader.replicas.version. "
                                       "eligible.leader.replicas.version could not be set to 1 because it "
                                       "depends on metadata.version level 24")


# ------------------------------------------------------------------ alter at every version


@pytest.mark.parametrize("v", versions(ApiKey.INCREMENTAL_ALTER_CONFIGS))
def test_incremental_alter_broker_configs_at_every_version(node, v):
    _, w = node
    assert incremental(w, [(BROKER, "1", [("log.cleaner.backoff.ms", SET, "1000")]),
                           (BROKER, "", [("log.retention.ms", SET, "7200000")])], v=v,
                       validate_only=True) == [(0, None), (0, None)]
    assert "log.retention.ms" not in entries(w, BROKER, "")
    assert incremental(w, [(BROKER, "1", [("log.cleaner.backoff.ms", SET, "1000")]),
                           (BROKER, "", [("log.retention.ms", SET, "7200000")])], v=v) == [(0, None), (0, None)]
    assert entries(w, BROKER, "1", ["log.cleaner.backoff.ms"])["log.cleaner.backoff.ms"].value == "1000"
    assert entries(w, BROKER, "")["log.retention.ms"].value == "7200000"
    # list operations on a list config start from the default
    assert incremental(w, [(BROKER, "", [("log.cleanup.policy", APPEND, "compact")])], v=v) == [(0, None)]
    assert entries(w, BROKER, "")["log.cleanup.policy"].value == "delete,compact"
    assert incremental(w, [(BROKER, "", [("log.cleanup.policy", SUBTRACT, "delete")])], v=v) == [(0, None)]
    assert entries(w, BROKER, "")["log.cleanup.policy"].value == "compact"
    assert incremental(w, [(BROKER, "", [("log.cleanup.policy", DELETE, None)]),
                           (BROKER, "1", [("log.cleaner.backoff.ms", DELETE, None)])], v=v) == [(0, None), (0, None)]
    assert "log.cleanup.policy" not in entries(w, BROKER, "")
    e = entries(w, BROKER, "1", ["log.cleaner.backoff.ms"])["log.cleaner.backoff.ms"]
    assert (e.value, e.config_source) == ("15000", DEFAULT)


@pytest.mark.parametrize("v", versions(ApiKey.ALTER_CONFIGS))
def test_legacy_alter_broker_configs_at_every_version(node, v):
    _, w = node
    new = {"min.insync.replicas": "1", "log.retention.bytes": "1000000", "message.max.bytes": "2000000"}
    assert legacy(w, [(BROKER, "", new)], v=v, validate_only=True) == [(0, None)]
    assert set(entries(w, BROKER, "")) == {"min.insync.replicas"}
    assert legacy(w, [(BROKER, "", new)], v=v) == [(0, None)]
    assert {n: c.value for n, c in entries(w, BROKER, "").items()} == new
    # the whole set is replaced: keys left out are removed
    assert legacy(w, [(BROKER, "", {"min.insync.replicas": "1"}), (BROKER, "1", {"num.io.threads": "4"})],
                  v=v) == [(0, None), (0, None)]
    assert set(entries(w, BROKER, "")) == {"min.insync.replicas"}
    e = entries(w, BROKER, "1", ["num.io.threads"])["num.io.threads"]
    assert (e.value, e.config_source) == ("4", DYN_BROKER)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("api", ["incremental", "legacy"])
def test_broker_resource_errors(node, api):
    _, w = node

    def alter(name, cfgs):
        if api == "incremental":
            return incremental(w, [(BROKER, name, [(k, SET, v) for k, v in cfgs.items()])])[0]
        return legacy(w, [(BROKER, name, cfgs)])[0]

    invalid = Errors.INVALID_REQUEST
    assert alter("1", {"log.dirs": "/x"}) == (invalid, "Cannot update these configs dynamically: Set(log.dirs)")
    assert alter("", {"node.id": "3", "log.retention.hours": "1"}) == (
        invalid, "Cannot update these configs dynamically: Set(node.id, log.retention.hours)")
    # pybroker cannot rebind its listeners; at the default level Kafka's per-broker error
    assert alter("1", {"listeners": "PLAINTEXT://127.0.0.1:0"}) == (
        invalid, "Cannot update these configs dynamically: Set(listeners)")
    assert alter("", {"min.insync.replicas": "1", "advertised.listeners": "PLAINTEXT://h:1"}) == (
        invalid, "Cannot update these configs at default cluster level, broker id must be specified: "
                 "Set(advertised.listeners)")
    assert alter("1", {"log.segment.bytes": "abc"}) == (
        invalid, "Invalid value abc for configuration log.segment.bytes: Not a number of type INT")
    assert alter("1", {"log.segment.bytes": "10"}) == (
        invalid, "Invalid value 10 for configuration log.segment.bytes: Value must be at least 14")
    assert alter("1", {"log.preallocate": "yes"}) == (
        invalid, "Invalid value yes for configuration log.preallocate: Expected value to be either true or false")
    assert alter("7", {"num.io.threads": "2"}) == (invalid, "Unexpected broker id, expected 1, but received 7")
    assert alter("b1", {"num.io.threads": "2"}) == (invalid, "Node id must be an integer, but it is: b1")
    # nothing was written
    assert set(entries(w, BROKER, "")) == {"min.insync.replicas"}
    # a custom (unknown) key is accepted, as Kafka passes it to plugins; it is described as
    # sensitive with an unknown type
    assert alter("1", {"my.plugin.setting": "on"}) == (0, None)
    e = entries(w, BROKER, "1", ["my.plugin.setting"])["my.plugin.setting"]
    assert (e.value, e.is_sensitive, e.config_type, e.config_source, e.read_only) == (None, True, 0, DYN_BROKER,
                                                                                       True)


def test_incremental_only_errors(node):
    _, w = node
    assert incremental(w, [(BROKER, "1", [("log.segment.bytes", APPEND, "1")])]) == [
        (Errors.INVALID_CONFIG, "Config value append is not allowed for config key: log.segment.bytes")]
    assert incremental(w, [(BROKER, "1", [("log.segment.bytes", SUBTRACT, "1")])]) == [
        (Errors.INVALID_CONFIG, "Config value subtract is not allowed for config key: log.segment.bytes")]
    assert incremental(w, [(BROKER, "1", [("log.segment.bytes", 9, "1")])]) == [
        (Errors.INVALID_REQUEST, "Unknown operations type 9")]
    # the whole resulting set is validated, so a good key next to a bad one changes nothing
    assert incremental(w, [(BROKER, "", [("log.retention.ms", SET, "5"), ("log.segment.bytes", SET, "1")])])[0][0] \
        == Errors.INVALID_REQUEST
    assert "log.retention.ms" not in entries(w, BROKER, "")


def test_describe_broker_errors(node):
    _, w = node
    r = describe(w, BROKER, "7")
    assert (r.error_code, r.error_message) == (Errors.INVALID_REQUEST,
                                               "Unexpected broker id, expected 1 or empty string, but received 7")
    r = describe(w, BROKER, "x")
    assert (r.error_code, r.error_message) == (Errors.INVALID_REQUEST, "Broker id must be an integer, but it is: x")


# ------------------------------------------------------------------ sources and synonyms


@pytest.mark.parametrize("v", versions(ApiKey.DESCRIBE_CONFIGS))
def test_sources_and_synonyms_across_the_layers(node, v):
    _, w = node
    assert incremental(w, [(BROKER, "", [("log.retention.ms", SET, "1000"), ("compression.type", SET, "gzip")]),
                           (BROKER, "1", [("log.retention.ms", SET, "2000")])]) == [(0, None), (0, None)]
    b = entries(w, BROKER, "1", v=v)
    assert (b["log.retention.ms"].value, b["log.retention.ms"].config_source) == ("2000", DYN_BROKER)
    assert chain(b["log.retention.ms"]) == [("log.retention.ms", "2000", DYN_BROKER),
                                            ("log.retention.ms", "1000", DYN_DEFAULT),
                                            ("log.retention.hours", "168", DEFAULT)]
    assert (b["compression.type"].value, b["compression.type"].config_source) == ("gzip", DYN_DEFAULT)
    assert b["log.retention.ms"].read_only is False and b["log.dirs"].read_only is True
    assert b["log.dirs"].config_source == STATIC  # set by the embedded broker's properties
    # the cluster-wide resource lists only its own layer
    c = entries(w, BROKER, "", v=v)
    assert set(c) == {"log.retention.ms", "compression.type", "min.insync.replicas"}
    assert chain(c["log.retention.ms"]) == [("log.retention.ms", "1000", DYN_DEFAULT)]
    # topics: override > per-broker > cluster default > default
    create(w, "plain")
    create(w, "own", {"retention.ms": "3000"})
    p = entries(w, TOPIC, "plain", v=v)
    assert (p["retention.ms"].value, p["retention.ms"].config_source) == ("2000", DYN_BROKER)
    assert (p["compression.type"].value, p["compression.type"].config_source) == ("gzip", DYN_DEFAULT)
    o = entries(w, TOPIC, "own", v=v)
    assert (o["retention.ms"].value, o["retention.ms"].config_source) == ("3000", DYN_TOPIC)
    assert chain(o["retention.ms"])[:2] == [("retention.ms", "3000", DYN_TOPIC),
                                            ("log.retention.ms", "2000", DYN_BROKER)]
    assert all(not c.is_default for c in o.values())  # Kafka never sets is_default


def test_a_static_synonym_is_not_a_synonym_of_the_topic_config(tmp_path):
    # Kafka's ConfigHelper lists synonyms from the first entry named like the broker
    # synonym: log.retention.hours alone leaves retention.ms a DEFAULT_CONFIG entry (with the
    # derived value), while CreateTopics (resolveEffectiveTopicConfig) reports it STATIC.
    with EmbeddedBroker(log_dir=str(tmp_path), overrides={"log.retention.hours": 2}) as b:
        w = WireClient("127.0.0.1", b.port)
        created = create(w, "h")
        assert created["retention.ms"] == ("7200000", STATIC)
        e = entries(w, TOPIC, "h")["retention.ms"]
        assert (e.value, e.config_source, chain(e)) == ("7200000", DEFAULT, [])
        w.close()


# ------------------------------------------------------------------ effect and persistence


def test_cluster_defaults_take_effect_and_a_topic_override_wins(tmp_path):
    overrides = {"log.retention.check.interval.ms": 100, "log.segment.delete.delay.ms": 0}
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=overrides) as b:
        w = WireClient("127.0.0.1", b.port)
        create(w, "dflt")
        create(w, "kept", {"retention.ms": "86400000"})
        # set after the topics exist: existing logs pick the new defaults up
        assert incremental(w, [(BROKER, "", [("log.segment.bytes", SET, "300"),
                                             ("log.retention.ms", SET, "60000")])]) == [(0, None)]
        now = int(time.time() * 1000)
        for topic in ("dflt", "kept"):
            for i in range(4):  # two hours old, one segment each
                assert produce(w, topic, [b"old-%d" % i + b"x" * 150], now=now - 7_200_000).error_code == 0
            assert produce(w, topic, [b"new" + b"x" * 150], now=now).error_code == 0
        deadline = time.monotonic() + 15
        # retention passes every 100 ms may run between the appends: wait for all four to go
        while earliest(w, "dflt") < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert earliest(w, "dflt") == 4
        assert earliest(w, "kept") == 0  # its own retention.ms (a day) keeps the old records
        assert len([p for p in (tmp_path / "kept-0").iterdir() if p.name.endswith(".log")]) == 5
        w.close()


def test_dynamic_configs_survive_a_restart(tmp_path):
    data = str(tmp_path / "data")
    with EmbeddedBroker(log_dir=data) as b:
        w = WireClient("127.0.0.1", b.port)
        create(w, "t")
        assert incremental(w, [(BROKER, "", [("log.retention.bytes", SET, "123456")]),
                               (BROKER, "1", [("compression.type", SET, "lz4")])]) == [(0, None), (0, None)]
        w.close()
    with EmbeddedBroker(log_dir=data) as b:
        w = WireClient("127.0.0.1", b.port)
        assert finalized(w)[ELR] == 1
        assert {n: c.value for n, c in entries(w, BROKER, "").items()} == {
            "log.retention.bytes": "123456", "min.insync.replicas": "1"}
        t = entries(w, TOPIC, "t")
        assert (t["retention.bytes"].value, t["retention.bytes"].config_source) == ("123456", DYN_DEFAULT)
        assert (t["compression.type"].value, t["compression.type"].config_source) == ("lz4", DYN_BROKER)
        # and the log runs with them
        log = b._broker.replica_manager.get_partition("t", 0).log
        assert log.config.retention_bytes == 123456
        w.close()


# ------------------------------------------------------------------ replication throttle rates (KIP-73)


def _bounds(b):
    rm = b._broker.replica_manager
    return rm.leader_quota.bound, rm.follower_quota.bound


def _wait_bounds(b, want, timeout=10.0):
    deadline = time.monotonic() + timeout
    while _bounds(b) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _bounds(b) == want


def test_throttle_rates_broker_value_then_cluster_default_then_none_and_static_ignored(tmp_path):
    data = str(tmp_path / "data")
    leader, follower = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
    unlimited = float(2**63 - 1)
    # a static value is accepted but ignored, as in Kafka (only dynamic values count)
    with EmbeddedBroker(log_dir=data, overrides={leader: 5}) as b:
        w = WireClient("127.0.0.1", b.port)
        assert _bounds(b) == (unlimited, unlimited)
        e = entries(w, BROKER, "1")[leader]
        assert (e.value, e.config_source, chain(e)) == ("5", STATIC, [(leader, "5", STATIC)])
        assert follower not in entries(w, BROKER, "1")  # dynamic-only: listed only where set
        assert incremental(w, [(BROKER, "", [(leader, SET, "500"), (follower, SET, "600")])]) == [(0, None)]
        _wait_bounds(b, (500.0, 600.0))
        assert incremental(w, [(BROKER, "1", [(leader, SET, "700")])]) == [(0, None)]
        _wait_bounds(b, (700.0, 600.0))
        e = entries(w, BROKER, "1")[leader]
        assert (e.value, e.config_source, e.read_only) == ("700", DYN_BROKER, False)
        assert chain(e) == [(leader, "700", DYN_BROKER), (leader, "500", DYN_DEFAULT), (leader, "5", STATIC)]
        c = entries(w, BROKER, "")
        assert (c[follower].value, c[follower].config_source, chain(c[follower])) == (
            "600", DYN_DEFAULT, [(follower, "600", DYN_DEFAULT)])
        # Kafka's ConfigDef errors, INVALID_REQUEST; a refused change changes nothing
        assert legacy(w, [(BROKER, "1", {leader: "1.5"})]) == [
            (Errors.INVALID_REQUEST, f"Invalid value 1.5 for configuration {leader}: Not a number of type LONG")]
        assert incremental(w, [(BROKER, "", [(follower, SET, "-2")])]) == [
            (Errors.INVALID_REQUEST, f"Invalid value -2 for configuration {follower}: Value must be at least 0")]
        assert _bounds(b) == (700.0, 600.0)
        # Kafka's third broker throttle: known and validated (not enforced: a warning)
        dirs = "replica.alter.log.dirs.io.max.bytes.per.second"
        assert incremental(w, [(BROKER, "1", [(dirs, SET, "x")])]) == [
            (Errors.INVALID_REQUEST, f"Invalid value x for configuration {dirs}: Not a number of type LONG")]
        assert incremental(w, [(BROKER, "1", [(dirs, SET, "1000")])]) == [(0, None)]
        e = entries(w, BROKER, "1")[dirs]
        assert (e.value, e.config_source, e.is_sensitive, e.config_type) == ("1000", DYN_BROKER, False, 5)  # LONG
        assert incremental(w, [(BROKER, "1", [(dirs, DELETE, None)])]) == [(0, None)]
        w.close()
    # the dynamic values come back from the metadata log before the node replicates
    with EmbeddedBroker(log_dir=data) as b:
        assert _bounds(b) == (700.0, 600.0)
        w = WireClient("127.0.0.1", b.port)
        assert incremental(w, [(BROKER, "1", [(leader, DELETE, None)])]) == [(0, None)]
        _wait_bounds(b, (500.0, 600.0))
        assert incremental(w, [(BROKER, "", [(leader, DELETE, None), (follower, DELETE, None)])]) == [(0, None)]
        _wait_bounds(b, (unlimited, unlimited))
        assert leader not in entries(w, BROKER, "1") and not set(entries(w, BROKER, "")) & {leader, follower}
        w.close()
