import subprocess
import sys

import pytest

from pybroker.config import (
    LONG_MAX,
    BrokerConfig,
    ConfigError,
    build_config,
    parse_properties,
    validate_topic_configs,
)


def test_properties_parser_follows_java_rules():
    text = (
        "# comment\n! also comment\n"
        "a=1\n  b : 2\nc 3\n"
        "d=first\\\n   second\n"
        "e=tab\\there\n"
        "f=\\u0041\n"
        "g=\n"
    )
    props = parse_properties(text)
    assert props == {"a": "1", "b": "2", "c": "3", "d": "firstsecond", "e": "tab\there", "f": "A", "g": ""}


def test_defaults_are_kafkas_with_embedded_node_identity():
    cfg = BrokerConfig()
    assert cfg.node_id == 1
    assert cfg["num.partitions"] == 1
    assert cfg["log.segment.bytes"] == 1073741824
    assert cfg["log.index.interval.bytes"] == 4096
    assert cfg["log.index.size.max.bytes"] == 10485760
    assert cfg["message.max.bytes"] == 1048588
    assert cfg["socket.request.max.bytes"] == 104857600
    assert cfg["queued.max.requests"] == 500
    assert cfg["auto.create.topics.enable"] is True
    assert cfg["log.flush.interval.messages"] == LONG_MAX
    assert cfg.log_roll_ms == 168 * 3600 * 1000
    assert [str(e) for e in cfg.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert cfg.advertised_listeners == cfg.listeners
    assert cfg.log_dirs == ["./pybroker-data"]


def test_roll_ms_overrides_roll_hours():
    assert build_config(overrides=["log.roll.hours=2"]).log_roll_ms == 7200000
    assert build_config(overrides=["log.roll.hours=2", "log.roll.ms=5"]).log_roll_ms == 5


def test_overrides_win_over_file(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("num.partitions=3\nlog.dirs=/a,/b\n")
    cfg = build_config(str(f), ["num.partitions=5"])
    assert cfg["num.partitions"] == 5
    assert cfg.log_dirs == ["/a", "/b"]


@pytest.mark.parametrize("override,fragment", [
    ("num.partitions=abc", "num.partitions"),
    ("num.partitions=0", "at least 1"),
    ("auto.create.topics.enable=maybe", "auto.create.topics.enable"),
    ("listeners=localhost:9092", "listeners"),
    ("listeners=PLAINTEXT://127.0.0.1:70000", "port"),
    ("log.message.timestamp.type=Never", "log.message.timestamp.type"),
])
def test_invalid_values_raise_one_line_errors(override, fragment):
    with pytest.raises(ConfigError) as e:
        build_config(overrides=[override])
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_key_is_a_warning():
    cfg = build_config(overrides=["no.such.key=1"])
    assert any("no.such.key" in w for w in cfg.warnings)


def test_unreadable_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        build_config(str(tmp_path / "missing.properties"))


def test_topic_config_validation():
    assert validate_topic_configs({"retention.ms": "1000", "cleanup.policy": "compact,delete"}) == {
        "retention.ms": 1000, "cleanup.policy": ["compact", "delete"]}
    with pytest.raises(ConfigError):
        validate_topic_configs({"retention.ms": "soon"})
    with pytest.raises(ConfigError):
        validate_topic_configs({"no.such.topic.config": "1"})
    with pytest.raises(ConfigError):
        validate_topic_configs({"cleanup.policy": "shred"})


def test_topic_defaults_follow_broker_synonyms():
    cfg = build_config(overrides=["log.segment.bytes=12345", "log.retention.hours=1"])
    d = cfg.topic_defaults()
    assert d["segment.bytes"] == 12345
    assert d["retention.ms"] == 3600000
    assert d["cleanup.policy"] == ["delete"]


@pytest.mark.parametrize("args", [
    ["--override", "num.partitions=-5"],
    ["--config", "/nonexistent/server.properties"],
    ["--override", "novalue"],
    ["--bogus-flag"],
])
def test_cli_bad_input_exits_2_with_one_line(args):
    proc = subprocess.run([sys.executable, "-m", "pybroker", *args], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("pybroker:")


# ---------------------------------------------------------------------------- KRaft roles and quorum

CLUSTER = ["controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9095",
           "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
           "controller.listener.names=CONTROLLER"]


def test_a_node_without_a_quorum_is_a_standalone_one_voter_with_the_quickstart_defaults():
    cfg = build_config()
    assert cfg.standalone and cfg.is_broker and cfg.is_controller
    # Kafka's config/server.properties sets these for its single-node quickstart
    assert (cfg["offsets.topic.replication.factor"], cfg["transaction.state.log.replication.factor"],
            cfg["transaction.state.log.min.isr"]) == (1, 1, 1)
    assert cfg.source("offsets.topic.replication.factor") == "DEFAULT_CONFIG"
    # ... and this: a group's first member does not wait 3 s for others (a cluster node keeps 3000)
    assert cfg["group.initial.rebalance.delay.ms"] == 0
    assert build_config(overrides=CLUSTER)["group.initial.rebalance.delay.ms"] == 3000
    assert build_config(overrides=["group.initial.rebalance.delay.ms=3000"])["group.initial.rebalance.delay.ms"] == 3000


def test_a_cluster_node_has_kafkas_defaults_and_its_listener_roles():
    cfg = build_config(overrides=CLUSTER)
    assert not cfg.standalone
    assert (cfg["offsets.topic.replication.factor"], cfg["transaction.state.log.replication.factor"],
            cfg["transaction.state.log.min.isr"]) == (3, 3, 2)
    assert cfg.quorum_voters == {1: ("127.0.0.1", 9093), 2: ("127.0.0.1", 9095)}
    assert [str(e) for e in cfg.controller_listeners] == ["CONTROLLER://127.0.0.1:9093"]
    assert [str(e) for e in cfg.broker_listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert cfg.inter_broker_listener_name == "PLAINTEXT"
    assert (cfg["controller.quorum.election.timeout.ms"], cfg["controller.quorum.fetch.timeout.ms"],
            cfg["broker.heartbeat.interval.ms"], cfg["broker.session.timeout.ms"],
            cfg["metadata.log.max.record.bytes.between.snapshots"]) == (1000, 2000, 2000, 9000, 20971520)


@pytest.mark.parametrize("overrides,message", [
    (["process.roles=broker,zookeeper"], "Unknown process role 'zookeeper' (only 'broker' and 'controller' are "
                                         "allowed roles)"),
    (["process.roles=broker,broker"], "Duplicate role names found in `process.roles`"),
    (["process.roles=broker"], "If using process.roles, either controller.quorum.bootstrap.servers must contain"),
    (["controller.quorum.voters=2@127.0.0.1:9093", "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
      "controller.listener.names=CONTROLLER"],
     "If process.roles contains the 'controller' role, the node id 1 must be included in the set of voters "
     "controller.quorum.voters=Set(2)"),
    (["controller.quorum.voters=1@127.0.0.1:9093"],
     "controller.listener.names must contain at least one value appearing in the 'listeners' configuration when "
     "running the KRaft controller role"),
    (CLUSTER + ["process.roles=broker"], "If process.roles contains just the 'broker' role, the node id 1 must not "
                                         "be included in the set of voters"),
    (["process.roles=broker", "node.id=5", "controller.quorum.voters=1@127.0.0.1:9093"],
     "controller.listener.names must contain at least one value when running KRaft with just the broker role"),
    (CLUSTER + ["process.roles=controller"], "The listeners config must only contain KRaft controller listeners"),
    (CLUSTER + ["inter.broker.listener.name=CONTROLLER"], "must not contain the inter-broker listener name"),
    (["controller.quorum.voters=1@127.0.0.1:9093", "listeners=CLIENT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
      "listener.security.protocol.map=CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT", "controller.listener.names=CONTROLLER"],
     "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options based "
     "on currently configured listeners are CLIENT"),
    (["controller.quorum.voters=1@host"], "controller.quorum.voters: bad address"),
    (CLUSTER + ["advertised.listeners=PLAINTEXT://0.0.0.0:9092"], "cannot use the nonroutable meta-address 0.0.0.0"),
])
def test_inconsistent_kraft_settings_get_kafkas_message_on_one_line(overrides, message):
    with pytest.raises(ConfigError) as e:
        build_config(overrides=overrides)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_cli_refuses_a_controller_role_without_a_controller_listener_with_exit_2():
    proc = subprocess.run([sys.executable, "-m", "pybroker", "--override", "controller.quorum.voters=1@127.0.0.1:1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert line.startswith("pybroker: controller.listener.names must contain at least one value")


@pytest.mark.parametrize("overrides, message", [
    ({"replica.fetch.wait.max.ms": "40000"},
     "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms"),
    ({"replica.fetch.wait.max.ms": "5000", "replica.lag.time.max.ms": "1000"},
     "replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms"),
])
def test_replica_fetch_timings_are_checked_as_kafka_does(overrides, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(overrides)
    cfg = BrokerConfig({})
    assert (cfg["num.replica.fetchers"], cfg["replica.fetch.wait.max.ms"], cfg["replica.fetch.min.bytes"],
            cfg["replica.fetch.max.bytes"], cfg["replica.lag.time.max.ms"]) == (1, 500, 1, 1048576, 30000)


# ---------------------------------------------------------------------------- listeners and TLS

KRAFT = ["controller.quorum.voters=1@127.0.0.1:9093", "controller.listener.names=CONTROLLER"]


def test_protocol_map_maps_controller_listeners_to_plaintext_only_when_unset_and_nothing_is_secure():
    cfg = build_config(overrides=KRAFT + ["listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"])
    assert cfg.security_protocol_map["CONTROLLER"] == "PLAINTEXT"
    # an SSL listener in sight: the default map stands alone (KafkaConfig.effectiveListenerSecurityProtocolMap)
    with pytest.raises(ConfigError, match="no security protocol defined for listener CONTROLLER"):
        build_config(overrides=KRAFT + ["listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9094,"
                                        "CONTROLLER://127.0.0.1:9093"])
    cfg = build_config(overrides=KRAFT + ["listeners=SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                                          "listener.security.protocol.map=SSL:SSL,CONTROLLER:SSL",
                                          "security.inter.broker.protocol=SSL"])
    assert [e.security_protocol for e in cfg.listeners] == ["SSL", "SSL"]
    assert cfg.inter_broker_listener_name == "SSL"


@pytest.mark.parametrize("overrides, message", [
    (["listener.security.protocol.map=A:TLS"], "No enum constant org.apache.kafka.common.security.auth."
                                               "SecurityProtocol.TLS"),
    (["listener.security.protocol.map=A"], "Map entry should be of form <key>:<value>"),
    (["inter.broker.listener.name=PLAINTEXT", "security.inter.broker.protocol=PLAINTEXT"],
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."),
    (["inter.broker.listener.name=NOPE"], "Listener with name NOPE defined in inter.broker.listener.name not found"),
    (["security.inter.broker.protocol=TLS"], "security.inter.broker.protocol"),
    (["listener.name.ssl.ssl.client.auth=maybe"], "listener.name.ssl.ssl.client.auth"),
])
def test_listener_settings_refused_with_one_line(overrides, message):
    with pytest.raises(ConfigError) as e:
        build_config(overrides=overrides)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_per_listener_override_falls_back_to_the_plain_key():
    cfg = build_config(overrides=["listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,MTLS://127.0.0.1:9094",
                                  "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
                                  "ssl.client.auth=requested", "listener.name.mtls.ssl.client.auth=required"])
    assert cfg.listener_config("MTLS", "ssl.client.auth") == "required"
    assert cfg.listener_config("SSL", "ssl.client.auth") == "requested"
    assert cfg.listener_config("SSL", "ssl.enabled.protocols") == ["TLSv1.2", "TLSv1.3"]
    assert not [w for w in cfg.warnings if "listener.name" in w]
