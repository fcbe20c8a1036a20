"""The `pybroker` pytest plugin as a user meets it: a test module of theirs, run by pytester in
a fresh pytest process with the plugin loaded, producing and consuming with confluent-kafka
against the fixtures.

The inner runs load the plugin with `-p pybroker.testing.pytest_plugin` (and `-p no:pybroker`,
so an installed entry point does not register it twice); an installed wheel loads it through
its pytest11 entry point instead, which tests/plugin/test_entry_point.py checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parents[2]
PLUGIN = ("-p", "no:pybroker", "-p", "pybroker.testing.pytest_plugin", "-p", "no:cacheprovider")

USER_MODULE = '''
import uuid

from confluent_kafka import Consumer, Producer

SEEN = []


def consume(bootstrap, topic, count):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + uuid.uuid4().hex,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    c.subscribe([topic])
    got = []
    try:
        for _ in range(300):
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got.append(m.value())
                if len(got) == count:
                    break
    finally:
        c.close()
    return got


def test_produce_and_consume(pybroker_broker):
    topic = pybroker_broker.create_topic(partitions=3)
    p = Producer({"bootstrap.servers": pybroker_broker.bootstrap_servers, "acks": "all"})
    for i in range(10):
        p.produce(topic, value=b"v%d" % i, key=b"k")
    assert p.flush(10) == 0
    assert consume(pybroker_broker.bootstrap_servers, topic, 10) == [b"v%d" % i for i in range(10)]
    SEEN.append(pybroker_broker.bootstrap_servers)


def test_a_second_test_and_a_topic_with_configs(pybroker_broker):
    topic = pybroker_broker.create_topic(partitions=1, configs={"cleanup.policy": "compact"})
    configs = pybroker_broker.admin().topic_config_overrides([topic])[topic]
    assert configs["cleanup.policy"] == "compact"
    assert topic in pybroker_broker.admin().list_topics()
    SEEN.append(pybroker_broker.bootstrap_servers)


def test_a_fresh_broker_of_its_own(pybroker_fresh_broker, pybroker_broker):
    assert pybroker_fresh_broker.bootstrap_servers != pybroker_broker.bootstrap_servers
    assert "__consumer_offsets" in pybroker_fresh_broker.admin().list_topics()


def test_the_broker_is_shared_or_not(request):
    scope = request.config.getoption("--pybroker-scope") or "session"
    assert len(SEEN) == 2
    assert (SEEN[0] == SEEN[1]) == (scope != "function")
'''


@pytest.fixture
def user_tests(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    pytester.makepyfile(test_user=USER_MODULE)
    return pytester


def test_a_users_tests_produce_and_consume_on_a_session_broker(user_tests: pytest.Pytester):
    result = user_tests.runpytest_subprocess(*PLUGIN, "-v")
    result.assert_outcomes(passed=4)


def test_the_broker_fixture_can_be_function_scoped(user_tests: pytest.Pytester):
    result = user_tests.runpytest_subprocess(*PLUGIN, "--pybroker-scope", "function")
    result.assert_outcomes(passed=4)


def test_the_group_coordinator_is_ready_before_the_test_runs(pytester: pytest.Pytester,
                                                            monkeypatch: pytest.MonkeyPatch):
    """__consumer_offsets exists with a leader for every partition (TEST_DEFAULTS: 10 of them)
    when the test gets the broker, and the group delay is 0 (DescribeConfigs)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    pytester.makepyfile(test_ready='''
def test_ready(pybroker_broker):
    t = pybroker_broker.admin().describe_topics(["__consumer_offsets"])["__consumer_offsets"]
    assert len(t.partitions) == 10 and all(p.leader >= 0 for p in t.partitions)
    entries = pybroker_broker.admin().describe_configs([(4, "1")])[(4, "1")]
    assert {e.name: e.value for e in entries}["group.initial.rebalance.delay.ms"] == "0"
''')
    pytester.runpytest_subprocess(*PLUGIN).assert_outcomes(passed=1)


def test_overrides_reach_the_broker(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    pytester.makepyfile(test_override='''
def test_override(pybroker_broker):
    topic = pybroker_broker.create_topic()
    assert len(pybroker_broker.admin().describe_topics([topic])[topic].partitions) == 1
    entries = pybroker_broker.admin().describe_configs([(4, "1")])[(4, "1")]
    assert {e.name: e.value for e in entries}["log.retention.ms"] == "123456"
''')
    pytester.runpytest_subprocess(*PLUGIN, "--pybroker-override", "log.retention.ms=123456").assert_outcomes(passed=1)


CLUSTER_MODULE = '''
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient


def produce(bootstrap, topic, value):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000})
    errors = []
    p.produce(topic, value=value, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(40) == 0
    return errors


@pytest.mark.pybroker_cluster(nodes=1)
def test_a_marker_sets_the_node_count(pybroker_cluster):
    assert sorted(AdminClient({"bootstrap.servers": pybroker_cluster.bootstrap_servers})
                  .list_topics(timeout=10).brokers) == [1]


@pytest.mark.pybroker_cluster(racks=["r1", "r2", "r3"], overrides={"min.insync.replicas": "2"})
def test_three_nodes_by_default_and_one_can_die(pybroker_cluster):
    brokers = AdminClient({"bootstrap.servers": pybroker_cluster.bootstrap_servers}).list_topics(timeout=10).brokers
    assert sorted(brokers) == [1, 2, 3]
    topic = pybroker_cluster.create_topic(partitions=2, replication_factor=3)
    assert produce(pybroker_cluster.bootstrap_servers, topic, b"before") == [None]
    pybroker_cluster.kill(1)
    assert produce(",".join(pybroker_cluster.address(n) for n in (2, 3)), topic, b"after") == [None]
    pybroker_cluster.restart(1)
    assert pybroker_cluster.running() == [1, 2, 3]
'''


@pytest.mark.slow
def test_a_users_cluster_tests(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    pytester.makepyfile(test_cluster=CLUSTER_MODULE)
    result = pytester.runpytest_subprocess(*PLUGIN, "-v")
    result.assert_outcomes(passed=2)


def test_a_wrong_marker_argument_is_a_usage_error(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    pytester.makepyfile(test_bad='''
import pytest

@pytest.mark.pybroker_cluster(node=2)
def test_bad(pybroker_cluster):
    pass
''')
    result = pytester.runpytest_subprocess(*PLUGIN)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown argument(s) node*"])
