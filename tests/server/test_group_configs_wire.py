"""GROUP config resources (type 32, KIP-848 dynamic group configs) on the wire.

- DescribeConfigs lists every group config key: defaults from the broker's group.consumer.*
  configs (DEFAULT_CONFIG, is_default) or the group's override (DYNAMIC_GROUP_CONFIG, 8),
  each with itself as its only synonym; an empty group name is INVALID_REQUEST.
- IncrementalAlterConfigs / AlterConfigs: SET, DELETE, legacy replace, validate_only, and
  Kafka's GroupConfig errors and messages; nothing is written when a change is refused.
- Overrides survive a restart and drive a KIP-848 group: the ConsumerGroupHeartbeat
  interval and the session timeout follow the group's override.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.config import BrokerConfig
from pybroker.controller.group_configs import GROUP_KEYS, validate
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.testing import EmbeddedBroker

from .test_consumer_group_wire import create_topic, hb, join
from .test_consumer_group_wire import describe as describe_group
from .test_dynamic_configs_wire import APPEND, DELETE, SET, describe, incremental, legacy, versions
from .wire import WireClient

GROUP = 32
DYNAMIC_GROUP, DEFAULT = 8, 5
SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"
OVERRIDES = {"offsets.topic.num.partitions": 2, "group.consumer.session.timeout.ms": 30000,
             "group.consumer.min.session.timeout.ms": 1000, "group.consumer.heartbeat.interval.ms": 3000,
             "group.consumer.min.heartbeat.interval.ms": 100}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with EmbeddedBroker(log_dir=str(tmp_path_factory.mktemp("gcfg")), overrides=OVERRIDES) as b:
        yield b


@pytest.fixture
def w(node):
    c = WireClient("127.0.0.1", node.port)
    yield c
    c.close()


def group_entries(w, name, keys=None, v=4, synonyms=True):
    res = describe(w, GROUP, name, keys, v, synonyms)
    assert res.error_code == 0, res
    return {c.name: c for c in res.configs}


def non_default(w, name):
    return {n: e.value for n, e in group_entries(w, name).items() if e.config_source != DEFAULT}


def test_describe_a_group_without_overrides_lists_every_key_with_broker_defaults(w):
    es = group_entries(w, "gc-none")
    assert list(es) == [k.name for k in GROUP_KEYS]
    assert es[SESSION].value == "30000" and es[HEARTBEAT].value == "3000"  # the broker's group.consumer.*
    assert es["share.session.timeout.ms"].value == "45000"
    assert es["share.isolation.level"].value == "read_uncommitted"
    for e in es.values():
        assert (e.config_source, e.read_only, e.is_sensitive) == (DEFAULT, False, False)
        assert [(s.name, s.value, s.source) for s in e.synonyms] == [(e.name, e.value, DEFAULT)]
    assert {es[SESSION].config_type, es["share.auto.offset.reset"].config_type} == {3, 2}  # INT, STRING


@pytest.mark.parametrize("v", versions(ApiKey.DESCRIBE_CONFIGS))
def test_describe_every_version_keys_and_empty_name(w, v):
    assert incremental(w, [(GROUP, "gc-dv", [(SESSION, SET, "50000")])]) == [(0, None)]
    res = describe(w, GROUP, "gc-dv", [SESSION, HEARTBEAT], v, synonyms=v > 0)
    assert res.error_code == 0
    got = {c.name: c for c in res.configs}
    assert set(got) == {SESSION, HEARTBEAT}
    assert got[SESSION].value == "50000" and got[HEARTBEAT].value == "3000"
    if v == 0:
        assert (got[SESSION].is_default, got[HEARTBEAT].is_default) == (False, True)
    else:
        assert (got[SESSION].config_source, got[HEARTBEAT].config_source) == (DYNAMIC_GROUP, DEFAULT)
    bad = describe(w, GROUP, "", None, v)
    assert (bad.error_code, bad.error_message, bad.configs) == (Errors.INVALID_REQUEST,
                                                                 "Group name must not be empty", [])


@pytest.mark.parametrize("v", versions(ApiKey.INCREMENTAL_ALTER_CONFIGS))
def test_set_describe_delete(w, v):
    g = f"gc-set-{v}"
    assert incremental(w, [(GROUP, g, [(SESSION, SET, "50000")])], v=v) == [(0, None)]
    assert non_default(w, g) == {SESSION: "50000"}
    e = group_entries(w, g)[SESSION]
    assert [(s.name, s.value, s.source) for s in e.synonyms] == [(SESSION, "50000", DYNAMIC_GROUP)]
    assert incremental(w, [(GROUP, g, [(HEARTBEAT, SET, "4000"), ("share.isolation.level", SET,
                                                                  "read_committed")])], v=v) == [(0, None)]
    assert non_default(w, g) == {SESSION: "50000", HEARTBEAT: "4000", "share.isolation.level": "read_committed"}
    assert incremental(w, [(GROUP, g, [(SESSION, DELETE, None), ("share.isolation.level", DELETE, None)])],
                       v=v) == [(0, None)]
    assert non_default(w, g) == {HEARTBEAT: "4000"}
    assert group_entries(w, g)[SESSION].value == "30000"


@pytest.mark.parametrize("ops, error, message", [
    ([("no.such.key", SET, "1")], Errors.INVALID_CONFIG, "Unknown group config name: no.such.key"),
    ([(SESSION, SET, "abc")], Errors.INVALID_CONFIG,
     "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ([(SESSION, SET, "0")], Errors.INVALID_CONFIG,
     "Invalid value 0 for configuration consumer.session.timeout.ms: Value must be at least 1"),
    ([(SESSION, SET, "500")], Errors.INVALID_CONFIG,
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ([(SESSION, SET, "70000")], Errors.INVALID_CONFIG,
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ([(HEARTBEAT, SET, "50")], Errors.INVALID_CONFIG,
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ([(HEARTBEAT, SET, "20000")], Errors.INVALID_CONFIG,
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ([(SESSION, SET, "2000"), (HEARTBEAT, SET, "2000")], Errors.INVALID_CONFIG,
     "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"),
    ([("share.record.lock.duration.ms", SET, "5000")], Errors.INVALID_CONFIG,
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ([("share.isolation.level", SET, "dirty")], Errors.INVALID_CONFIG,
     "Invalid value dirty for configuration share.isolation.level: String must be one of: "
     "read_committed, read_uncommitted"),
    ([(SESSION, APPEND, "1")], Errors.INVALID_CONFIG,
     "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST."),
])
def test_refused_changes_carry_kafkas_messages_and_write_nothing(w, ops, error, message):
    assert incremental(w, [(GROUP, "gc-bad", ops)]) == [(error, message)]
    assert non_default(w, "gc-bad") == {}


def test_default_group_resource_and_a_refusal_among_accepted_changes(w):
    assert incremental(w, [(GROUP, "", [(SESSION, SET, "50000")])]) == [
        (Errors.INVALID_REQUEST, "Default group resources are not allowed.")]
    out = incremental(w, [(GROUP, "gc-mix-a", [(SESSION, SET, "50000")]),
                          (GROUP, "gc-mix-b", [(SESSION, SET, "1")])])
    assert out[0] == (0, None) and out[1][0] == Errors.INVALID_CONFIG
    assert non_default(w, "gc-mix-a") == {SESSION: "50000"} and non_default(w, "gc-mix-b") == {}


def test_validation_sees_the_stored_overrides(w):
    # a session of 2000 is refused against the broker's heartbeat interval (3000), not
    # against the group's own; a heartbeat of 4500 is valid alone, not with the stored 4000
    assert incremental(w, [(GROUP, "gc-merge", [(SESSION, SET, "2000")])]) == [
        (Errors.INVALID_CONFIG, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")]
    assert incremental(w, [(GROUP, "gc-merge", [(SESSION, SET, "4000")])]) == [(0, None)]
    assert incremental(w, [(GROUP, "gc-merge", [(HEARTBEAT, SET, "4500")])]) == [
        (Errors.INVALID_CONFIG, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")]
    assert incremental(w, [(GROUP, "gc-merge-2", [(HEARTBEAT, SET, "4500")])]) == [(0, None)]
    assert non_default(w, "gc-merge") == {SESSION: "4000"}


@pytest.mark.parametrize("api", ["incremental", "legacy"])
def test_validate_only_checks_without_writing(w, api):
    g = f"gc-vo-{api}"
    if api == "incremental":
        ok = incremental(w, [(GROUP, g, [(SESSION, SET, "50000")])], validate_only=True)
        bad = incremental(w, [(GROUP, g, [(SESSION, SET, "5")])], validate_only=True)
    else:
        ok = legacy(w, [(GROUP, g, {SESSION: "50000"})], validate_only=True)
        bad = legacy(w, [(GROUP, g, {SESSION: "5"})], validate_only=True)
    assert ok == [(0, None)]
    assert bad == [(Errors.INVALID_CONFIG,
                    "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms")]
    assert non_default(w, g) == {}


@pytest.mark.parametrize("v", versions(ApiKey.ALTER_CONFIGS))
def test_legacy_alter_configs_replaces_the_groups_overrides(w, v):
    g = f"gc-legacy-{v}"
    assert legacy(w, [(GROUP, g, {SESSION: "50000", HEARTBEAT: "4000"})], v=v) == [(0, None)]
    assert non_default(w, g) == {SESSION: "50000", HEARTBEAT: "4000"}
    assert legacy(w, [(GROUP, g, {HEARTBEAT: "6000"})], v=v) == [(0, None)]
    assert non_default(w, g) == {HEARTBEAT: "6000"}
    assert legacy(w, [(GROUP, g, {"bogus": "1"})], v=v) == [
        (Errors.INVALID_CONFIG, "Unknown group config name: bogus")]
    assert non_default(w, g) == {HEARTBEAT: "6000"}


def _poll(fn, done, tries=300):
    for _ in range(tries):
        r = fn()
        if done(r):
            return r
        threading.Event().wait(0.05)
    return r


def test_heartbeat_interval_follows_the_group_override_and_survives_a_restart(tmp_path):
    log_dir = str(tmp_path / "data")
    with EmbeddedBroker(log_dir=log_dir, overrides=OVERRIDES) as b:
        c = WireClient("127.0.0.1", b.port)
        create_topic(c, "gc-hb-t", 1)
        assert join(c, "gc-other", "o1", ["gc-hb-t"]).heartbeat_interval_ms == 3000  # the broker default
        r = join(c, "gc-hb", "m1", ["gc-hb-t"])
        assert r.heartbeat_interval_ms == 3000
        assert incremental(c, [(GROUP, "gc-hb", [(HEARTBEAT, SET, "700")])]) == [(0, None)]
        r = hb(c, "gc-hb", "m1", r.member_epoch)
        assert r.error_code == 0 and r.heartbeat_interval_ms == 700
        assert hb(c, "gc-other", "o1", 1).heartbeat_interval_ms == 3000  # only that group
        c.close()
    with EmbeddedBroker(log_dir=log_dir, overrides=OVERRIDES) as b:
        c = WireClient("127.0.0.1", b.port)
        assert non_default(c, "gc-hb") == {HEARTBEAT: "700"}
        r = join(c, "gc-hb", "m2", ["gc-hb-t"])
        assert r.error_code == 0 and r.heartbeat_interval_ms == 700
        assert incremental(c, [(GROUP, "gc-hb", [(HEARTBEAT, DELETE, None)])]) == [(0, None)]
        assert hb(c, "gc-hb", "m2", r.member_epoch).heartbeat_interval_ms == 3000
        c.close()


def test_session_timeout_override_fences_a_silent_member(node, w):
    # the broker's session timeout is 30 s; the group's own 1.5 s is what fences the member
    create_topic(w, "gc-st-t", 1)
    assert incremental(w, [(GROUP, "gc-st", [(SESSION, SET, "1500"), (HEARTBEAT, SET, "500")])]) == [(0, None)]
    assert join(w, "gc-st", "silent", ["gc-st-t"]).error_code == 0
    d = _poll(lambda: describe_group(w, "gc-st"), lambda d: d.group_state == "Empty")
    assert d.group_state == "Empty" and d.members == []


_CFG = BrokerConfig({"group.consumer.min.session.timeout.ms": 1000, "group.consumer.max.session.timeout.ms": 60000,
                     "group.consumer.min.heartbeat.interval.ms": 100,
                     "group.consumer.max.heartbeat.interval.ms": 15000})


@settings(max_examples=200, deadline=None)
@given(session=st.integers(-10, 70000), heartbeat=st.integers(-10, 20000))
def test_consumer_session_and_heartbeat_rules(session, heartbeat):
    ok = 1000 <= session <= 60000 and 100 <= heartbeat <= 15000 and session > heartbeat
    try:
        values = validate(_CFG, "g", {SESSION: str(session), HEARTBEAT: str(heartbeat)})
    except KafkaError as exc:
        assert not ok and exc.code == Errors.INVALID_CONFIG
    else:
        assert ok and (values[SESSION], values[HEARTBEAT]) == (session, heartbeat)
